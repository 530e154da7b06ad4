"""What a fitted row's selected intervals mean as regimes of a curve.

The trend has a free constant, so a regime touching the first cell and its complement,
a step to the end of the grid, are the same model; which one a curve holds is a
convention, stated once here and used by every stage that reads a fit.
"""

from __future__ import annotations

import numpy as np

from regimes._stats.scan import RowFit, candidate_intervals

__all__ = ["KMAX", "START_CELLS", "as_step", "canonical"]

KMAX = 4
"""Most regimes one curve's model holds."""

START_CELLS = 2
"""Longest regime read at the start of the grid; a longer one is a step to the end."""


def as_step(end: np.ndarray | int, t: int) -> np.ndarray | bool:
    """Whether the regime ``[0, end]`` is read as its complement, a step to the end.

    A curve starts at its normal level, so a departure from the start is a step (up or
    down) from where the curve leaves it, unless it is over by :data:`START_CELLS` cells
    and shorter than the rest: then it is an edge, or a spike over the first budgets.
    """
    width = np.asarray(end) + 1
    return (width > START_CELLS) | (t - width < width)


def canonical(fit: RowFit, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's regimes as arrays ``(K, KMAX)``: start, end, signed delta (NaN unused)."""
    starts, ends = candidate_intervals(t)
    used = fit.chosen >= 0
    idx = np.maximum(fit.chosen, 0)
    a, b = starts[idx], ends[idx]
    flip = used & (a == 0) & as_step(b, t)
    a, b = np.where(flip, b + 1, a), np.where(flip, t - 1, b)
    delta = np.where(used, np.where(flip, -fit.delta, fit.delta), np.nan)
    return a, b, delta
