"""Traffic helpers for engine tests."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

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
