"""The sidecar process: the only ``asyncio.run()``, logging, signals and the TaskGroup.

Two root tasks run in one TaskGroup: the control loop (tick, then an interruptible sleep)
and the HTTP server. SIGTERM/SIGINT only set the stop Event; whichever root task ends first
sets it too, so everything stops together. Shutdown order (uvicorn's): let the running tick
finish (at most STOP_GRACE_S, then cancel it), checkpoint, close the server and the client
session; the whole takes well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from pydantic import ValidationError

from sidecar import logs
from sidecar.controller import Controller
from sidecar.server import serve
from sidecar.settings import SidecarSettings
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput, ProfileMismatch, TableTuneError
from tuner.core.profile import Profile, load

__all__ = ["backoff_delay", "cli", "control_loop", "main", "run"]

log = logging.getLogger("sidecar")
STOP_GRACE_S = 0.5


def backoff_delay(settings: SidecarSettings, failures: int) -> float:
    """interval_s while scrapes succeed; doubling per consecutive failure up to backoff_max_s."""
    if failures == 0:
        return settings.interval_s
    ceiling = max(settings.backoff_max_s, settings.interval_s)
    return float(min(settings.interval_s * 2 ** min(failures, 16), ceiling))


async def _tick_or_stop(controller: Controller, stop: asyncio.Event) -> None:
    """One tick; on stop the running tick gets STOP_GRACE_S to finish, then is cancelled."""
    tick = asyncio.create_task(controller.tick(), name="sidecar-tick")
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({tick, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not tick.done():
            await asyncio.wait({tick}, timeout=STOP_GRACE_S)
    finally:
        stopping.cancel()
        if not tick.done():
            tick.cancel("sidecar stopping: tick exceeded the shutdown grace")
        await asyncio.wait({tick, stopping})  # both end here: no task is left pending
    if not tick.cancelled():
        tick.result()  # re-raise what the tick raised


def _is_refusal(controller: Controller, exc: Exception) -> bool:
    """A profile that does not fit the engine, or settings the engine refutes while connecting
    (e.g. a --model-name it does not serve): retrying cannot help, so the sidecar exits 2."""
    return isinstance(exc, ProfileMismatch) or (
        isinstance(exc, InvalidInput) and not controller.engine_table.is_connected)


async def control_loop(controller: Controller, stop: asyncio.Event) -> None:
    """Tick, sleep interruptibly, repeat until ``stop``; only a refusal (_is_refusal) ends it."""
    while not stop.is_set():
        try:
            await _tick_or_stop(controller, stop)
        except Exception as exc:  # the edge of an eternal task: log with context, carry on
            if _is_refusal(controller, exc):
                raise
            controller.tick_failed(exc)
        else:
            controller.tick_succeeded()
        delay = backoff_delay(controller.settings, controller.observer.consecutive_failures)
        controller.waiting(delay)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()


async def _guard(name: str, coro: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Say how a root task ended; whatever ends it, stop the others (kopf's guard)."""
    try:
        await coro
        if not stop.is_set():
            log.warning(f"{name} has finished unexpectedly")
    except asyncio.CancelledError:
        log.debug(f"{name} is cancelled")
        raise
    except Exception as exc:
        if not isinstance(exc, TableTuneError):  # ours end in run()'s one plain line, once
            log.error(f"{name} has failed: {exc}", exc_info=True)
        raise
    finally:
        stop.set()


def _load_profile(settings: SidecarSettings) -> Profile:
    try:
        return load(settings.profile)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise InvalidInput(f"profile {settings.profile}: {where}: {error['msg']}") from None


def _token(settings: SidecarSettings) -> str | None:
    try:
        return settings.token()
    except OSError as exc:
        raise InvalidInput(f"admin_token_file {settings.admin_token_file}: {exc.strerror}") from None


def _install_signals(stop: asyncio.Event) -> Callable[[], None]:
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        log.info(f"signal {signum.name} received; stopping")
        stop.set()

    signums = (signal.SIGTERM, signal.SIGINT)
    for signum in signums:
        loop.add_signal_handler(signum, on_signal, signum)

    def uninstall() -> None:
        for signum in signums:
            loop.remove_signal_handler(signum)

    return uninstall


async def main(settings: SidecarSettings, stop: asyncio.Event | None = None,
               on_bound: Callable[[int], None] | None = None, handle_signals: bool = True) -> int:
    """Run until ``stop`` (or SIGTERM/SIGINT); 0 on a clean stop, TableTuneError if refused."""
    profile = _load_profile(settings)
    lower_priority(settings.nice)  # once the input is good: a refused start changes nothing
    stop = stop if stop is not None else asyncio.Event()
    uninstall = _install_signals(stop) if handle_signals else (lambda: None)
    log.info("starting", extra={"settings": settings.model_dump(
        mode="json", exclude={"admin_token", "admin_token_file"}), "niceness": os.nice(0)})
    fatal: BaseException | None = None
    try:
        async with EngineClient(settings.engine_url, settings.admin_url, _token(settings),
                                settings.timeout_s, settings.retry_attempts,
                                max_body_bytes=settings.max_metrics_bytes) as client:
            controller = Controller(settings, profile, client)
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(_guard("control loop", control_loop(controller, stop), stop))
                    tg.create_task(_guard("http server", serve(
                        controller, settings.listen_host, settings.listen_port, stop,
                        on_bound), stop))
            except* Exception as group:
                fatal = group.exceptions[0]
            finally:
                controller.save_checkpoint()
    finally:
        uninstall()
    if fatal is not None:
        raise fatal
    log.info("stopped")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """`python -m sidecar` (what `tabletune sidecar` runs): bad flags exit 2 with one line."""
    from sidecar.settings import from_args, parser

    args = parser().parse_args(argv)
    try:
        settings = from_args(args)
    except InvalidInput as exc:
        print(f"tabletune sidecar: {exc}", file=sys.stderr)
        return 2
    return run(settings)


def lower_priority(by: int) -> int:
    """Raise this process's niceness by ``by`` (never lowers it); the niceness now."""
    return os.nice(by)


def run(settings: SidecarSettings) -> int:
    """`tabletune sidecar`: 0 on a clean stop, 2 if refused (e.g. ProfileMismatch), 1 on a crash."""
    restore = logs.configure(settings.log_format)
    try:
        return asyncio.run(main(settings))
    except TableTuneError as exc:
        print(f"tabletune sidecar: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the listen port is taken
        print(f"tabletune sidecar: {exc}", file=sys.stderr)
        return 1
    finally:
        restore()
