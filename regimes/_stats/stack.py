"""What selection reads of each smoother of a grid, stacked ``(S, ...)``.

Each row of a fit gathers its own smoother's arrays from the stack: the residual maker
:math:`A`, the prefix sums of its columns (``A z`` of any interval as a difference of two
rows) and its 2-D prefix sums (``z_i'Az_j``), and each interval's ``z'Az``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.selection import Grid, explained_floor
from regimes._stats.smoother import Smoother, last_knot

__all__ = ["Stack", "grid_of", "stack_of", "stacked"]


class Stack(NamedTuple):
    """The smoothers' arrays of :class:`Grid`, stacked ``(S, ...)``: each row gathers its own.

    ``a``: the smoothers' ``A``; ``trace``: their traces; ``hinged``: whether each holds
    a hinge; ``a_squared``: the sum of the squares of each smoother's ``A``;
    ``last_step``: whether its hinge is in the grid's last step (one cell after the knot).
    """

    grids: list[Grid]
    zaz: np.ndarray
    floor: np.ndarray
    a_cols: np.ndarray
    prefix2: np.ndarray
    a: np.ndarray
    trace: np.ndarray
    hinged: np.ndarray
    a_squared: np.ndarray
    last_step: np.ndarray


def grid_of(
    a: np.ndarray, intervals: tuple[np.ndarray, np.ndarray], z: np.ndarray, knot: int
) -> Grid:
    """Return what selection reads of smoother ``a``, hinged at ``knot`` (-1: unhinged)."""
    return stacked(a[None], np.array([knot]), intervals, z).grids[0]


def stacked(
    residual: np.ndarray, knots: np.ndarray, intervals: tuple[np.ndarray, np.ndarray], z: np.ndarray
) -> Stack:
    """Return what selection reads of each smoother ``(S, T, T)``, hinged at ``knots``.

    Built for every smoother at once: a grid offers up to 32 smoothers (the ladder, and
    the ladder hinged at a knot and at either neighbour), and the prefix sums of each
    cost little next to each numpy call's own overhead, paid once per call here.
    """
    s, t, _ = residual.shape
    starts, ends = intervals
    # stored as rows: gathering rows is cheaper than gathering columns
    a_cols = np.zeros((s, t + 1, t))
    a_cols[:, 1:, :] = np.cumsum(residual, axis=2).transpose(0, 2, 1)
    p = np.zeros((s, t + 1, t + 1))
    p[:, 1:, 1:] = np.cumsum(np.cumsum(residual, axis=1), axis=2)
    e1 = ends + 1
    # contiguous by rows: selection reads a smoother's row of it at once
    zaz = np.ascontiguousarray(
        p[:, e1, e1] - p[:, starts, e1] - p[:, e1, starts] + p[:, starts, starts]
    )
    floor = explained_floor(zaz)
    for knot in sorted(set(knots[knots >= 0].tolist())):
        # a regime from the knot or the cell after it, beside a hinge there, is a hinge a
        # cell away (or a step) read as two parts: a hinged trend never holds one
        near = (starts == knot) | (starts == knot + 1)
        near |= (starts == 0) & ((ends == knot - 1) | (ends == knot))  # their complements
        floor[knots == knot] = np.where(near, np.inf, floor[knots == knot])
    trace = np.trace(residual, axis1=1, axis2=2)
    grids = [
        Grid(residual[w], a_cols[w], zaz[w], floor[w], p[w], starts, ends, z, k >= 0, trace[w])
        for w, k in enumerate(knots.tolist())
    ]
    squared = np.array([np.sum(g.a**2) for g in grids])
    last = knots == last_knot(t)
    return Stack(grids, zaz, floor, a_cols, p, residual, trace, knots >= 0, squared, last)


_RECENT = 2
"""Smoothers whose :class:`Stack` is kept: a curve group's data, null draws and model
draws are fitted on one smoother, one after another. Few: on a 300-cell grid one
stack holds about 60 MB."""

_recent: dict[int, tuple[Smoother, Stack]] = {}


def stack_of(sm: Smoother) -> Stack:
    """Return :func:`_stacked` of ``sm``, kept for the last :data:`_RECENT` smoothers.

    Keyed by identity (a smoother's arrays are not hashable; grids share one object,
    :func:`regimes._stats.smoother.smoother_for`), the smoother kept beside its stack so
    that its identity cannot pass to another while the entry lives. Built afresh, the
    stacks took 6 % of a 1M-row call.
    """
    hit = _recent.get(id(sm))
    if hit is not None and hit[0] is sm:
        return hit[1]
    t = sm.size
    st = stacked(sm.residual, sm.knots, candidate_intervals(t), interval_indicators(t))
    _recent[id(sm)] = (sm, st)
    while len(_recent) > _RECENT:
        del _recent[next(iter(_recent))]
    return st
