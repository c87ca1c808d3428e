"""Student's t in numpy (tuner/core/student_t.py) against printed tables."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.student_t import t_ppf, t_sf


@pytest.mark.parametrize(("q", "df", "t"), [
    (0.975, 10, 2.228139), (0.975, 1, 12.706205), (0.95, 5, 2.015048), (0.995, 30, 2.749996),
    (0.999, 4, 7.173182)])
def test_quantiles_match_the_tables(q: float, df: float, t: float) -> None:
    assert float(t_ppf(q, df)) == pytest.approx(t, abs=1e-5)


def test_the_quantile_inverts_the_tail_at_fractional_df() -> None:
    df = np.array([1.3, 3.99, 8.0, 37.5])
    q = np.array([0.9, 0.99, 0.99865, 0.9999])
    np.testing.assert_allclose(t_sf(t_ppf(q, df), df), 1 - q, rtol=1e-8)
    assert float(t_sf(0.0, 7.0)) == pytest.approx(0.5)
