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

With `--prompts FILE` every run draws its requests from the user's own prompts instead (the
client's `custom` dataset: a JSONL file, one `{"prompt": ..., "output_tokens": N}` a line,
`output_tokens` optional), shuffled by the run's seed and drawn again when a run wants more
than the file holds; the prompts' lengths are theirs, the outputs' the file's where every line
gives one, else `--output-len`. `mixed` (long random prompts) has no meaning there.

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
class Prompts:
    """The user's prompts file (the client's `custom` dataset), checked by `read_prompts`."""

    path: str
    lines: int
    own_lengths: bool       # every line gives output_tokens: the client takes them
    chat_template: bool     # wrap each prompt in the model's chat template (vLLM's default)

    def flags(self, num_prompts: int, output_len: int) -> list[str]:
        out = ["--dataset-name", "custom", "--dataset-path", self.path, "--num-prompts",
               str(num_prompts), "--custom-output-len",
               "-1" if self.own_lengths else str(output_len), "--ignore-eos"]
        return out if self.chat_template else [*out, "--skip-chat-template"]


def read_prompts(path: str, text: str, chat_template: bool) -> Prompts:
    """The prompts file's text checked as the client will read it: InvalidInput naming the
    line and the fix."""
    fix = 'one JSON object a line: {"prompt": "...", "output_tokens": 128} (output_tokens optional)'
    if not path.endswith(".jsonl"):
        raise InvalidInput(f"--prompts={path}: vLLM's custom dataset reads only .jsonl files; "
                           f"write {fix}")
    own = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"--prompts={path}: line {i} is not JSON ({exc.msg}); {fix}") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"]:
            raise InvalidInput(f"--prompts={path}: line {i} has no \"prompt\" text; {fix}")
        n = row.get("output_tokens")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise InvalidInput(f"--prompts={path}: line {i}: output_tokens={n!r} must be a "
                               "whole number >= 1 (or left out)")
        own.append(n is not None)
    if not own:
        raise InvalidInput(f"--prompts={path}: no prompts in it; {fix}")
    return Prompts(path, len(own), all(own), chat_template)


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
    prompts: Prompts | None = None       # the user's prompts instead of random ones

    def flags(self) -> list[str]:
        """The client's flags for this run (dataset, lengths, arrivals; not the server's)."""
        if self.prompts is not None:
            out = self.prompts.flags(self.num_prompts, self.output_len)
        else:
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
        """The most tokens one request can hold: its longest prompt and longest output (random
        prompts; the user's own are as long as they are)."""
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
    prompts: Prompts | None = None  # the user's prompts (every run's), else random ones


def _rate_name(r: float) -> str:
    return f"{r:g}".replace(".", "p")


def _poisson(n_s: float, rate: float, s: Sizes, input_len: int, input_range: float,
             output_range: float) -> ClientRun:
    return ClientRun(max(2, round(rate * n_s)), input_len, s.output_len, input_range,
                     output_range, request_rate=rate, burstiness=s.burstiness,
                     prompts=s.prompts)


def ramp_runs(s: Sizes) -> tuple[ClientRun, ...]:
    """Up over half of run_s (the client's linear ramp: the i-th of N requests arrives at rate
    lo + (hi - lo)·i/(N - 1), so N requests take about (N - 1)·ln(hi/lo)/(hi - lo) s), then down
    in three fresh runs at hi, the middle and lo, a sixth of run_s each."""
    lo, hi = s.ramp
    up_s = s.run_s / 2
    n_up = max(2, (round(up_s * (hi - lo) / math.log(hi / lo)) + 1) if hi > lo else round(up_s * lo))
    up = ClientRun(n_up, s.input_len, s.output_len, s.range_ratio, s.range_ratio,
                   request_rate=None, burstiness=s.burstiness, ramp=(lo, hi), prompts=s.prompts)
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
                                                    max_concurrency=c, prompts=s.prompts),))
                    for c in s.concurrency]
        elif kind == "poisson":
            out += [Shape(f"poisson-r{_rate_name(r)}",
                          (_poisson(s.run_s, r, s, s.input_len, s.range_ratio, s.range_ratio),))
                    for r in s.rates]
        elif kind == "ramp":
            out.append(Shape(f"ramp-{s.ramp[0]}-{s.ramp[1]}", ramp_runs(s)))
        elif kind == "mixed" and s.prompts is not None:
            raise InvalidInput("--shapes: mixed draws long random prompts, and --prompts "
                               "replaces them with yours; drop mixed from --shapes")
        elif kind == "mixed":
            out.append(Shape("mixed", (_poisson(s.run_s, s.rates[0], s, s.mixed_input_len,
                                                s.mixed_range, s.mixed_range),)))
        else:
            raise InvalidInput(f"--shapes: {kind!r} is not a shape; use some of "
                               f"{','.join(KINDS)}")
    return out


def check_sizes(s: Sizes, max_model_len: int, kinds: Sequence[str] = KINDS) -> None:
    """InvalidInput naming the flag whose value no run of the shapes `kinds` could serve (the
    user's own prompts are as long as they are: only random ones are checked)."""
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
    for flag, run, used in (("--input-len/--output-len/--range-ratio", ClientRun(
            1, s.input_len, s.output_len, s.range_ratio, s.range_ratio),
            s.prompts is None and any(k != "mixed" for k in kinds)),
            ("--mixed-input-len/--mixed-range", ClientRun(
                1, s.mixed_input_len, s.output_len, s.mixed_range, s.mixed_range),
             "mixed" in kinds)):
        if used and run.longest() > max_model_len:
            raise InvalidInput(f"{flag}: a request may hold {run.longest()} tokens, above the "
                               f"engine's max_model_len {max_model_len}; shorten the lengths "
                               "or raise --max-model-len with --engine-arg")
