"""Adaptive baselines from the paper's comparison, clearly labelled as baselines.

TurboSpec-style: k from a linear step-time model fitted to the profile,
T(B, k) ≈ α + β·B·(k+1) + γ·B, and one global acceptance rate p (a_i = p^i). Its choice depends
only on B (and the global rate), so it is applied as the equivalent per-B table: the same k the
per-step rule would pick at every batch size.
"""

from __future__ import annotations

import numpy as np

from tuner.core.goodput import choose_table
from tuner.core.profile import Profile
from tuner.core.table import Table


def linear_fit(profile: Profile) -> tuple[float, float, float]:
    """Least-squares (α, β, γ) of T ≈ α + β·B·(k+1) + γ·B over every measured cell."""
    T = profile.step_time_matrix()
    rows, y = [], []
    for g, B in enumerate(profile.grid):
        for k in range(profile.K + 1):
            rows.append([1.0, B * (k + 1), B])
            y.append(T[g, k])
    coef, *_ = np.linalg.lstsq(np.asarray(rows), np.asarray(y), rcond=None)
    return float(coef[0]), float(coef[1]), float(coef[2])


def turbospec_table(profile: Profile) -> Table:
    assert profile.acceptance is not None
    alpha, beta, gamma = linear_fit(profile)
    p = profile.acceptance.a[0]  # one global per-token acceptance rate
    a = [p ** i for i in range(1, profile.K + 1)]
    B = np.arange(1, profile.engine.max_num_seqs + 1, dtype=float)[:, None]
    k = np.arange(profile.K + 1, dtype=float)[None, :]
    T_lin = np.maximum(alpha + beta * B * (k + 1) + gamma * B, 1e-6)
    return choose_table(T_lin, a, tie=profile.tie).table
