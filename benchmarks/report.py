"""A bench's files: summary.md, summary.json and intervals.png beside cells.csv."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.cells import Window
from benchmarks.markdown import markdown
from benchmarks.plots import plot
from benchmarks.stats import Analysis
from benchmarks.summary import ADAPTIVE, to_json
from tuner.core.files import write_atomic


def facts(meta: dict[str, Any], a: Analysis) -> list[str]:
    wall = f", {meta['wall_s']:.0f} s wall" if "wall_s" in meta else ""
    return [f"Status: **{meta.get('stop_reason', '?')}** after {meta.get('rounds', '?')} rounds"
            f"{wall}. How it ran: the end of this file."]


def how(meta: dict[str, Any]) -> list[str]:
    return ["## How this ran", "", "```", json.dumps(meta, indent=1), "```", ""]


def write(windows: list[Window], a: Analysis, out: Path, title: str, meta: dict[str, Any],
          plots: bool = True) -> None:
    write_atomic(out / "summary.json", json.dumps(to_json(a, meta, windows), indent=1) + "\n")
    write_atomic(out / "summary.md", markdown(windows, a, title, facts(meta, a),
                                              meta.get("design", ADAPTIVE)) + "\n".join(how(meta)))
    if plots and a.comparisons:
        plot(a, out / "intervals.png", title)
