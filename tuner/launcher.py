"""Start and stop a real vLLM OpenAI server as a child process group.

One launcher serves the tuner, the demo, the benchmarks and the tests:

    async with launch(ServerConfig(model=..., speculative=SpeculativeSpec(...))) as server:
        ... server.url ...

The server runs in its own session (process group), so stopping it takes the EngineCore and its
workers along: SIGTERM to the group, then SIGKILL after `stop_timeout_s`. The context manager stops
it on exit, on error and on Ctrl-C/cancellation; an atexit hook catches interpreter exits that skip
`finally`. A server that dies during startup raises EngineStartError naming the cause and showing
the tail of its log.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.core.errors import EngineStartError, InvalidInput
from tuner.core.table import Table, check_for_engine

LOG_TAIL_LINES = 25
_CAUSE = re.compile(r"(\w+(Error|Exception)|error|Error|Killed|RuntimeError)[:\s]")


# methods whose drafter is a model at a path (vLLM's speculative_config.model); EAGLE heads need
# vLLM's V2 runner on 0.26 for full CUDA graphs per K (VLLM_USE_V2_MODEL_RUNNER=1)
MODEL_DRAFTERS = ("draft_model", "eagle", "eagle3")


class SpeculativeSpec(BaseModel):
    """The `--speculative-config` of one server, validated before anything starts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = "ngram"
    num_speculative_tokens: int = Field(ge=1)
    table: Table | None = None
    draft_model: str | None = None
    prompt_lookup_max: int = 3
    prompt_lookup_min: int = 1
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("table", mode="before")
    @classmethod
    def _table_from_list(cls, v: Any) -> Any:
        return Table.parse_list(v) if isinstance(v, list) else v

    @model_validator(mode="after")
    def _check(self) -> SpeculativeSpec:
        if self.method in MODEL_DRAFTERS and not self.draft_model:
            raise ValueError(f"method={self.method!r} needs draft_model (the drafter's path)")
        return self

    def to_json(self) -> str:
        cfg: dict[str, Any] = {"method": self.method,
                               "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            cfg.update(prompt_lookup_max=self.prompt_lookup_max,
                       prompt_lookup_min=self.prompt_lookup_min)
        if self.draft_model:
            cfg["model"] = self.draft_model
        if self.table is not None:
            cfg["num_speculative_tokens_per_batch_size"] = self.table.to_list()
        cfg.update(self.extra)
        return json.dumps(cfg, separators=(",", ":"))


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path
    served_model_name: str = "tiny"
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    max_num_seqs: int = Field(default=32, ge=1)
    max_model_len: int | None = 1024
    # The tiny model is float32 and vLLM's "auto" would downcast it; real models override this
    # with extra_args ("--dtype", "bfloat16"): vLLM's parser takes the last occurrence.
    dtype: str | None = "float32"
    speculative: SpeculativeSpec | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    log_path: Path | None = None
    startup_timeout_s: float = 600.0  # a large model, or a loaded 2-core box, can take minutes
    stop_timeout_s: float = 15.0

    @model_validator(mode="after")
    def _check(self) -> ServerConfig:
        spec = self.speculative
        if spec is not None and spec.table is not None:
            check_for_engine(spec.table, spec.num_speculative_tokens, self.max_num_seqs)
        return self


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def default_env() -> dict[str, str]:
    """Environment every TableTune-started vLLM gets unless the caller overrides it."""
    return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1"}


def command(cfg: ServerConfig, port: int) -> list[str]:
    args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(cfg.model), "--served-model-name", cfg.served_model_name,
            "--host", cfg.host, "--port", str(port), "--max-num-seqs", str(cfg.max_num_seqs),
            "--seed", "0"]
    if cfg.max_model_len is not None:
        args += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.dtype is not None:
        args += ["--dtype", cfg.dtype]
    if cfg.speculative is not None:
        args += ["--speculative-config", cfg.speculative.to_json()]
    return args + list(cfg.extra_args)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


# what the API server says when EngineCore died: true, and useless without the cause above it
_WRAPPER = re.compile(r"Engine core initialization failed|See root cause above|See stack trace|"
                      r"EngineDeadError|Failed core proc")


def startup_cause(path: Path) -> str:
    """The most telling line of a failed start: the last exception message in the log that is
    not the API server's "engine core initialization failed" (whose cause is further up)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "the log could not be read"
    found = [line.strip() for line in reversed(lines)
             if _CAUSE.search(line) and "Traceback" not in line and "Warning" not in line]
    for line in found:
        if not _WRAPPER.search(line):
            return line
    return found[0] if found else "the process exited without an error message"


class VllmServer:
    """A running vLLM server; create it with `launch()`."""

    def __init__(self, cfg: ServerConfig, port: int, log_path: Path) -> None:
        self.cfg = cfg
        self.port = port
        self.log_path = log_path
        self.url = f"http://{cfg.host}:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_after_s: float | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **default_env(), **self.cfg.env}
        with open(self.log_path, "ab") as log:
            log.write(f"=== {time.strftime('%F %T')} {' '.join(command(self.cfg, self.port))}\n"
                      .encode())
            log.flush()
            self.proc = subprocess.Popen(command(self.cfg, self.port), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        atexit.register(self.stop)

    async def wait_ready(self) -> None:
        t0 = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise EngineStartError(
                        f"vLLM exited during startup (exit code {code}): "
                        f"{startup_cause(self.log_path)}\n--- log tail ({self.log_path}) ---\n"
                        f"{log_tail(self.log_path)}")
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(self.url + "/v1/models") as r:
                        if r.status == 200:
                            self.ready_after_s = time.monotonic() - t0
                            return
                if time.monotonic() - t0 > self.cfg.startup_timeout_s:
                    raise EngineStartError(
                        f"vLLM was not ready after {self.cfg.startup_timeout_s:.0f}s "
                        f"(startup_timeout_s); raise it on a slow machine.\n--- log tail "
                        f"({self.log_path}) ---\n{log_tail(self.log_path)}")
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        """SIGTERM the whole process group, then SIGKILL it; idempotent, safe from atexit."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        for sig, wait_s in ((signal.SIGTERM, self.cfg.stop_timeout_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait_s)
                # The leader is gone; stragglers in the group (workers) still get the SIGKILL.
                if sig == signal.SIGTERM:
                    continue
                return

    @property
    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@contextlib.asynccontextmanager
async def launch(cfg: ServerConfig, log_dir: Path | None = None) -> AsyncIterator[VllmServer]:
    port = cfg.port or free_port(cfg.host)
    log_path = cfg.log_path or (log_dir or Path("runs/logs")) / f"vllm-{port}.log"
    server = VllmServer(cfg, port, log_path)
    try:
        server.start()
        await server.wait_ready()
        yield server
    finally:
        await asyncio.get_running_loop().run_in_executor(None, server.stop)


def parse_spec(raw: str | dict[str, Any], num_speculative_tokens: int | None = None) -> SpeculativeSpec:
    """A SpeculativeSpec from vLLM's JSON form (as an operator would paste it)."""
    data = json.loads(raw) if isinstance(raw, str) else dict(raw)
    try:
        known = {"method": data.pop("method", "ngram"),
                 "num_speculative_tokens": data.pop("num_speculative_tokens", num_speculative_tokens),
                 "table": data.pop("num_speculative_tokens_per_batch_size", None),
                 "draft_model": data.pop("model", None)}
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            if key in data:
                known[key] = data.pop(key)
        return SpeculativeSpec(**known, extra=data)
    except ValueError as exc:
        raise InvalidInput(f"speculative config {raw!r}: {exc}") from exc
