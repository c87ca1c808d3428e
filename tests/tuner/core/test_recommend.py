"""The deployment recommendation (tuner/core/recommend.py) on a synthetic profile."""

from __future__ import annotations

from benchmarks.synthetic import paper_profile
from tuner.core.profile import Preflight


def with_preflight(nospec_ms: list[float]):
    p = paper_profile()  # k=3 up to B=12, k=1 above; k=0 steps 4.0 ms
    p.preflight = Preflight(B=[1, 8, 16], nospec_ms=nospec_ms, k0_ms=[4.0] * 3, warnings=[])
    return p


def test_the_table_when_it_beats_plain_decoding_everywhere() -> None:
    rec = with_preflight([4.0, 4.0, 4.0]).recommendation()
    assert rec.kind == "table" and "[[1, 12, 3], [13, 16, 1]]" in rec.summary
    assert any("no speculation" in line for line in rec.evidence)


def test_no_speculation_when_plain_decoding_wins_at_every_load() -> None:
    rec = with_preflight([1.0, 1.0, 1.0]).recommendation()  # 4x faster steps than the table's k=0
    assert rec.kind == "no_speculation"


def test_a_load_dependent_choice_is_said_as_such() -> None:
    rec = with_preflight([1.0, 4.0, 4.0]).recommendation()  # plain wins at B=1 only
    assert rec.kind == "depends_on_load" and "two pools" in rec.summary


def test_one_range_is_a_fixed_k_and_no_preflight_says_so() -> None:
    p = paper_profile()
    assert p.recommendation().kind == "unmeasured"
    near = p.model_copy(update={"tie": 0.5})  # a 50% tie: no split is worth it
    rec = with_preflight([4.0, 4.0, 4.0]).model_copy(update={"tie": 0.5}).recommendation()
    assert len(near.build().table.ranges) == 1 and rec.kind == "fixed_k"


def test_min_k_keeps_drafting_alive() -> None:
    p = paper_profile().model_copy(update={"min_k": 2})
    assert {k for _, _, k in p.build().table.ranges} <= {2, 3}
