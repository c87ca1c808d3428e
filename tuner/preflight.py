"""The paper's "check the engine first": vLLM without speculation at a few batch sizes against the
table's k=0 (and the best k), so a table whose k=0 is no off switch, or a drafter that never
pays, is said before anyone deploys it."""

from __future__ import annotations

import statistics

from tuner import findings
from tuner.cells import timing_prompts
from tuner.config import TuneConfig
from tuner.engine_defaults import plugin_env
from tuner.core.goodput import tau
from tuner.launcher import ServerConfig, free_port, launch
from tuner.core.profile import Preflight, Profile
from tuner.sweep import CellTimer

__all__ = ["preflight"]


async def preflight(cfg: TuneConfig, profile: Profile) -> None:
    """The paper's 'check the engine first': no speculation at all vs the table's k=0 (and the
    best k) at a few B. Warns when k=0 is slower than no speculation (drafters that still run
    at k=0, or a table dropping full CUDA graphs) or when no k beats plain decoding."""
    batch_sizes = sorted({cfg.grid[0], cfg.grid[len(cfg.grid) // 2], cfg.grid[-1]})
    admin_port = free_port()
    server_cfg = ServerConfig(model=cfg.model, max_num_seqs=cfg.max_num_seqs,
                              env=plugin_env(admin_port),
                              extra_args=("--no-enable-prefix-caching", *cfg.extra_args))
    nospec: list[float] = []
    async with launch(server_cfg, log_dir=cfg.log_dir) as server:
        async with CellTimer(server, f"http://127.0.0.1:{admin_port}", timing_prompts(cfg)) as timer:
            await timer.warm_up([batch_sizes[0], batch_sizes[-1]])
            for B in batch_sizes:
                runs = [await timer.time_cell(B, 0, r, cfg.decode_tokens) for r in range(cfg.repeats)]
                nospec.append(statistics.median(s.step_ms for s in runs))
    T = profile.step_time_matrix()
    k0 = [float(T[cfg.grid.index(B), 0]) for B in batch_sizes]
    warnings = []
    for B, plain, zero in zip(batch_sizes, nospec, k0):
        if zero > plain * 1.05:
            warnings.append(f"B={B}: the table's k=0 step is {zero / plain - 1:.0%} slower than no "
                            f"speculation ({zero:.2f} vs {plain:.2f} ms): at loads where k=0 is chosen, "
                            "serving without speculation is faster")
    if profile.acceptance is not None:
        taus = tau(profile.acceptance.a)
        for B, plain in zip(batch_sizes, nospec):
            row = T[cfg.grid.index(B)]
            best = max(taus[k] / row[k] for k in range(profile.K + 1))
            if best < 1 / plain:
                warnings.append(f"B={B}: no k beats plain decoding ({1 / plain:.3f} vs {best:.3f} "
                                "tokens/ms per request): speculation with a table costs throughput here")
    warnings = warnings or ["no problem found: k=0 within 5% of no speculation"]
    # and whether the engine runs the table's k at all (the tuner's honor check)
    profile.preflight = Preflight(B=batch_sizes, nospec_ms=nospec, k0_ms=k0,
                                  warnings=warnings + findings.honor_warnings(profile))
    profile.save(cfg.out)
