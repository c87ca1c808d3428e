"""Logging for the sidecar: one JSON formatter and a log-on-change helper.

A JSON line is ``{"ts", "level", "logger", "event", ...extras}``: the message is the event
name (``"rebuild"``, ``"scrape"``) and everything passed in ``extra=`` rides along, e.g.
``log.info("rebuild", extra={"decision": decision.model_dump(mode="json")})``.

The event log (logger ``sidecar``) goes to stderr. Requests to the sidecar's own HTTP server
go to logger ``sidecar.access``, which never reaches stderr: with ``--access-log`` it writes
to stdout, else it is silent.

:class:`Conditions` logs a condition (scrape, admin, drift, ...) only when its state
changes, not on every failure (kopf's "Throttling for ..." / "... back to normal").
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["Conditions", "JsonFormatter", "configure"]

# attributes every LogRecord has: everything else on a record came from ``extra=``
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _RESERVED}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, event, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "event": record.getMessage()}
        line.update(_extras(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class PlainFormatter(logging.Formatter):
    """Human-readable line; extras appended as compact JSON."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        extras = _extras(record)
        text = super().format(record)
        return f"{text} {json.dumps(extras, default=str)}" if extras else text


def configure(log_format: str, level: int = logging.INFO) -> Callable[[], None]:
    """Root logger to stderr, ``sidecar.access`` to stdout, in ``log_format``; returns undo."""
    root, access = logging.getLogger(), logging.getLogger("sidecar.access")
    saved = root.handlers[:], root.level, access.handlers[:], access.propagate
    formatter = JsonFormatter() if log_format == "json" else PlainFormatter()
    handler, access_handler = logging.StreamHandler(sys.stderr), logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    access_handler.setFormatter(formatter)
    root.handlers = [handler]
    root.setLevel(level)
    access.handlers, access.propagate = [access_handler], False  # its own stream, never stderr
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    def restore() -> None:
        root.handlers, access.handlers, access.propagate = saved[0], saved[2], saved[3]
        root.setLevel(saved[1])

    return restore


class Conditions:
    """Named conditions with a state each; a change is logged once, repeats are silent."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.time) -> None:
        self.log, self.clock = logger, clock
        self.states: dict[str, str] = {}
        self.details: dict[str, dict[str, Any]] = {}  # state, since, message, error

    def set(self, name: str, state: str, message: str, level: int = logging.WARNING,
            exc_info: bool = False, **extra: Any) -> bool:
        """Record ``state`` for ``name``; log ``message`` if it differs from the last one.

        The first "ok" of a condition is not news and is not logged. Returns True if logged.
        """
        previous = self.states.get(name)
        if previous == state:
            if "error" in extra:  # the latest error of an unchanged state, for /v1/state
                self.details[name]["error"] = extra["error"]
            return False
        self.states[name] = state
        self.details[name] = {"state": state, "since": self.clock(), "message": message,
                              "error": extra.get("error")}
        if previous is None and state == "ok":
            return False
        self.log.log(level, message, exc_info=exc_info,
                     extra={"condition": name, "state": state, "previous": previous, **extra})
        return True

    def ok(self, name: str, message: str, **extra: Any) -> bool:
        """Back to normal (logged at INFO only if it was not ok before)."""
        return self.set(name, "ok", message, logging.INFO, **extra)
