"""Forward selection of intervals: greedy, stopped where an interval does not lower BIC."""

from __future__ import annotations

import numpy as np

from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.scan import selection_threshold
from regimes._stats.selection import select
from regimes._stats.smoother import smoother_for
from regimes._stats.stack import Stack, stacked

T = 24
KMAX = 4


def _setup() -> tuple[np.ndarray, Stack]:
    a = smoother_for(np.log(16.0 * np.arange(1, T + 1))).residual[0]
    return a, stacked(a[None], np.array([-1]), candidate_intervals(T), interval_indicators(T))


def _rss(levels: np.ndarray, a: np.ndarray, chosen: list[int]) -> float:
    r"""Residual sum of squares of the trend plus the chosen intervals, fitted jointly.

    The residual is :math:`A_Z \ell = A\ell - AZ(Z^\top AZ)^{-1}Z^\top A\ell`, and its sum
    of squares :math:`\lVert A_Z \ell \rVert^2`, not the criterion
    :math:`\ell^\top A_Z \ell` the fit minimises (the two differ where :math:`A` is
    not a projection, as a penalised smoother's is not).
    """
    e = a @ levels
    if chosen:
        starts, ends = candidate_intervals(T)
        cells = np.arange(T)[:, None]
        z = ((cells >= starts[chosen]) & (cells <= ends[chosen])).astype(float)
        az = a @ z
        e = e - az @ np.linalg.solve(z.T @ az, az.T @ levels)
    return float(e @ e)


def _bic(rss: float, trace: float, k: int, h2: float) -> float:
    return T * np.log(rss / max(trace - k, 1.0)) + h2 * k


def test_selection_stops_at_the_first_interval_that_does_not_lower_bic():
    a, st = _setup()
    rng = np.random.default_rng(0)
    levels = rng.normal(0.0, 0.05, size=(200, T))
    # a bump and one of either sign right after it: on such rows the criterion can rise
    # at one interval and fall again at the next (7 of these 200), where running the
    # whole path and keeping its minimum selects more
    for row in levels:
        s, w = rng.integers(2, T - 8), rng.integers(1, 4)
        row[s : s + w] += rng.normal(0.0, 0.12)
        row[s + w : s + 2 * w] += rng.normal(0.0, 0.12)
    h2 = selection_threshold(T, 2.0) ** 2
    which = np.zeros(levels.shape[0], dtype=int)
    kept = select(levels, st, which, h2, KMAX)
    # a reward instead of a penalty: every step lowers the criterion, the whole path
    path = select(levels, st, which, -1e9, KMAX)
    trace = float(np.trace(a))
    cap = min(KMAX, max(1, int((trace - 1.0) // 3)))
    for row in range(levels.shape[0]):
        steps = [int(c) for c in path[row] if c >= 0][:cap]
        bic = [_bic(_rss(levels[row], a, steps[:k]), trace, k, h2) for k in range(len(steps) + 1)]
        stop = next((k for k in range(len(steps)) if bic[k + 1] >= bic[k]), len(steps))
        assert [int(c) for c in kept[row] if c >= 0] == steps[:stop]


def test_a_clear_spike_is_selected_and_nothing_else():
    _, st = _setup()
    levels = np.random.default_rng(5).normal(0.0, 0.02, size=(1, T))
    levels[0, 9:11] += 0.5
    h2 = selection_threshold(T, 2.0) ** 2
    chosen = select(levels, st, np.zeros(1, dtype=int), h2, KMAX)[0]
    starts, ends = candidate_intervals(T)
    picked = [(int(starts[c]), int(ends[c])) for c in chosen if c >= 0]
    assert picked == [(9, 10)]


def test_a_rows_choice_does_not_depend_on_the_rows_beside_it():
    _, st = _setup()
    rng = np.random.default_rng(7)
    levels = rng.normal(0.0, 0.05, size=(60, T))
    levels[::3, 5:8] += 0.4
    h2 = selection_threshold(T, 2.0) ** 2
    which = np.zeros(levels.shape[0], dtype=int)
    together = select(levels, st, which, h2, KMAX)
    alone = np.concatenate([select(levels[k : k + 1], st, which[:1], h2, KMAX) for k in range(60)])
    assert np.array_equal(together, alone)
    assert (together[::3] >= 0).any(axis=1).all()


def test_a_candidate_subset_chooses_among_its_own_intervals_only():
    _, st = _setup()
    levels = np.random.default_rng(3).normal(0.0, 0.02, size=(1, T))
    levels[0, 18:20] += 0.5
    starts, ends = candidate_intervals(T)
    h2 = selection_threshold(T, 2.0) ** 2
    one = np.zeros(1, dtype=int)
    # the indices returned are among every candidate, whatever the subset
    assert select(levels, st, one, h2, KMAX, np.flatnonzero(starts >= 14)).tolist() == (
        select(levels, st, one, h2, KMAX).tolist()
    )
    chosen = select(levels, st, one, h2, KMAX, np.flatnonzero((starts > 19) | (ends < 18)))[0]
    assert all(ends[c] < 18 or starts[c] > 19 for c in chosen if c >= 0)
