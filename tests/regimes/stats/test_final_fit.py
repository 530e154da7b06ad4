"""The fit of each row with its chosen intervals, against the dense formulas it states."""

from __future__ import annotations

import numpy as np

from regimes._stats.final_fit import final_rows
from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.smoother import smoother_for
from regimes._stats.stack import stacked

T = 20


def _dense(levels: np.ndarray, a: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray, ...]:
    """delta = (Z'AZ)^+ Z'A l, its unit covariance, and the residual's scale and df."""
    starts, ends = candidate_intervals(T)
    used = chosen[chosen >= 0]
    z = ((np.arange(T)[:, None] >= starts[used]) & (np.arange(T)[:, None] <= ends[used])).astype(
        float
    )
    m_inv = np.linalg.pinv(z.T @ a @ z, hermitian=True)
    delta = m_inv @ z.T @ a.T @ levels
    cov = m_inv @ z.T @ a.T @ a @ z @ m_inv
    # A_Z = A - A Z (Z'AZ)^+ Z'A: what the trend and the regimes leave
    a_z = a - a @ z @ m_inv @ z.T @ a
    e = levels @ a_z
    df = np.sum(a_z**2)
    return delta, cov, np.sqrt(e @ e / df), df, levels - e - z @ delta


def test_each_row_matches_the_dense_fit_of_its_intervals():
    sm = smoother_for(np.log(8.0 * np.arange(1, T + 1)))
    st = stacked(sm.residual, sm.knots, candidate_intervals(T), interval_indicators(T))
    starts, ends = candidate_intervals(T)
    rng = np.random.default_rng(11)
    index = {(int(s), int(e)): k for k, (s, e) in enumerate(zip(starts, ends, strict=True))}
    rows = [
        [index[(5, 7)], -1, -1, -1],
        [index[(5, 7)], index[(12, 19)], -1, -1],
        [index[(3, 10)], index[(5, 6)], index[(14, 15)], -1],
        [-1, -1, -1, -1],
    ]
    chosen = np.array(rows)
    levels = rng.normal(0.0, 0.05, size=(len(rows), T)) + np.linspace(0.0, 1.0, T)
    which = rng.integers(0, sm.residual.shape[0], size=len(rows))
    delta, se, sigma, df, trend, cov = final_rows(levels, st, which, chosen)
    for k, row in enumerate(chosen):
        n = int((row >= 0).sum())
        want = _dense(levels[k], sm.residual[which[k]], row)
        np.testing.assert_allclose(delta[k, :n], want[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(cov[k, :n, :n], want[1], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(se[k, :n], np.sqrt(np.diag(want[1])), rtol=1e-9)
        np.testing.assert_allclose([sigma[k], df[k]], want[2:4], rtol=1e-9)
        np.testing.assert_allclose(trend[k], want[4], rtol=1e-9, atol=1e-12)
        assert np.isnan(delta[k, n:]).all() and (cov[k, n:] == 0).all()


def test_dependent_intervals_keep_a_finite_fit():
    # an interval from the first cell and its complement are one model beside a trend
    # with a free constant: Z'AZ is singular, and its pseudo-inverse keeps the fit finite
    sm = smoother_for(np.log(8.0 * np.arange(1, T + 1)))
    st = stacked(sm.residual, sm.knots, candidate_intervals(T), interval_indicators(T))
    starts, ends = candidate_intervals(T)
    first = int(np.flatnonzero((starts == 0) & (ends == 7))[0])
    rest = int(np.flatnonzero((starts == 8) & (ends == T - 1))[0])
    levels = np.random.default_rng(2).normal(0.0, 0.05, size=(1, T))
    levels[0, 8:] += 0.7
    delta, se, sigma, df, trend, _ = final_rows(
        levels, st, np.zeros(1, dtype=int), np.array([[first, rest, -1, -1]])
    )
    assert np.isfinite(delta[0, :2]).all() and np.isfinite(trend).all()
    assert np.isfinite(sigma[0]) and df[0] > 0
