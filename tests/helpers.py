"""Helpers for tests: traffic for engine tests, and a bench's answer to bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tuner.serve import complete


async def burst(url: str, prompts: list[Any], max_tokens: int,
                temperature: float = 0.0) -> list[dict[str, Any]]:
    """Send every prompt at once; return the replies."""
    async with aiohttp.ClientSession() as s:
        return await asyncio.gather(*[complete(s, url, p, max_tokens, temperature) for p in prompts])


def delta(after: dict[str, Any], before: dict[str, Any], key: str) -> Any:
    a, b = after[key], before[key]
    if isinstance(a, dict):
        return {k: v - b.get(k, 0) for k, v in a.items()}
    if isinstance(a, list):
        return [x - y for x, y in zip(a, b)]
    return a - b


def refused(main: Callable[[list[str]], int], profile: Path, tmp_path: Path, extra: list[str],
            capsys: pytest.CaptureFixture[str]) -> str:
    """A bench run on ``profile`` with the flags ``extra``: it must exit 2 with one line on
    stderr, returned."""
    rc = main(["--profile", str(profile), "--model", str(tmp_path), "--out", str(tmp_path / "o"),
               *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    return err
