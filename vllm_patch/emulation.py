"""Reject-all timing mode and the acceptance emulator, inside the worker's rejection sampler.

vLLM's rejection sampler returns `out[batch, max_spec_len + 1]`: row r holds the accepted drafts,
then one recovered or bonus token, then PLACEHOLDER (-1). Everything downstream (the scheduler's
`num_accepted = len(tokens) - 1`, the KV rollback, the drafter's next input) is derived from that
tensor, so cutting a row short is the same as the target rejecting there.

Emulation draws, per request-step, u ~ U(0,1) and caps the accepted count at
c = #{i : u < a_i}, so P(first i drafts accepted) = min(a_i, the drafter's real rate).
It can only lower the drafter's real acceptance, never raise it: pick a drafter that accepts
more than the profile you replay (on CPU: ngram on repetitive prompts at temperature 0).
Keeping the first c+1 tokens is exact: each kept token is an accepted draft or vLLM's own
recovered/bonus sample, i.e. a sample of the target distribution.
Reject-all is the all-zero profile: one token per request per step, so a batch of B stays at B.

On GPU, vLLM's `rejection_sample_method: "synthetic"` with `synthetic_acceptance_rates: [0, ...]`
does the same in-tree; the CPU build asserts against synthetic mode, hence this wrapper.

The admin endpoint lives in EngineCore; workers may be other processes. Rates travel through a
small JSON file (TABLETUNE_EMULATION_FILE), re-read when its mtime changes.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

from tuner.core.files import write_atomic

log = logging.getLogger("vllm.tabletune")
ENV_FILE = "TABLETUNE_EMULATION_FILE"


def ensure_channel(initial: tuple[float, ...]) -> str:
    """Create the rates file once (first process that gets here); children inherit the path."""
    path = os.environ.get(ENV_FILE)
    if not path:
        fd, path = tempfile.mkstemp(prefix="tabletune-emulation-", suffix=".json")
        os.close(fd)
        os.environ[ENV_FILE] = path
        _write(path, initial)
    return path


def _write(path: str, rates: tuple[float, ...]) -> None:
    write_atomic(path, json.dumps(list(rates)))


def publish(rates: tuple[float, ...]) -> None:
    """Write new rates for every worker (they re-read the file when its mtime changes)."""
    path = os.environ.get(ENV_FILE)
    if not path:
        raise RuntimeError(f"{ENV_FILE} is not set: emulation was not enabled at startup")
    _write(path, rates)


class Capper:
    """Per-process cache of the current rates, refreshed when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mtime = -1.0
        self.rates: tuple[float, ...] = ()
        self.tensors: dict[Any, Any] = {}

    def current(self) -> tuple[float, ...]:
        """The rates now, re-read only when the file changed."""
        mtime = os.stat(self.path).st_mtime
        if mtime != self.mtime:
            with open(self.path) as f:
                self.rates = tuple(float(x) for x in json.load(f))
            self.mtime, self.tensors = mtime, {}
        return self.rates

    def caps(self, rows: int, width: int, device: Any) -> Any:
        """Per request-step, the most drafts it may keep: c = #{i : u < a_i}, shape [rows, 1]."""
        import torch

        rates = self.current()
        key = (device, width)
        a = self.tensors.get(key)
        if a is None:
            padded = (list(rates) + [rates[-1] if rates else 0.0] * width)[:width]
            a = self.tensors[key] = torch.tensor(padded, dtype=torch.float32, device=device)
        u = torch.rand(rows, 1, device=device)
        return (u < a.unsqueeze(0)).sum(dim=1, keepdim=True)

    def cap(self, out: Any) -> Any:
        """V1 runner: out[batch, max_spec_len + 1], -1 after the last kept token."""
        import torch

        width = out.shape[1] - 1  # max_spec_len
        if width <= 0 or out.shape[0] == 0:
            return out
        caps = self.caps(out.shape[0], width, out.device)               # [batch, 1]
        cols = torch.arange(width + 1, device=out.device).unsqueeze(0)  # [1, width+1]
        return out.masked_fill(cols > caps, -1)                        # -1: vLLM's PLACEHOLDER

    def cap_counts(self, sampled: Any, num_sampled: Any) -> Any:
        """V2 runner: sampled[reqs, steps + 1] with num_sampled[reqs] valid tokens per row; keeping
        at most c + 1 of them is the same cut (a prefill's 0 or 1 token is left as it is)."""
        width = sampled.shape[1] - 1
        if width <= 0 or num_sampled.shape[0] == 0:
            return num_sampled
        caps = self.caps(num_sampled.shape[0], width, num_sampled.device).squeeze(1)
        return num_sampled.minimum((caps + 1).to(num_sampled.dtype))


def install_sampler_wrapper(on_error: Any) -> bool:
    """Wrap vLLM's module-level rejection sampling in this (worker) process: the V1 runner's, and
    the V2 runner's (its sampler returns token counts) unless VLLM_USE_V2_MODEL_RUNNER=0: vLLM
    also picks V2 on its own (e.g. EAGLE on a dense model), and an unused wrapper costs nothing."""
    import vllm.v1.sample.rejection_sampler as rs

    path = os.environ.get(ENV_FILE)
    if not path:
        return False
    capper = Capper(path)
    if not hasattr(rs, "rejection_sample"):
        log.error("TableTune: vllm.v1.sample.rejection_sampler.rejection_sample is missing in this "
                  "vLLM; reject-all/emulation are off")
        return False
    _wrap(rs, lambda out: capper.cap(out), on_error)
    v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "")
    if v2 != "0":
        try:
            import vllm.v1.worker.gpu.spec_decode.rejection_sampler as rs2
        except Exception as exc:  # a vLLM without the V2 runner: only loud if V2 was asked for
            (log.warning if v2 not in ("", "0") else log.debug)(
                "TableTune: V2 rejection sampler not importable (%s); emulation covers the V1 "
                "runner only", exc)
        else:
            _wrap(rs2, lambda res: (res[0], capper.cap_counts(*res)), on_error)
    return True


def _wrap(module: Any, cap: Any, on_error: Any) -> None:
    """Replace `module.rejection_sample` (looked up at call time by vLLM's sampler) once."""
    orig = module.rejection_sample
    if getattr(orig, "_tabletune", False):
        return

    def rejection_sample(*args: Any, **kwargs: Any) -> Any:
        """vLLM's rejection sampling, then the cap; vLLM's own output if the cap fails."""
        out = orig(*args, **kwargs)
        try:
            return cap(out)
        except Exception as exc:  # fall back to vLLM's own acceptance for this step
            on_error(exc)
            return out

    rejection_sample._tabletune = True  # type: ignore[attr-defined]
    module.rejection_sample = rejection_sample
