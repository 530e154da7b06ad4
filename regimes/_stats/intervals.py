r"""The intervals of cells a regime may cover, and how a set of them is written.

A regime is an interval :math:`[s, e]` of a grid's cells; the model holds the indicator
column of each (:mod:`regimes._stats.scan`). Two sets of intervals whose indicators span
the same space are one model with two parametrisations: the fit, its residuals and its
noise are the same, and only what each coefficient is measured against differs. A
nested interval that shares a boundary with the one around it is such a case:

.. math::

    \operatorname{span}\{1_{[s, f]}, 1_{[s, e]}\}
    = \operatorname{span}\{1_{[s, e]}, 1_{[e + 1, f]}\},
    \qquad
    \operatorname{span}\{1_{[s, f]}, 1_{[m, f]}\}
    = \operatorname{span}\{1_{[s, m - 1]}, 1_{[m, f]}\}.

Which of the two forward selection ends with depends on the order it found them in
(a spike at the onset of a step is the step from the spike's onset with the spike on
top, or the spike with the step after it). So does the other equivalence, of an
interval from the first cell and its complement, a step to the end, the trend having a
free constant. Two conventions, stated once here, write every fit:

* **a curve starts at its normal level**: an interval from the first cell is written as
  its complement, the step from where the curve leaves that level, unless it is over by
  :data:`START_CELLS` cells and shorter than the rest (:func:`as_step`): then it is an
  edge, or a spike over the first budgets (:func:`as_steps`); a start slower than the
  rest is read so up to :data:`SLOW_START_CELLS` cells (:func:`slow_starts`);
* **a peak is its own regime**: a nested regime at the onset or end of the one around
  it whose level passes both its neighbours' is written beside it, each measured
  against the trend; one whose level lies between them is a stair of the enclosing
  regime and stays nested (:func:`side_by_side`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = [
    "MAX_WIDTH",
    "MIN_OUTSIDE",
    "SLOW_START_CELLS",
    "START_CELLS",
    "as_step",
    "candidate_intervals",
    "as_steps",
    "interval_index",
    "interval_indicators",
    "side_by_side",
    "slow_starts",
]

MIN_OUTSIDE = 3
"""Cells an interval must leave outside it: a trend and its noise need them."""

MAX_WIDTH = 64
"""Widest interval tested that does not run to the end of the grid: on a long grid every
width would make the scan quadratic in memory; a longer regime is a step to the end, or
a step with a down-step nested in it."""


@lru_cache(maxsize=8)
def candidate_intervals(t: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the intervals ``[start, end]`` of ``t`` cells that may enter the model.

    Every one leaving :data:`MIN_OUTSIDE` cells outside it, up to :data:`MAX_WIDTH` cells
    wide, and every one running to the end of the grid, but none from the second cell
    over more than :data:`START_CELLS`: the trend at the first cell is mostly that cell's
    own level (on a linear grid of 13-31 budgets its leverage is 0.34-0.52 for the
    stiffest trend, 0.6-0.98 from three degrees of freedom on), so the first cell alone
    cannot hold the normal level such a regime would depart from; the same regime from
    the first cell, a step to the end (:func:`as_step`), is offered instead, where it is
    a candidate (on six cells a spike over the second to fourth would leave only two
    cells outside it from the first: it stays). Cached (read-only): every fit, and every
    curve's reading of one, asks for its grid's.
    """
    starts, ends = np.triu_indices(t)
    width = ends - starts + 1
    keep = (t - width >= MIN_OUTSIDE) & ((width <= MAX_WIDTH) | (ends == t - 1))
    offered_from_first = np.zeros(t, dtype=bool)
    offered_from_first[ends[keep & (starts == 0)]] = True
    keep &= (starts != 1) | (width <= START_CELLS) | ~offered_from_first[ends]
    starts, ends = starts[keep], ends[keep]
    starts.setflags(write=False)
    ends.setflags(write=False)
    return starts, ends


@lru_cache(maxsize=4)
def interval_indicators(t: int) -> np.ndarray:
    """Return the indicator columns ``(t, n)`` of the candidate intervals of ``t`` cells."""
    # built once per grid length: every fit (each draw set, each power rung batch) needs
    # it; few are kept, since a 300-cell grid's holds millions of entries
    starts, ends = candidate_intervals(t)
    cells = np.arange(t)[:, None]
    z = ((cells >= starts[None, :]) & (cells <= ends[None, :])).astype(float)
    z.setflags(write=False)
    return z


START_CELLS = 2
"""Longest regime read at the start of the grid; a longer one is a step to the end."""

SLOW_START_CELLS = 3
"""Longest slow start (a start above its trend) read as such (:func:`slow_starts`)."""


def as_step(end: np.ndarray | int, t: int) -> np.ndarray | bool:
    """Whether the regime ``[0, end]`` is read as its complement, a step to the end.

    A curve starts at its normal level, so a departure from the start is a step (up or
    down) from where the curve leaves it, unless it is over by :data:`START_CELLS` cells
    and shorter than the rest: then it is an edge, or a spike over the first budgets.
    """
    width = np.asarray(end) + 1
    return (width > START_CELLS) | (t - width < width)


@lru_cache(maxsize=8)
def interval_index(t: int) -> np.ndarray:
    """Return the candidate index of each ``[start, end]`` ``(t, t)``, -1 if not one."""
    starts, ends = candidate_intervals(t)
    index = np.full((t, t), -1)
    index[starts, ends] = np.arange(starts.size)
    index.setflags(write=False)
    return index


def side_by_side(chosen: np.ndarray, delta: np.ndarray, t: int) -> np.ndarray:
    """Write each peak at the onset or end of the regime around it as its neighbour.

    ``chosen``: candidate indices ``(K, kmax)``, -1 where unused; ``delta``: their
    estimates, a nested regime's against the one around it. A nested regime that shares
    a boundary with the one around it, and whose level passes both its neighbours' (the
    enclosing regime's and the level outside it), is a spike of its own: the enclosing
    regime gives up its cells, and the two are measured side by side. So is one that
    holds most of the enclosing regime's cells: the enclosing regime's level is then
    that of its fewer cells (a spike before a step, read as a step at the spike's level
    with a stair down inside it). One whose level lies between them and holds fewer
    cells than it leaves is a stair of the enclosing regime and stays nested in it (the
    published plateau 512..624, lower at its first two budgets, is one regime). Where
    what is left is not a candidate (wider than :data:`MAX_WIDTH` and short of the grid's
    end) the pair stays nested. Only the first pass is made: the estimates it read hold
    for the intervals as they were.
    """
    out = chosen.copy()
    used = chosen >= 0
    # a pair needs two regimes: most rows (null draws above all) hold one or none
    pairs = np.count_nonzero(used, axis=1) >= 2
    if not pairs.all():
        if pairs.any():
            out[pairs] = side_by_side(chosen[pairs], delta[pairs], t)
        return out
    starts, ends = candidate_intervals(t)
    index = interval_index(t)
    s, e = starts[np.maximum(chosen, 0)], ends[np.maximum(chosen, 0)]
    d = np.nan_to_num(delta)
    for i, j in zip(*np.nonzero(~np.eye(chosen.shape[1], dtype=bool)), strict=True):
        inner = used[:, i] & used[:, j] & (e[:, i] - s[:, i] < e[:, j] - s[:, j])
        head = inner & (s[:, i] == s[:, j]) & (e[:, i] < e[:, j])
        tail = inner & (e[:, i] == e[:, j]) & (s[:, i] > s[:, j])
        level = d[:, i] + d[:, j]
        peak = (level > np.maximum(d[:, j], 0.0)) | (level < np.minimum(d[:, j], 0.0))
        most = 2 * (e[:, i] - s[:, i] + 1) > e[:, j] - s[:, j] + 1
        new = index[np.where(head, e[:, i] + 1, s[:, j]), np.where(tail, s[:, i] - 1, e[:, j])]
        move = (head | tail) & (peak | most) & (new >= 0) & (out[:, j] == chosen[:, j])
        out[move, j] = new[move]
    return out


def slow_starts(chosen: np.ndarray, delta: np.ndarray, t: int) -> np.ndarray:
    """Write each down-step from cell :data:`SLOW_START_CELLS` as the slow start before it.

    ``chosen``: candidate indices ``(K, kmax)``, -1 where unused; ``delta``: their
    estimates. Over three budgets, a start slower than the rest (first calls, a
    warm-up spread over the first budgets) is read as such, where the rest is longer;
    a faster start stays the step up from where it ends.
    """
    starts, ends = candidate_intervals(t)
    idx = np.maximum(chosen, 0)
    k = SLOW_START_CELLS
    start = interval_index(t)[0, k - 1]
    down = (starts[idx] == k) & (ends[idx] == t - 1) & (np.nan_to_num(delta) < 0)
    flip = (chosen >= 0) & down & (t - k > k) & (start >= 0)
    return np.where(flip, start, chosen)


def as_steps(chosen: np.ndarray, t: int) -> np.ndarray:
    """Write each interval from the first cell that :func:`as_step` reads as its complement.

    ``chosen``: candidate indices ``(K, kmax)``, -1 where unused. With the trend's free
    constant the two span the same model; only the sign of the estimate changes.
    """
    starts, ends = candidate_intervals(t)
    idx = np.maximum(chosen, 0)
    complement = interval_index(t)[np.minimum(ends[idx] + 1, t - 1), t - 1]
    flip = (chosen >= 0) & (starts[idx] == 0) & as_step(ends[idx], t) & (complement >= 0)
    return np.where(flip, complement, chosen)
