"""`tabletune demo` / `make demo`: the whole TableTune loop on the embedded tiny model.

1. a short tune on one vLLM (`--one-server`; the cached profile is reused on a second run);
2. vLLM with the plugin and the tuned table;
3. the sidecar beside it, its decisions and warnings printed as they happen;
4. load that shifts from high acceptance (greedy, repetitive prompts) to low (random prompts
   sampled at temperature 1.5);
5. a closing summary with each stage's time. Everything it starts is stopped on exit, error
   or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

from tabletune.sidecar_process import sidecar_process
from tuner.config import TuneConfig
from tuner.core.engine_client import EngineClient
from tuner.engine_defaults import default_model, plugin_env, vocab_size
from tuner.findings import edge_lines
from tuner.launcher import ServerConfig, SpeculativeSpec, free_port, launch
from tuner.load import closed_loop
from tuner.core.profile import Profile
from tuner.prompts import random_tokens, repetitive
from tuner.report import write_report
from tuner.core.table import Table
from tuner.tune import tune

TOKEN = "demo-token"
PHASES = (("high acceptance: greedy, repetitive prompts", "repetitive", 0.0),
          ("low acceptance: random prompts, temperature 1.5", "random", 1.5))


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Stages:
    """Wall time per stage, for the summary."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t0 = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = now - self._t0
        self._t0 = now


async def tuned_profile(out: Path) -> Profile:
    paths = default_model()
    cfg = TuneConfig(model=paths.target, num_speculative_tokens=3, max_num_seqs=16,
                     grid=[1, 2, 4, 8, 12, 16], repeats=2, max_repeats=3, ci_target=0.05,
                     decode_tokens=17, one_server=True, refine=0,
                     acceptance_prompts=repetitive(48, vocab_size(paths.target), seed=42),
                     acceptance_max_tokens=48, out=out, log_dir=out.parent / "logs")
    say(f"1/4 tuning on one vLLM (K=3, B up to 16) -> {out}"
        + (" (reusing it)" if out.exists() else ""))
    profile = await tune(cfg)
    md, png = write_report(profile, out.with_suffix(""))
    assert profile.acceptance is not None
    say(f"    tuned table {profile.table}, a_i = {[round(a, 2) for a in profile.acceptance.a]}")
    for line in edge_lines(profile.build()):
        say(f"    {line}")
    say(f"    report: {md}, plot: {png}")
    return profile


def sidecar(profile_path: Path, engine_url: str, admin_url: str, log: Path) -> Any:
    return sidecar_process(profile_path, engine_url, admin_url, TOKEN, log, (
        "--interval-s", "0.5", "--rebuild-every-steps", "60", "--prior-decay", "0.5",
        "--allowed-k", "all", "--listen-port", str(free_port()),
        "--checkpoint", str(log.with_suffix(".state.json"))))


def fresh_sidecar_files(out_dir: Path) -> Path:
    """The sidecar's log path for this run, an earlier run's log and checkpoint moved aside
    (``*.prev``): the narrator reads the log from its first line, and a checkpoint would start
    this run's sidecar from where the last one ended (acceptance of its low phase)."""
    log = out_dir / "sidecar.log"
    for path in (log, log.with_suffix(".state.json")):
        if path.exists():
            path.replace(path.with_name(path.name + ".prev"))
    return log


def new_lines(log: Path, seen: int) -> tuple[list[dict[str, Any]], int]:
    """The sidecar's JSON log lines written since line ``seen``."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    out = []
    for line in lines[seen:]:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out, len(lines)


def describe(d: dict[str, Any]) -> str:
    a_hat = ", ".join(f"{a:.2f}" for a in d.get("a_hat", []))
    change = (f"{d.get('old_table')} -> {d.get('new_table')}" if d["outcome"] == "pushed"
              else f"{d.get('new_table')}")
    trigger = d.get("trigger", "scheduled")
    why = "" if trigger == "scheduled" else f" ({trigger})"
    lines = [f"    sidecar: {d['outcome']:<9}{why} â=[{a_hat}] table {change}"]
    if d["outcome"] == "pushed":
        lines += [f"      {evidence(c)}" for c in d.get("changes", []) if c.get("kept")]
    return "\n".join(lines)


def evidence(c: dict[str, Any]) -> str:
    """Why one range changed, in words: measured on the engine (paired runs) or predicted."""
    where = f"B {c['batch_size_start']}-{c['batch_size_end']}: k={c['k_old']} -> k={c['k_new']}"
    m = c.get("measured")
    if c.get("decided_by") == "measured" and m:
        return (f"{where}, measured on this engine: goodput x{m['ratio']:.2f} "
                f"[{m['low']:.2f}, {m['high']:.2f}] over {m['pairs']} paired runs")
    if c["gain_low"] <= 0:  # below confidence: only the futile rule switches a bucket so
        return (f"{where}: k={c['k_old']}'s extra drafts buy nothing at the acceptance measured "
                f"(the model predicts goodput x{1 + c['gain']:.2f})")
    return (f"{where}, predicted by the model (not measured): goodput "
            f"x{1 + c['gain']:.2f}, at least x{1 + c['gain_low']:.2f}")


def words(rec: dict[str, Any]) -> str:
    """A traffic change or a guardrail verdict in one plain line."""
    if rec["event"] == "guardrail verdict":
        v = rec.get("verdict", {})
        back = "rolled back" if v.get("rolled_back") else "kept"
        return (f"guardrail: the push is {back} (goodput x{v.get('ratio', 0):.3f} of before, "
                f"judged by {v.get('judged_by', 'scrapes')})")
    found = rec.get("acceptance")
    if found:
        return (f"traffic change: acceptance at position {found['position']} went from "
                f"{found['older']:.2f} to {found['recent']:.2f} (z = {found['z']:.1f}); "
                "rebuilding from the new traffic")
    cells = rec.get("step_times") or []
    return ("traffic change: step times moved at " + ", ".join(
        f"B {c['batch_size']} k={c['k']} ({c['estimate_ms']:.1f} -> {c['recent_ms']:.1f} ms)"
        for c in cells[:4]) + "; rebuilding")


class Narrator:
    """Prints what the sidecar does: every push, a rebuild where â moved, every warning."""

    def __init__(self, log: Path) -> None:
        self.log, self.seen, self.shown_a = log, 0, None

    def tell(self) -> None:
        records, self.seen = new_lines(self.log, self.seen)
        for rec in records:
            if rec.get("event") == "rebuild":
                self._decision(rec["decision"])
            elif rec.get("event") in ("traffic change", "guardrail verdict"):
                say(f"    sidecar: {words(rec)}")
            elif rec.get("level") in ("WARNING", "ERROR"):
                error = f" ({rec['error']})" if rec.get("error") else ""
                say(f"    sidecar {rec['level'].lower()}: {rec.get('event')}{error}")

    def _decision(self, d: dict[str, Any]) -> None:
        a_hat = d.get("a_hat", [])
        moved = self.shown_a is None or max(
            (abs(x - y) for x, y in zip(a_hat, self.shown_a)), default=0) > 0.05
        if d["outcome"] != "unchanged" or moved:
            say(describe(d))
            self.shown_a = a_hat


async def run_phases(url: str, admin_url: str, narrator: Narrator, vocab: int, seconds: float,
                     load: int) -> list[dict[str, Any]]:
    results = []
    for label, kind, temp in PHASES:
        say(f"3/4 traffic: {label}, {load} open requests, {seconds:.0f} s")
        prompts = (repetitive if kind == "repetitive" else random_tokens)(64, vocab, seed=3)
        tps = []
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            res = await closed_loop(url, prompts, load, 48, 0.5, 5.0, temp)
            tps.append(res.tokens_per_s)
            narrator.tell()
            say(f"    {res.tokens_per_s:6.0f} tokens/s")
        async with EngineClient(admin_url=admin_url) as engine:
            table = (await engine.get_table()).table
        results.append({"phase": label, "tokens_per_s": tps, "table_after": table})
    return results


async def demo(out_dir: Path, seconds: float, load: int) -> int:
    stages = Stages()
    profile = await tuned_profile(out_dir / "profile.json")
    stages.done("tune")
    paths = default_model()
    admin_port = free_port()
    assert profile.table is not None
    start_table = Table.from_list(profile.table)
    cfg = ServerConfig(model=paths.target, max_num_seqs=16,
                       speculative=SpeculativeSpec(num_speculative_tokens=3, table=start_table),
                       env=plugin_env(admin_port, token=TOKEN))
    say(f"2/4 starting vLLM with the plugin and the tuned table {start_table.to_list()}")
    async with launch(cfg, log_dir=out_dir / "logs") as server:
        say(f"    vLLM ready at {server.url} after {server.ready_after_s:.0f}s")
        stages.done("vLLM start")
        admin = f"http://127.0.0.1:{admin_port}"
        log = fresh_sidecar_files(out_dir)
        async with sidecar(out_dir / "profile.json", server.url, admin, log):
            say(f"    sidecar started (log: {log})")
            results = await run_phases(server.url, admin, Narrator(log), vocab_size(paths.target),
                                       seconds, load)
    stages.done("traffic")
    summary(out_dir, start_table, results, stages)
    return 0


def summary(out_dir: Path, start: Table, results: list[dict[str, Any]], stages: Stages) -> None:
    say("4/4 summary (vLLM and the sidecar are stopped)")
    print(f"    tuned table (start):            {start.to_list()}")
    for r in results:
        tps = r["tokens_per_s"]
        print(f"    {r['phase']:<50} median {sorted(tps)[len(tps) // 2]:6.0f} tokens/s, "
              f"table after: {r['table_after']}")
    print(f"    tuner report: {out_dir / 'profile-report.md'} and .png; sidecar decisions: "
          f"{out_dir / 'sidecar.log'}")
    print("    stages: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.seconds.items())
          + f"; total {sum(stages.seconds.values()):.0f} s")


def run(out_dir: Path, seconds: float = 40.0, load: int = 8) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(demo(out_dir, seconds, load))
