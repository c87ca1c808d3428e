"""The exploration-cost bench's arithmetic (pure): the slope through the origin and the scaled
cost at the default rate (its rotating order: tests/benchmarks/test_switch.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.explore_cost import ExploreBlock, ExploreWindow, cost_slope, rates_arg, summarize



def test_the_slope_recovers_a_linear_loss_and_ignores_windows_that_explored_nothing() -> None:
    # a loss of 0.3 per unit share: 3% of steps cost 0.9%, 30% cost 9%
    assert cost_slope(100.0, [(99.1, 0.03), (91.0, 0.30)]) == pytest.approx(0.3)
    assert cost_slope(100.0, [(90.0, 0.0)]) is None  # no explored step: no evidence
    # a faster window gives a negative slope: noise is kept, not clipped
    assert cost_slope(100.0, [(102.0, 0.2)]) == pytest.approx(-0.1)


def block(off: float, loss_per_share: float, shares: dict[int, float]) -> ExploreBlock:
    return ExploreBlock(off_tps=off, arms={
        str(r): ExploreWindow(tps=off * (1 - loss_per_share * s), share=s,
                              explore_steps=round(1000 * s), engine_steps=1000)
        for r, s in shares.items()})


def test_the_default_cost_is_the_pooled_slope_times_the_default_share() -> None:
    rows = [block(100.0 + b, 0.25, {150: 0.02, 20: 0.15, 10: 0.3}) for b in range(8)]
    s = summarize(rows, [150, 20, 10])
    assert s.default_share == pytest.approx(0.02)
    assert s.cost_per_share is not None and s.cost_per_share.estimate == pytest.approx(0.25)
    assert s.default_cost is not None and s.default_cost.estimate == pytest.approx(0.005)
    over = s.per_rate["10"].over_off
    assert over is not None and over.estimate == pytest.approx(0.925)
    for r in ("150", "20", "10"):  # linear: every rate alone gives the same slope
        got = s.per_rate[r].cost_per_share
        assert got is not None and got.estimate == pytest.approx(0.25)


def test_a_bad_rates_argument_names_the_fix() -> None:
    assert rates_arg("150,20") == [150, 20]
    for bad in ("150,x", "0,10", "-5"):
        with pytest.raises(argparse.ArgumentTypeError, match="--rates"):
            rates_arg(bad)



def test_a_block_written_as_json_parses_back_and_a_renamed_field_fails() -> None:
    b = block(100.0, 0.25, {150: 0.02, 20: 0.15})
    assert ExploreBlock.model_validate(json.loads(b.model_dump_json())) == b
    row = b.model_dump()
    row["arms"]["20"]["explore_share"] = row["arms"]["20"].pop("share")  # the first schema's name
    with pytest.raises(ValueError, match="share"):
        ExploreBlock.model_validate(row)
