"""Atomic file writes: one way, used for every file TableTune must not lose half of.

A temporary file in the same folder, flushed and fsync'ed, then ``os.replace``: a crash or a kill
mid-write leaves the previous version whole, and a failed write leaves no temporary behind.
stdlib only: also used inside the vLLM engine process.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path | str, text: str, newline: str | None = None) -> None:
    """Replace ``path`` with ``text`` atomically (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
