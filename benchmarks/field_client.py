"""vLLM's own benchmark client (`vllm bench serve`) as a library: one run, and what users read.

Measuring with the field's client means the figures are the ones a user of vLLM compares
(issue #35): output throughput, TTFT/TPOT/ITL percentiles, spec-decode acceptance, all computed
by `vllm.benchmarks.serve.main_async` from its own requests. Its flags are parsed by vLLM's own
`FlexibleArgumentParser`, so a flag a vLLM release renamed fails here as it would for a user.

vLLM is imported at the first run (about 30 s on the 2-core CPU box), never at import, so the
bench's --help and its input errors stay fast. The client prints its report on stdout; that
goes to a log file, so the bench's own progress lines on stderr stay readable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.traffic import ClientRun

PERCENTILES = "50,90,99"


class ClientResult(BaseModel):
    """The fields of the client's result that users read (the whole dict is saved beside)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    duration: float
    completed: int
    failed: int = 0
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    mean_ttft_ms: float
    p50_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    p50_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    p50_itl_ms: float
    p99_itl_ms: float
    spec_decode_acceptance_length: float | None = None  # None: the server does not speculate
    spec_decode_per_position_acceptance_rates: list[float] = []
    request_goodput: float | None = None  # requests/s meeting every --goodput SLO (None: none given)


def client_argv(run: ClientRun, host: str, port: int, model: Path, served_name: str,
                seed: int) -> list[str]:
    """The client's command line for one run against the server at host:port (greedy; the
    tokenizer is the model folder's, the requests name the served model)."""
    return ["--host", host, "--port", str(port), "--model", str(model),
            "--served-model-name", served_name, "--seed", str(seed), "--temperature", "0",
            "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", PERCENTILES, *run.flags()]


def parse(argv: list[str]) -> argparse.Namespace:
    """vLLM's own parser over `argv` (SystemExit 2 on a flag it does not know)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args: argparse.Namespace = parser.parse_args(argv)
    return args


async def run_client(argv: list[str], log: Path) -> dict[str, Any]:
    """One run of `vllm bench serve` in this process; its result dict, made JSON-plain (the
    file `--save-result` would write: per-request lists are dropped without --save-detailed)."""
    from vllm.benchmarks.serve import main_async

    args = parse(argv)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f, contextlib.redirect_stdout(f):
        result = await main_async(args)
    plain: dict[str, Any] = json.loads(json.dumps(result, default=_plain))
    return plain


def _plain(value: Any) -> Any:
    """numpy scalars and arrays in the client's result as JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")
