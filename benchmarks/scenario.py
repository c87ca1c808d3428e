"""The skeleton a bench scenario stands on: what it serves (profile, model, drafter, engine
flags, acceptance replay, its folder), its request pool, and the engine up with the plugin, as
values.

A bench builds its Scenario from the shared flags (``scenario_of``), adds its own traffic and
arms, and serves inside ``serving``: one vLLM with every k of the profile's K in its startup
table (benchmarks/engines.py), its admin client and its engine client, closed in reverse
order whatever ends the bench.

The field, do-no-harm, goodput, switch, sidecar-cost and exploration-cost benches stand on it.
Four build their own engines on purpose: the suite (`benchmarks/run.py`: a second engine
without speculation beside), the honor check (two engines of different K), the plugin's
overhead (plugin on and off) and the stationary run (the profile's own table at startup).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.engines import admin_client, max_model_len, spec_server
from benchmarks.workload import longest_prompt
from benchmarks.workload import requests as cut_to_mix
from tuner import flags
from tuner.core.engine_client import EngineClient
from tuner.core.profile import Profile, load
from tuner.load import Request
from tuner.engine_defaults import resolve_model, vocab_size
from tuner.launcher import VllmServer, free_port, launch
from tuner.prompts import Prompt, repetitive
from tuner.replay import Replay

__all__ = ["Scenario", "Serving", "scenario_of", "serving"]


@dataclass(frozen=True, slots=True)
class Scenario:
    profile_path: Path
    profile: Profile
    model: Path
    drafter: Path | None            # None: the profile's, resolved like the model
    engine_args: tuple[str, ...]    # beside the profile's engine settings
    replay: Replay | None           # forced acceptance (--emulate), if any
    out: Path                       # the bench's folder; the engine's logs under logs/

    def prompts(self, length: int = 96) -> list[Prompt]:
        """The benches' 64 prompts on this model's vocabulary (token ids, ngram-friendly)."""
        return repetitive(64, vocab_size(self.model), length=length, seed=11)

    def requests(self, prompt_tokens: int, max_tokens: int, mix: str = "steady") -> list[Request]:
        """The request pool: the prompts cut to the mix's lengths (benchmarks/workload.py),
        within the engine's --max-model-len."""
        limit = max_model_len(self.engine_args)
        return cut_to_mix(mix, self.prompts(longest_prompt(mix, prompt_tokens, limit)),
                          prompt_tokens, max_tokens, limit)


def scenario_of(args: argparse.Namespace, engine_args: tuple[str, ...]) -> Scenario:
    """From a bench's shared flags (--profile, --model, --drafter, --emulate, --out), with the
    engine flags the bench settled on; InvalidInput names a bad flag."""
    profile_path = Path(args.profile)
    profile = load(profile_path)
    drafter = getattr(args, "drafter", None)
    model = resolve_model(profile.engine.model, getattr(args, "model", None))
    return Scenario(profile_path, profile, model,
                    Path(drafter) if drafter else None, engine_args,
                    flags.replay(args, profile.K), Path(args.out))


@dataclass(frozen=True, slots=True)
class Serving:
    server: VllmServer
    admin: EngineClient     # the plugin's admin API
    engine: EngineClient    # vLLM's /metrics and API


@asynccontextmanager
async def serving(s: Scenario) -> AsyncIterator[Serving]:
    """The scenario's engine, up until the block ends."""
    admin_port = free_port()
    cfg = spec_server(s.profile, s.model, admin_port, s.replay, s.engine_args, s.drafter)
    async with (launch(cfg, log_dir=s.out / "logs") as server, admin_client(admin_port) as admin,
                EngineClient(engine_url=server.url) as engine):
        yield Serving(server, admin, engine)
