"""The skeleton a bench scenario stands on: what it serves (model, speculation, drafter, engine
flags, acceptance replay, its folder, and the profile when it has one), its request pool, and
the engine up with the plugin, as values.

A bench with a --profile builds its Scenario from the shared flags (``scenario_of``); one
without (the honor check, the switch cost, the plugin's overhead) builds a Rig, the same
minus the profile, from its own engine flags. Either adds its own traffic and arms, and serves
inside ``serving``: one vLLM with every k of K in its startup table, its admin client and its
engine client, closed in reverse order whatever ends the bench. A ``Startup`` starts it
otherwise, each change named: another K or startup table (the honor check's second engine, the
switch cost's two k's, the stationary run's profile table), no speculation (the suite's
`nospec` engine beside), the plugin off (the overhead's A/B), the tuner's reject-all timing.

Every bench that starts a vLLM stands on it: the suite (benchmarks/run.py), field, do-no-harm,
goodput, switch, honor, switch cost, overhead, stationary, resume, sidecar-cost,
exploration-cost and poll-cost.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks.engines import TOKEN, max_model_len
from benchmarks.workload import longest_prompt
from benchmarks.workload import requests as cut_to_mix
from tuner import flags
from tuner.core.engine_client import EngineClient
from tuner.core.profile import Profile, load
from tuner.core.table import Table, every_k_table
from tuner.engine_defaults import plugin_env, resolve_model, vocab_size
from tuner.launcher import ServerConfig, SpeculativeSpec, VllmServer, free_port, launch
from tuner.load import Request
from tuner.prompts import Prompt, random_tokens, repetitive
from tuner.replay import Replay

PromptKind = Literal["repetitive", "random"]  # ngram-friendly token ids, or not

__all__ = ["PromptKind", "Rig", "Scenario", "Serving", "Startup", "on_profile", "scenario_of", "serving"]


@dataclass(frozen=True, slots=True)
class Startup:
    """How the engine starts; the defaults are ``serving``'s: every k of K, the plugin's admin
    API with the bench's token, the replay's rates in vLLM and the plugin's emulator."""

    K: int | None = None            # num_speculative_tokens, the replay cut to K; None: the rig's
    table: Table | None = None      # the startup table; None: every k of K
    is_speculative: bool = True     # False: vLLM without speculation (nothing answers the admin client)
    has_plugin: bool = True         # False: VLLM_PLUGINS=none
    token: str | None = TOKEN       # None: an admin API without a token
    reject_all: bool = False        # the tuner's timing mode: every draft rejected, B stays B
    restrict_k: bool = False        # the plugin takes only the startup table's k's
    emulates: bool = True           # the replay's rates also cap the plugin's emulator


@dataclass(frozen=True, slots=True)
class Rig:
    """What a bench serves, with or without a profile, and its request pool."""

    model: Path
    method: str
    K: int
    max_num_seqs: int
    drafter: Path | None            # the drafter's folder; None: none (ngram)
    engine_args: tuple[str, ...]    # the bench's vLLM flags, as it settled them
    replay: Replay | None           # forced acceptance (--emulate), if any
    out: Path                       # the bench's folder; the engine's logs under logs/

    def prompts(self, length: int = 96, seed: int = 11, count: int = 64,
                kind: PromptKind = "repetitive") -> list[Prompt]:
        """The benches' prompts on this model's vocabulary: token ids, ngram-friendly
        (repetitive) or not (random)."""
        make = repetitive if kind == "repetitive" else random_tokens
        return make(count, vocab_size(self.model), length=length, seed=seed)

    def requests(self, prompt_tokens: int, max_tokens: int, mix: str = "steady",
                 kind: PromptKind = "repetitive", prompt_seed: int = 11, seed: int = 0) -> list[Request]:
        """The request pool: the prompts cut to the mix's lengths (benchmarks/workload.py),
        within the engine's --max-model-len."""
        limit = max_model_len(self.engine_args)
        long = self.prompts(longest_prompt(mix, prompt_tokens, limit), prompt_seed, kind=kind)
        return cut_to_mix(mix, long, prompt_tokens, max_tokens, limit, seed=seed)

    def server(self, admin_port: int, start: Startup = Startup()) -> ServerConfig:
        """The engine as `start` says. Every k in the startup table by default: the GPU V2 runner
        captures full CUDA graphs only for the startup table's k's."""
        if not start.is_speculative:
            return ServerConfig(model=self.model, max_num_seqs=self.max_num_seqs,
                                extra_args=self.engine_args)
        K, n, replay = (self.K if start.K is None else start.K), self.max_num_seqs, self.replay
        if replay and start.K is not None:  # vLLM's synthetic acceptance: one rate per position
            replay = replay.model_copy(update={"rates": replay.rates[:K]})
        spec = SpeculativeSpec(method=self.method, num_speculative_tokens=K,
                               table=every_k_table(K, n) if start.table is None else start.table,
                               draft_model=str(self.drafter) if self.drafter else None,
                               extra=replay.speculative_extra() if replay else {})
        return ServerConfig(model=self.model, max_num_seqs=n, speculative=spec,
                            env=_env(admin_port, start, replay), extra_args=self.engine_args)


def _env(admin_port: int, start: Startup, replay: Replay | None) -> dict[str, str]:
    if not start.has_plugin:
        return {"VLLM_PLUGINS": "none"}
    emulate = replay.emulator_rates() if replay and start.emulates else None
    env = plugin_env(admin_port, token=start.token, reject_all=start.reject_all, emulate=emulate)
    return {**env, "TABLETUNE_RESTRICT_K": "1"} if start.restrict_k else env


@dataclass(frozen=True, slots=True)
class Scenario(Rig):
    profile_path: Path
    profile: Profile


def on_profile(profile_path: Path, profile: Profile, model: Path, out: Path,
               engine_args: tuple[str, ...] = (), replay: Replay | None = None,
               drafter: Path | None = None) -> Scenario:
    """The scenario serving `profile`'s engine: its method, K, max_num_seqs and drafter
    (`drafter`, else the one the profile names, resolved like the model)."""
    e = profile.engine
    path = drafter or (resolve_model(e.drafter, None, "--drafter") if e.drafter else None)
    return Scenario(model=model, method=e.method, K=profile.K, max_num_seqs=e.max_num_seqs,
                    drafter=path, engine_args=engine_args, replay=replay, out=out,
                    profile_path=profile_path, profile=profile)


def scenario_of(args: argparse.Namespace, engine_args: tuple[str, ...]) -> Scenario:
    """From a bench's shared flags (--profile, --model, --drafter, --emulate, --out), with the
    engine flags the bench settled on; InvalidInput names a bad flag."""
    profile_path = Path(args.profile)
    profile = load(profile_path)
    drafter = getattr(args, "drafter", None)
    model = resolve_model(profile.engine.model, getattr(args, "model", None))
    return on_profile(profile_path, profile, model, Path(args.out), engine_args,
                      flags.replay(args, profile.K), Path(drafter) if drafter else None)


@dataclass(frozen=True, slots=True)
class Serving:
    server: VllmServer
    admin: EngineClient     # the plugin's admin API
    engine: EngineClient    # vLLM's /metrics and API


@asynccontextmanager
async def serving(s: Rig, start: Startup = Startup(),
                  log_dir: Path | None = None) -> AsyncIterator[Serving]:
    """The rig's engine as `start` says, up until the block ends; its log under `log_dir`
    (default: the bench's folder's logs/)."""
    admin_port = free_port()
    async with (launch(s.server(admin_port, start), log_dir=log_dir or s.out / "logs") as server,
                EngineClient(admin_url=f"http://127.0.0.1:{admin_port}", token=start.token,
                             timeout_s=30.0) as admin,
                EngineClient(engine_url=server.url) as engine):
        yield Serving(server, admin, engine)
