"""Run `tabletune sidecar` as a child process next to an engine (demo, benchmarks).

The token travels in the environment, never on the command line (it would show in `ps`).
Stopped with SIGTERM (the sidecar saves its state and exits within a second), then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path


@contextlib.asynccontextmanager
async def sidecar_process(profile: Path, engine_url: str, admin_url: str, token: str,
                          log: Path, args: Sequence[str] = ()) -> AsyncIterator[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "sidecar", "--profile", str(profile),
           "--engine-url", engine_url, "--admin-url", admin_url, *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "TABLETUNE_SIDECAR_ADMIN_TOKEN": token})
    try:
        yield proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
