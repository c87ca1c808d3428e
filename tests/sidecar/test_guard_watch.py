"""What a tick hands the guardrail (sidecar/guard_watch.py): the pairs' bounds at a split level,
foreign writes that void a trial, a rollback taken once, and the words of a rollback (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.guard_watch import GuardWatch, pair_bounds, rollback_reason
from sidecar.guardrail import PairedCheck, Sample, Verdict
from sidecar.measured import MeasuredGoodput
from tests.sidecar.fake_engine import settings, write_profile
from tuner.core.table import Table

OLD, NEW = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 1]])


def test_a_trial_gets_the_pairs_of_its_buckets_at_a_split_level(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Per (bucket, k_new, k_old) it judges, the pairs' bounds at the rebuild's error rate split
    over them (any one of them can roll the push back)."""
    asked: list[tuple[int, int, int, float]] = []

    def compare(self: object, bucket: int, k: int, ref: int, alpha: float) -> None:
        asked.append((bucket, k, ref, alpha))
    monkeypatch.setattr(MeasuredGoodput, "compare", compare)  # slots: patch the class
    got = pair_bounds(MeasuredGoodput(), ((120, 2, 3), (128, 2, 3)), 0.9)
    assert got == {(120, 2, 3): None, (128, 2, 3): None}
    assert asked == [(120, 2, 3, pytest.approx(0.05)), (128, 2, 3, pytest.approx(0.05))]
    assert pair_bounds(MeasuredGoodput(), (), 0.9) == {}


def watch_for(tmp_path: Path, **overrides: object) -> GuardWatch:
    profile = write_profile(tmp_path / "profile.json")
    return GuardWatch(settings(profile, "http://127.0.0.1:1", guard_window=2, **overrides))


def test_a_foreign_write_cancels_the_trial_once(tmp_path: Path) -> None:
    w = watch_for(tmp_path)
    w.guard.start(OLD, NEW)
    w.foreign(0)  # nothing new heard
    assert w.guard.trial is not None
    w.foreign(1)
    assert w.guard.trial is None and w.foreign_seen == 1
    w.guard.start(OLD, NEW)
    w.foreign(1)  # the same write again: the new trial stays
    assert w.guard.trial is not None


def test_a_rollback_is_taken_once(tmp_path: Path) -> None:
    w = watch_for(tmp_path)
    w.pending = Verdict(True, 0.8, -5.0, 5, 5, OLD, NEW)
    assert w.take() is not None and w.take() is None


def test_dry_run_feeds_the_guardrail_nothing(tmp_path: Path) -> None:
    w = watch_for(tmp_path, dry_run=True)
    for i in range(20):
        w.observe(Sample(8.0, 100.0, 200.0, 1.0), float(i), MeasuredGoodput())
    assert not w.guard.baseline and w.pending is None


def test_a_rollback_says_which_side_judged_it() -> None:
    by_scrapes = rollback_reason(Verdict(True, 0.912, -4.2, 5, 6, OLD, NEW), 600)
    assert by_scrapes == ("guardrail: live goodput 0.912x of before (t=-4.2, 5+6 samples) "
                          "after pushing [[1, 16, 1]]; held out 600 s")
    by_pairs = rollback_reason(Verdict(True, 1.0, 0.0, 0, 0, OLD, NEW, judged_by="pairs", paired=[
        PairedCheck(16, 3, 1, 0.90, 0.97), PairedCheck(8, 3, 1, 0.95, 1.02)]), 600)
    assert by_pairs == ("guardrail: the pairs at the buckets it changed turned against it "
                        "(B band 16: k=1 over k=3 [0.9000, 0.9700]) after pushing [[1, 16, 1]]; "
                        "held out 600 s")
