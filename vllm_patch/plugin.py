"""TableTune's vLLM plugin: entry point `vllm.general_plugins` → `vllm_patch.plugin:register`.

vLLM calls register() once in every process it starts: the API server, EngineCore and each
worker. It must be re-entrant and cheap, and decides at runtime what to do where:
- everywhere: wrap Scheduler.__init__; only EngineCore builds a Scheduler, and there the hooks
  (hooks.py) and the admin endpoint (admin.py, served by admin_server.py) start;
- where emulation is enabled: wrap the rejection sampler (workers run it);
- in the API server, when the admin endpoint is enabled: publish the counters on /metrics;
- everywhere: work around a vLLM bug that keeps a DSD table from starting at all
  (compat.py: EAGLE drafters on the V2 runner of vLLM 0.26).
Nothing else changes in vLLM unless TABLETUNE_* variables ask for it, except the counting hooks.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from typing import Any

log = logging.getLogger("vllm.tabletune")
_registered = False
ENGINES: list[Any] = []  # EngineState per Scheduler built in this process (for in-process use)


def register() -> None:
    """vLLM's general-plugin entry point: once per process, never raises."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        _register()
    except Exception:  # a broken plugin must never stop vLLM from serving
        log.exception("TableTune plugin failed to load; vLLM runs without it")


def _register() -> None:
    from vllm_patch.settings import from_env

    try:
        settings = from_env()
    except ValueError as exc:
        log.error("TableTune plugin disabled: %s", exc)
        return
    process = multiprocessing.current_process().name
    log.info("TableTune plugin loaded in %s (pid %d)", process, os.getpid())
    if settings.emulation_enabled:
        from vllm_patch import emulation

        rates = (0.0,) if settings.reject_all else (settings.emulate_acceptance or (0.0,))
        emulation.ensure_channel(rates)
        emulation.install_sampler_wrapper(
            lambda exc: log.exception("TableTune emulation failed (%s); real acceptance kept", exc))
    _patch_scheduler(settings)
    from vllm_patch import compat  # any process may build a model runner (in-process engines)

    compat.fix_v2_draft_decode_graphs()
    if settings.admin_port and process == "MainProcess":
        _publish_metrics(settings)


def _patch_scheduler(settings: Any) -> None:
    from vllm.v1.core.sched import scheduler as sched_mod

    cls = sched_mod.Scheduler
    if getattr(cls.__init__, "_tabletune", False):
        return
    orig_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        try:
            _on_scheduler(self, settings)
        except Exception:
            log.exception("TableTune could not hook this Scheduler; vLLM runs unmodified")

    __init__._tabletune = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]


def _on_scheduler(scheduler: Any, settings: Any) -> None:
    from vllm_patch import admin_server, hooks

    missing = hooks.missing_attrs(scheduler, hooks.REQUIRED_SCHEDULER_ATTRS)
    if missing:
        log.error("TableTune: this vLLM's Scheduler lacks %s; the plugin stays off "
                  "(supported: vLLM 0.26-0.32)", ", ".join(missing))
        return
    engine = hooks.engine_state(scheduler, settings)
    hooks.install(scheduler, engine)
    ENGINES.append(engine)
    log.info("TableTune hooks installed: K=%d, max_num_seqs=%d, table=%s, policy=%s",
             engine.num_speculative_tokens, engine.max_num_seqs,
             engine.table.table.to_list() if engine.table else None, engine.policy)
    if settings.admin_port:
        admin_server.serve(engine, settings.admin_host, settings.admin_port, settings.admin_token,
                           uds=settings.admin_uds)


def _publish_metrics(settings: Any) -> None:
    from prometheus_client import REGISTRY

    from vllm_patch.metrics import PluginCollector

    url = f"http://{settings.admin_host}:{settings.admin_port}/v1/stats"
    REGISTRY.register(PluginCollector(url))
