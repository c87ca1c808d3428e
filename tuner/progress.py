"""Progress of a long measurement: a tqdm bar in a terminal, a plain log line every tenth of
the work when the output is a file or a pipe (CI, `kubectl logs`), where a bar's carriage
returns are noise."""

from __future__ import annotations

import logging
import sys
from typing import Any

from tqdm import tqdm

log = logging.getLogger("tabletune.progress")

STEPS = 10  # plain lines per run: one each tenth of the total


class Progress(tqdm):  # type: ignore[misc]  # tqdm ships no types
    """tqdm where stderr is a terminal; otherwise the same calls log a line per tenth."""

    def __init__(self, *args: Any, tty: bool | None = None, unit: str = "it", **kwargs: Any) -> None:
        self.plain = not (sys.stderr.isatty() if tty is None else tty)
        self.done, self.said, self.desc_text, self.unit_text = 0, 0, "", unit
        super().__init__(*args, disable=self.plain, unit=unit, **kwargs)

    def set_description(self, desc: str | None = None, refresh: bool | None = True) -> None:
        self.desc_text = desc or ""
        super().set_description(desc, refresh)

    def update(self, n: float | None = 1) -> bool | None:
        self.done += int(n or 0)
        total = self.total or 0
        if self.plain and total > 0:
            # a line per tenth of the current total since the last one, and at the end (tune
            # adds work on the way, so the total can grow after a 100% line)
            if self.done - self.said >= total / STEPS or (self.done >= total > self.said):
                self.said = self.done
                log.info("%d%% (%d/%d %s)%s", 100 * self.done // total, self.done, total,
                         self.unit_text, f": {self.desc_text}" if self.desc_text else "")
        shown: bool | None = super().update(n)
        return shown
