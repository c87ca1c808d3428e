"""The resume benchmark's interval (pure)."""

from __future__ import annotations

import pytest

from benchmarks.resume import rates, wilson


def test_wilson_interval_holds_the_share_and_narrows_with_n() -> None:
    p, lo, hi = wilson(80, 100)
    assert p == 0.8 and lo < 0.8 < hi and hi - lo == pytest.approx(0.155, abs=0.01)
    _, lo2, hi2 = wilson(800, 1000)
    assert hi2 - lo2 < (hi - lo) / 3
    assert wilson(0, 10)[1] == 0.0 and wilson(10, 10)[2] == pytest.approx(1.0)
    assert rates([5, 2], [10, 10])[1]["rate"] == 0.2
