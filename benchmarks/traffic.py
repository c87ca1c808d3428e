"""Named traffic shapes as runs of vLLM's own benchmark client (pure).

A shape is what a user's traffic looks like from the engine: one or more runs of `vllm bench
serve` back to back, each starting fresh (its first requests arrive together, as traffic does
after a quiet spell), on vLLM's `random` dataset: prompt and output lengths uniform on
[L(1 - r), L(1 + r)] (`--random-range-ratio`), greedy, `--ignore-eos` so every request runs to
its drawn length. Sizes come from the bench's flags, so the same shapes fit the CPU's tiny
model and the H200.

- `burst` (`burst-c8`): a closed loop at `--max-concurrency C`: `waves`·C requests, all sent at
  once, at most C in flight; one shape per concurrency given.
- `poisson` (`poisson-r2`): arrivals at `rate` requests/s with the client's `--burstiness`
  (gamma gaps; below 1 burstier than Poisson), `rate·run_s` requests; one shape per rate.
- `ramp` (`ramp-1-8`): up, then down. vLLM's client ramps only up (`--ramp-up-strategy linear`
  refuses a start above the end), so the way down is a staircase of fresh Poisson runs at
  falling rates, each a new run of the client right after the one before.
- `mixed` (`mixed`): long prompts and widely varied output lengths (a range ratio near 1) at
  the first Poisson rate: chat-like requests of very different lives in one batch.

Only flags that vLLM 0.26 (the H200's) and 0.32 (the CPU's) both take (their add_cli_args
differ only in `--probe-request-rate`, unused here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.core.errors import InvalidInput

KINDS = ("burst", "poisson", "ramp", "mixed")


@dataclass(frozen=True, slots=True)
class ClientRun:
    """One run of vLLM's client: its requests (random dataset) and their arrivals."""

    num_prompts: int
    input_len: int
    output_len: int
    input_range: float                  # --random-range-ratio for prompts: L·(1 ± r)
    output_range: float                 # ... and for outputs
    max_concurrency: int | None = None  # None: no cap
    request_rate: float | None = None   # None: all at once (the client's inf)
    burstiness: float = 1.0
    ramp: tuple[int, int] | None = None  # --ramp-up-strategy linear from .. to rps

    def flags(self) -> list[str]:
        """The client's flags for this run (dataset, lengths, arrivals; not the server's)."""
        ratio = (str(self.input_range) if self.input_range == self.output_range else
                 json.dumps({"input": self.input_range, "output": self.output_range}))
        out = ["--dataset-name", "random", "--num-prompts", str(self.num_prompts),
               "--random-input-len", str(self.input_len), "--random-output-len",
               str(self.output_len), "--random-range-ratio", ratio, "--ignore-eos"]
        if self.max_concurrency is not None:
            out += ["--max-concurrency", str(self.max_concurrency)]
        if self.ramp is not None:
            out += ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", str(self.ramp[0]),
                    "--ramp-up-end-rps", str(self.ramp[1])]
        elif self.request_rate is not None:
            out += ["--request-rate", str(self.request_rate)]
        if self.request_rate is not None or self.ramp is not None:
            out += ["--burstiness", str(self.burstiness)]
        return out

    def longest(self) -> int:
        """The most tokens one request can hold: its longest prompt and longest output."""
        return (int(self.input_len * (1 + self.input_range))
                + int(self.output_len * (1 + self.output_range)))


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    runs: tuple[ClientRun, ...]


@dataclass(frozen=True, slots=True)
class Sizes:
    """What the bench's flags say about the shapes' sizes."""

    concurrency: tuple[int, ...] = (8,)
    rates: tuple[float, ...] = (2.0,)
    burstiness: float = 0.5
    ramp: tuple[int, int] = (1, 8)
    input_len: int = 96
    output_len: int = 64
    range_ratio: float = 0.5
    mixed_input_len: int = 384
    mixed_range: float = 0.9
    run_s: float = 20.0      # the arrival-driven shapes' length, as their arrivals are drawn
    waves: int = 4           # a burst sends this many times its concurrency


def _rate_name(r: float) -> str:
    return f"{r:g}".replace(".", "p")


def _poisson(n_s: float, rate: float, s: Sizes, input_len: int, input_range: float,
             output_range: float) -> ClientRun:
    return ClientRun(max(2, round(rate * n_s)), input_len, s.output_len, input_range,
                     output_range, request_rate=rate, burstiness=s.burstiness)


def ramp_runs(s: Sizes) -> tuple[ClientRun, ...]:
    """Up over half of run_s (the client's linear ramp: the i-th of N requests arrives at rate
    lo + (hi - lo)·i/(N - 1), so N requests take about (N - 1)·ln(hi/lo)/(hi - lo) s), then down
    in three fresh runs at hi, the middle and lo, a sixth of run_s each."""
    lo, hi = s.ramp
    up_s = s.run_s / 2
    n_up = max(2, (round(up_s * (hi - lo) / math.log(hi / lo)) + 1) if hi > lo else round(up_s * lo))
    up = ClientRun(n_up, s.input_len, s.output_len, s.range_ratio, s.range_ratio,
                   request_rate=None, burstiness=s.burstiness, ramp=(lo, hi))
    down = tuple(_poisson(s.run_s / 6, r, s, s.input_len, s.range_ratio, s.range_ratio)
                 for r in (float(hi), (hi + lo) / 2, float(lo)))
    return (up, *down)


def shapes(kinds: Sequence[str], s: Sizes) -> list[Shape]:
    """The named shapes in the order given; InvalidInput naming an unknown one."""
    out: list[Shape] = []
    for kind in kinds:
        if kind == "burst":
            out += [Shape(f"burst-c{c}", (ClientRun(s.waves * c, s.input_len, s.output_len,
                                                    s.range_ratio, s.range_ratio,
                                                    max_concurrency=c),))
                    for c in s.concurrency]
        elif kind == "poisson":
            out += [Shape(f"poisson-r{_rate_name(r)}",
                          (_poisson(s.run_s, r, s, s.input_len, s.range_ratio, s.range_ratio),))
                    for r in s.rates]
        elif kind == "ramp":
            out.append(Shape(f"ramp-{s.ramp[0]}-{s.ramp[1]}", ramp_runs(s)))
        elif kind == "mixed":
            out.append(Shape("mixed", (_poisson(s.run_s, s.rates[0], s, s.mixed_input_len,
                                                s.mixed_range, s.mixed_range),)))
        else:
            raise InvalidInput(f"--shapes: {kind!r} is not a shape; use some of "
                               f"{','.join(KINDS)}")
    return out


def check_sizes(s: Sizes, max_model_len: int) -> None:
    """InvalidInput naming the flag whose value no run of the client could serve."""
    if s.ramp[0] < 1 or s.ramp[1] < s.ramp[0]:
        raise InvalidInput(f"--ramp={s.ramp[0]},{s.ramp[1]}: give LOW,HIGH requests/s with "
                           "1 <= LOW <= HIGH (vLLM's client ramps only up, from a rate above 0)")
    for flag, v in (("--range-ratio", s.range_ratio), ("--mixed-range", s.mixed_range)):
        if not 0 <= v < 1:
            raise InvalidInput(f"{flag}={v}: vLLM's --random-range-ratio must lie in [0, 1)")
    if not s.burstiness > 0:
        raise InvalidInput(f"--burstiness={s.burstiness}: must be > 0 (1: Poisson; < 1 burstier)")
    if min(s.rates) <= 0:
        raise InvalidInput(f"--rates={','.join(map(str, s.rates))}: every rate must be > 0")
    for flag, run in (("--input-len/--output-len/--range-ratio", ClientRun(
            1, s.input_len, s.output_len, s.range_ratio, s.range_ratio)),
            ("--mixed-input-len/--mixed-range", ClientRun(
                1, s.mixed_input_len, s.output_len, s.mixed_range, s.mixed_range))):
        if run.longest() > max_model_len:
            raise InvalidInput(f"{flag}: a request may hold {run.longest()} tokens, above the "
                               f"engine's max_model_len {max_model_len}; shorten the lengths "
                               "or raise --max-model-len with --engine-arg")
