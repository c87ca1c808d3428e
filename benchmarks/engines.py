"""What every bench's engine shares: the plugin's admin token and the --max-model-len its flags
set (benchmarks/scenario.py starts the engines)."""

from __future__ import annotations

TOKEN = "bench-token"


def max_model_len(extra_args: tuple[str, ...], default: int = 1024) -> int:
    """The engine's --max-model-len as the bench's flags set it (vLLM takes the last one)."""
    found = default
    for i, a in enumerate(extra_args):
        if a.startswith("--max-model-len="):
            found = int(a.split("=", 1)[1])
        elif a == "--max-model-len" and i + 1 < len(extra_args):
            found = int(extra_args[i + 1])
    return found
