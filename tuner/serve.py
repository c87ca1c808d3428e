"""`tabletune serve`: a vLLM with the plugin and a DSD table, for people and for the demo."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from tuner.engine_defaults import default_model, plugin_env
from tuner.launcher import ServerConfig, SpeculativeSpec, VllmServer, launch
from tuner.prompts import repetitive
from tuner.table import Table


def server_config(args: argparse.Namespace) -> ServerConfig:
    paths = default_model()
    model = Path(args.model) if args.model else paths.target
    K = args.num_speculative_tokens
    table = Table.parse_list(json.loads(args.table)) if args.table else Table.from_list(
        [[1, args.max_num_seqs, K]])
    spec = SpeculativeSpec(method=args.method, num_speculative_tokens=K, table=table,
                           draft_model=str(paths.drafter) if args.method == "draft_model" else None)
    emulate = tuple(float(x) for x in args.emulate.split(",")) if args.emulate else None
    return ServerConfig(model=model, max_num_seqs=args.max_num_seqs, port=args.port,
                        speculative=spec, env=plugin_env(args.admin_port, reject_all=args.reject_all,
                                                         emulate=emulate))


def fresh_connections() -> aiohttp.TCPConnector:
    """No keep-alive: uvicorn closes idle connections after 5 s, and a request racing that close
    fails with ServerDisconnectedError (seen between tuner cells on the GPU)."""
    return aiohttp.TCPConnector(limit=0, force_close=True)


async def admin_stats(session: aiohttp.ClientSession, admin_url: str) -> dict[str, Any] | None:
    """The plugin's counters (GET /v1/stats), or None when it does not answer."""
    try:
        async with session.get(admin_url + "/v1/stats") as r:
            return await r.json() if r.status == 200 else None
    except aiohttp.ClientError:
        return None


async def complete(session: aiohttp.ClientSession, url: str, prompt: Any, max_tokens: int,
                   temperature: float = 0.0, model: str = "tiny") -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": temperature, "ignore_eos": True}
    async with session.post(url + "/v1/completions", json=body) as r:
        reply: dict[str, Any] = await r.json()
        if r.status != 200:
            raise RuntimeError(f"completion failed ({r.status}): {reply}")
        return reply


async def smoke(server: VllmServer, n: int = 4) -> None:
    async with aiohttp.ClientSession() as s:
        for prompt in repetitive(n, vocab_size=_vocab(server)):
            t0 = time.perf_counter()
            reply = await complete(s, server.url, prompt, 32)
            dt = time.perf_counter() - t0
            print(f"  {dt * 1000:6.0f} ms  {reply['usage']['completion_tokens']} tokens: "
                  f"{reply['choices'][0]['text'][:60]!r}")


def _vocab(server: VllmServer) -> int:
    return int(json.loads((server.cfg.model / "config.json").read_text())["vocab_size"])


async def serve_forever(args: argparse.Namespace) -> int:
    cfg = server_config(args)
    print(f"starting vLLM ({cfg.model.name}, {cfg.speculative.to_json() if cfg.speculative else ''})")
    async with launch(cfg) as server:
        print(f"vLLM ready at {server.url} after {server.ready_after_s:.0f}s (log: {server.log_path})")
        await smoke(server)
        if args.smoke:
            return 0
        print("serving; Ctrl-C stops it")
        await asyncio.Event().wait()
    return 0
