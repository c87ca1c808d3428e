"""`tabletune serve`: a vLLM with the plugin and a DSD table, for people and for the demo."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import aiohttp

from tuner import flags
from tuner.engine_defaults import default_model, plugin_env, vocab_size
from tuner.core.errors import InvalidInput
from tuner.launcher import ServerConfig, SpeculativeSpec, VllmServer, launch
from tuner.load import complete
from tuner.prompts import repetitive
from tuner.core.table import Table, check_for_engine


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p: argparse.ArgumentParser = sub.add_parser(
        "serve", help="start vLLM with the TableTune plugin and a DSD table")
    p.add_argument("--model", help="model path (default: the embedded tiny Llama)")
    p.add_argument("--method", default="ngram", choices=["ngram", "draft_model"])
    p.add_argument("--num-speculative-tokens", "-K", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--port", type=int, default=None, help="vLLM port (default: a free one)")
    p.add_argument("--table", default=None, help="DSD table as JSON, e.g. '[[1,8,3],[9,32,1]]'")
    p.add_argument("--admin-port", type=int, default=None, help="plugin admin port (off if unset)")
    p.add_argument("--reject-all", action="store_true", help="timing mode: reject every draft")
    p.add_argument("--emulate", default=None, help="acceptance emulator rates, e.g. 0.7,0.5,0.3")
    p.add_argument("--smoke", action="store_true", help="send a few completions, print, and stop")
    return p


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The flags as a ServerConfig; InvalidInput naming the flag on a bad value."""
    K = args.num_speculative_tokens
    if K < 1:
        raise InvalidInput(f"--num-speculative-tokens={K}: K must be >= 1")
    if args.max_num_seqs < 1:
        raise InvalidInput(f"--max-num-seqs={args.max_num_seqs}: must be >= 1")
    table = (flags.table(args.table, "--table") if args.table
             else Table.from_list([[1, args.max_num_seqs, K]]))
    try:
        check_for_engine(table, K, args.max_num_seqs)
    except ValueError as exc:
        raise InvalidInput(f"--table={args.table!r}: {exc}") from None
    emulate = flags.rates(args.emulate, "--emulate")
    if emulate is not None:
        flags.replay(argparse.Namespace(emulate=args.emulate, emulate_with="plugin"))
    paths = default_model()
    model = Path(args.model) if args.model else paths.target
    spec = SpeculativeSpec(method=args.method, num_speculative_tokens=K, table=table,
                           draft_model=str(paths.drafter) if args.method == "draft_model" else None)
    return ServerConfig(model=model, max_num_seqs=args.max_num_seqs, port=args.port,
                        speculative=spec,
                        env=plugin_env(args.admin_port, reject_all=args.reject_all,
                                       emulate=tuple(emulate) if emulate else None))


async def smoke(server: VllmServer, n: int = 4) -> None:
    async with aiohttp.ClientSession() as s:
        for prompt in repetitive(n, vocab_size(server.cfg.model)):
            t0 = time.perf_counter()
            reply = await complete(s, server.url, prompt, 32)
            dt = time.perf_counter() - t0
            print(f"  {dt * 1000:6.0f} ms  {reply['usage']['completion_tokens']} tokens: "
                  f"{reply['choices'][0]['text'][:60]!r}")


async def serve_forever(cfg: ServerConfig, smoke_only: bool = False) -> int:
    print(f"starting vLLM ({cfg.model.name}, {cfg.speculative.to_json() if cfg.speculative else ''})")
    async with launch(cfg) as server:
        print(f"vLLM ready at {server.url} after {server.ready_after_s:.0f}s (log: {server.log_path})")
        await smoke(server)
        if smoke_only:
            return 0
        print("serving; Ctrl-C stops it")
        await asyncio.Event().wait()
    return 0
