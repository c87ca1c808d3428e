"""One measured window of the bench: a row of cells.csv, and the file's reader and writer.

A window belongs to a *block*: windows measured close in time on one engine at one load, the
unit inside which policies are compared (a ratio never crosses blocks). `group` says what the
block compared: "tables" (every table policy, swapped through the plugin) or the name of a
policy that is not a table (no speculation, a sidecar, the bandit), paired there with one
fixed-k reference window.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from tuner.core.files import write_atomic
from tuner.step_clock import StepLoad, implausible

TABLES = "tables"


@dataclass(frozen=True, slots=True)
class Window:
    block: int            # pairing unit; numbered in the order blocks ran
    round: int            # the pass over the loads this block belongs to
    load: int             # open requests N
    group: str            # TABLES, or the non-table policy this block pairs with a reference
    position: int         # 0-based place in the block's shuffled order
    policy: str
    tokens_per_s: float   # the engine's vllm:generation_tokens_total over the window
    window_s: float
    started_s: float      # seconds since the bench started measuring
    client_completed: int = 0           # cross-check: requests the clients saw finish
    client_tokens_per_s: float = 0.0    # their output tokens over the window
    table_version: int | None = None    # the plugin's table version the window ran under
    table_changes: int = 0              # swaps during the window (a sidecar's pushes)
    settle_s: float = 0.0               # from the swap to the window's start
    settle_steps: int = 0               # engine steps run on the new table before the window
    steps: int | None = None            # engine steps in the window (plugin counters)
    step_ms: float | None = None        # tuner.step_clock.step_load over the window
    requests_per_step: float | None = None
    tokens_per_step: float | None = None
    table: str = "[]"                   # JSON of the engine's table at the window's end
    dropped: str = ""                   # why the analysis leaves it out ("": it counts)


_INT = {"block", "round", "load", "position", "client_completed", "table_changes",
        "settle_steps", "table_version", "steps"}
_STR = {"group", "policy", "table", "dropped"}


def counted(w: Window) -> bool:
    """Whether the analysis uses a window: not marked `dropped` when it was measured, and its
    engine count can be right (tuner/step_clock.implausible; an older bench recorded such
    windows unchecked). A window left out is never averaged into an interval."""
    if w.dropped:
        return False
    steps = (StepLoad(w.steps, w.step_ms, w.requests_per_step or 0.0, w.tokens_per_step)
             if w.steps is not None and w.tokens_per_step is not None else None)
    return w.tokens_per_s > 0 and implausible(w.tokens_per_s * w.window_s, steps) is None


def write_windows(windows: list[Window], path: Path) -> None:
    """cells.csv, atomically: a run cut short keeps every window measured so far."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=[f.name for f in fields(Window)])
    w.writeheader()
    w.writerows(asdict(x) for x in windows)
    write_atomic(path, out.getvalue(), newline="")


def _value(name: str, raw: str) -> object:
    if name in _STR:
        return raw
    if raw == "":
        return None
    return int(raw) if name in _INT else float(raw)


def read_windows(path: Path) -> list[Window]:
    """The windows of a cells.csv this module wrote; ValueError naming the file if it is not one."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = {f.name for f in fields(Window)}
    if rows and "block" not in rows[0]:
        raise ValueError(f"{path}: no 'block' column; this is a cells.csv from the bench before "
                         "paired blocks, which this reader does not take")
    return [Window(**{k: _value(k, v) for k, v in r.items() if k in names})  # type: ignore[arg-type]
            for r in rows]
