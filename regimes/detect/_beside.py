r"""Readings of the level beside a regime that the data tell from the model's by little.

A regime's ratio is its level over the trend under its cells, and the trend there is
not observed: the fit carries it across from the cells on either side. Where the level
beside a regime moves by a step, the model may read the step as the trend rising
through the regime, or put the cells on the regime's other side apart as a regime of
the other sign under a trend at the step's level; the regime is then measured against
a level it does not depart from. Two more readings measure it against the level it
leaves (docs/method.md, section 5):

* **a step after it**: the model with a step to the end of the grid from the cell after
  the regime, where the model has none there and the step's fitted level passes
  ``min_ratio`` (a smaller one is no regime, and its reading no other);
* **a neighbour's level**: against the level of an adjacent regime of the other sign,
  outside the call's direction (the contrast of the two levels).

Each reading gives the regime's ``t`` interval; the ratio's interval spans them.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from regimes._stats.intervals import interval_index
from regimes._stats.scan import RowFit, refit_with
from regimes._stats.smoother import Smoother
from regimes.detect._regimes import as_tested, canonical

__all__ = ["Span", "Test", "beside_spans"]

Span = tuple[float, float] | None
"""A regime's delta from the lowest low to the highest high of its readings (None: none)."""

Test = tuple[str, float, float, float]
"""``direction``, ``tau0`` (log ``min_ratio``), ``alpha`` and ``level`` of the call."""

Ends = tuple[np.ndarray, np.ndarray, np.ndarray]
"""A fit's regimes as :func:`~regimes.detect._regimes.canonical` writes them."""


def _half(se: np.ndarray, df: np.ndarray, level: float) -> np.ndarray:
    """Return the half-width of a ``t`` interval at ``level``."""
    return np.asarray(special.stdtrit(np.maximum(df, 1.0), (1.0 + level) / 2.0) * se)


def _joined(spans: list[tuple[float, float]]) -> Span:
    """Return the span from the lowest low to the highest high, None without any."""
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def _contrasts(fit: RowFit, ends: Ends, row: int, test: Test) -> list[list[tuple[float, float]]]:
    """Return per slot of ``row`` its intervals against adjacent regimes outside ``direction``.

    Only regimes that neither hold nor sit in another: their coefficients are then
    their levels over the trend, and the fit's covariance is theirs.
    """
    direction, _, _, level = test
    start, end, delta = ends
    out: list[list[tuple[float, float]]] = [[] for _ in range(fit.chosen.shape[1])]
    used = np.flatnonzero(fit.chosen[row] >= 0)
    a, b = start[row, used], end[row, used]
    overlaps = (a[:, None] <= b[None, :]) & (a[None, :] <= b[:, None])
    alone = used[overlaps.sum(axis=1) == 1]
    for i in alone:
        for j in alone:
            beside = end[row, j] + 1 == start[row, i] or end[row, i] + 1 == start[row, j]
            outside = direction != "both" and (delta[row, j] > 0) != (direction == "up")
            if not (beside and outside and np.sign(delta[row, j]) != np.sign(delta[row, i])):
                continue
            cov = fit.cov_unit[row]
            se = np.sqrt(max(float(cov[i, i] + cov[j, j] - 2.0 * cov[i, j]), 0.0))
            d = float(fit.coef[row, i] - fit.coef[row, j])
            half = float(_half(se * fit.sigma[row], fit.df[row], level))
            out[i].append((d - half, d + half))
    return out


def _with_step(fit: RowFit, ends: Ends, rows: list[int], t: int) -> tuple[np.ndarray, np.ndarray]:
    """Return each (row, slot) whose regime can take a step after it, and the step added.

    Returns the pairs ``(P, 2)`` and their chosen intervals ``(P, KMAX)``, the step in
    the row's first free slot.
    """
    index = interval_index(t)
    start, end, _ = ends
    pairs, chosen = [], []
    for row in rows:
        free = np.flatnonzero(fit.chosen[row] < 0)
        used = np.flatnonzero(fit.chosen[row] >= 0)
        covered = np.zeros(t, dtype=bool)
        for j in used:
            covered[start[row, j] : end[row, j] + 1] = True
        for i in used:
            s, e = int(start[row, i]), int(end[row, i])
            step = int(index[e + 1, t - 1]) if 0 < s and e + 2 < t else -1
            if step < 0 or not free.size or step in fit.chosen[row]:
                continue
            if covered[: e + 1].all():
                # with the step every cell is in a regime: the trend's constant is one of them
                continue
            pairs.append((row, i))
            chosen.append(fit.chosen[row].copy())
            chosen[-1][free[0]] = step
    return np.array(pairs, dtype=int).reshape(-1, 2), np.array(chosen, dtype=int)


def _steps_after(
    levels: np.ndarray,
    fit: RowFit,
    ends: Ends,
    rows: list[int],
    sampling: np.ndarray,
    sm: Smoother,
    test: Test,
) -> dict[tuple[int, int], tuple[float, float]]:
    """Return per (row, slot) the regime's interval with a step after it, where the step passes."""
    direction, tau0, alpha, level = test
    t = sm.size
    pairs, chosen = _with_step(fit, ends, rows, t)
    if not pairs.size:
        return {}
    on = pairs[:, 0]
    refit = refit_with(levels[on], sm, fit.which[on], chosen)
    tested = as_tested(refit, levels[on], sm, sampling[on], direction, tau0, alpha)
    start, end, delta = canonical(tested, t)
    used = tested.chosen >= 0
    own_start, own_end, own_delta = ends
    out = {}
    for p, (row, i) in enumerate(pairs.tolist()):
        s, e = own_start[row, i], own_end[row, i]
        own = np.flatnonzero(used[p] & (start[p] == s) & (end[p] == e))
        step = np.flatnonzero(used[p] & (start[p] == e + 1) & (end[p] == t - 1))
        if not (own.size and step.size) or abs(delta[p, step[0]]) <= tau0:
            continue
        d = float(delta[p, own[0]])
        if np.sign(d) != np.sign(own_delta[row, i]):
            continue
        half = float(_half(tested.se_unit[p, own[0]] * tested.sigma[p], tested.df[p], level))
        out[(row, i)] = (d - half, d + half)
    return out


def beside_spans(
    levels: np.ndarray, fit: RowFit, rows: list[int], sampling: np.ndarray, sm: Smoother, test: Test
) -> list[list[Span]]:
    """Return each regime's span over the readings of the level beside it.

    Parameters
    ----------
    levels : numpy.ndarray
        The cell levels ``(K, T)`` of the rows of ``fit``.
    fit : RowFit
        Their fit, as tested (:func:`~regimes.detect._regimes.as_tested`).
    rows : list of int
        The rows to read (those with a regime that may be reported).
    sampling : numpy.ndarray
        Each row's cells' mean sampling variance ``(K,)``.
    sm : Smoother
        The grid's smoothers.
    test : Test
        The call's direction, log ``min_ratio``, alpha and level.

    Returns
    -------
    list of list of Span
        Per row of ``rows``, per regime (the row's used slots in order), the span of
        its delta over the readings beside it, None where it has none.
    """
    ends = canonical(fit, sm.size)
    steps = _steps_after(levels, fit, ends, rows, sampling, sm, test)
    out = []
    for row in rows:
        contrasts = _contrasts(fit, ends, row, test)
        out.append(
            [
                _joined(contrasts[i] + ([steps[(row, i)]] if (row, i) in steps else []))
                for i in np.flatnonzero(fit.chosen[row] >= 0).tolist()
            ]
        )
    return out
