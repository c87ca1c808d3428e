"""Fixtures of the plugin's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[list[logging.LogRecord]]:
    """Every record of the plugin's, aiohttp's and asyncio's loggers (vLLM's logging config may
    stop them from reaching the root logger, so caplog alone could miss them)."""
    handler = Records()
    loggers = [logging.getLogger(n) for n in ("vllm.tabletune", "aiohttp", "asyncio")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(handler)
            lg.setLevel(level)
