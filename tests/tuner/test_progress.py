"""tuner/progress.py: a bar in a terminal, a plain line per tenth of the work otherwise."""

from __future__ import annotations

import io
import logging

import pytest

from tuner.progress import Progress


def test_plain_output_logs_a_line_per_tenth_with_the_description(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tabletune.progress")
    with Progress(total=20, unit="cell-rep", tty=False) as bar:
        bar.set_description("k=2")
        for _ in range(20):
            bar.update()
        bar.total += 20  # work found on the way (tune's refinements) lowers the share done
        bar.update(20)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "10% (2/20 cell-rep): k=2" and lines[9] == "100% (20/20 cell-rep): k=2"
    assert lines[-1] == "100% (40/40 cell-rep): k=2" and len(lines) == 10 + 1


def test_a_terminal_gets_the_bar_and_no_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tabletune.progress")
    with Progress(total=5, tty=True, file=io.StringIO()) as bar:
        bar.update(5)
        assert bar.n == 5 and not bar.disable
    assert caplog.records == []
