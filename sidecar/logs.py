"""Logging for the sidecar: one JSON formatter and a log-on-change helper.

A JSON line is ``{"ts", "level", "logger", "event", ...extras}``: the message is the event
name (``"rebuild"``, ``"scrape"``) and everything passed in ``extra=`` rides along, e.g.
``log.info("rebuild", extra={"decision": decision.model_dump(mode="json")})``.

:class:`Conditions` logs a condition (scrape, admin, drift, ...) only when its state
changes, not on every failure (kopf's "Throttling for ..." / "... back to normal").
"""

from __future__ import annotations

import json
import logging
import sys
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
    """Route the root logger to stderr in ``log_format``; returns a function that undoes it."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else PlainFormatter())
    root.handlers = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    def restore() -> None:
        root.handlers = saved_handlers
        root.setLevel(saved_level)

    return restore


class Conditions:
    """Named conditions with a state each; a change is logged once, repeats are silent."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self.states: dict[str, str] = {}

    def set(self, name: str, state: str, message: str, level: int = logging.WARNING,
            exc_info: bool = False, **extra: Any) -> bool:
        """Record ``state`` for ``name``; log ``message`` if it differs from the last one.

        The first "ok" of a condition is not news and is not logged. Returns True if logged.
        """
        previous = self.states.get(name)
        if previous == state:
            return False
        self.states[name] = state
        if previous is None and state == "ok":
            return False
        self.log.log(level, message, exc_info=exc_info,
                     extra={"condition": name, "state": state, "previous": previous, **extra})
        return True

    def ok(self, name: str, message: str, **extra: Any) -> bool:
        """Back to normal (logged at INFO only if it was not ok before)."""
        return self.set(name, "ok", message, logging.INFO, **extra)
