"""What a process uses, read from /proc (Linux): its CPU seconds and resident memory."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds", "rss_mb"]


def cpu_seconds(pid: int | None) -> float:
    """User and system CPU seconds of a process so far (0 for none, or one that ended)."""
    if pid is None:
        return 0.0
    try:
        # the fields after the command name, which may hold spaces and parentheses
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """A running process's resident memory in MB."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
