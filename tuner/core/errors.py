"""TableTune's one small exception tree, shared by tuner/, sidecar/ and vllm_patch/.

    TableTuneError
     ├── InvalidTable        (also a ValueError: a bad num_speculative_tokens_per_batch_size)
     ├── InvalidInput        (also a ValueError: bad numbers handed to the pure core)
     ├── ProfileMismatch     (a profile measured for another model, GPU or K)
     ├── EngineUnavailable   (vLLM does not answer, or answers with an error)
     ├── EngineStartError    (a vLLM child process failed to become ready)
     └── ScrapeError         (a /metrics body that cannot be read as the expected counters)

Messages state the field, the value and the fix, e.g.
``InvalidTable("ranges[2]: start_bs=65 overlaps the previous range ending at 80; ...")``.
Library errors are wrapped with their source: ``raise ScrapeError(f"{url}: {exc}") from exc``.

stdlib only: this module is imported inside the vLLM engine process.
"""

from __future__ import annotations

__all__ = [
    "EngineStartError",
    "EngineUnavailable",
    "InvalidInput",
    "InvalidTable",
    "ProfileMismatch",
    "ScrapeError",
    "TableTuneError",
]


class TableTuneError(Exception):
    """Base of every error TableTune raises on purpose."""


class InvalidTable(TableTuneError, ValueError):
    """A draft-length table that vLLM would reject or that does not fit this engine."""


class InvalidInput(TableTuneError, ValueError):
    """Numbers handed to the pure core (step times, acceptance, grids) that make no sense."""


class ProfileMismatch(TableTuneError):
    """A profile that was measured for a different model, GPU or num_speculative_tokens."""


class EngineUnavailable(TableTuneError):
    """The vLLM engine (or the plugin's admin endpoint) cannot be reached or refuses."""


class EngineStartError(TableTuneError):
    """A vLLM child process exited or timed out before it became ready."""


class ScrapeError(TableTuneError):
    """A Prometheus /metrics body that is garbage or breaks a counter invariant."""
