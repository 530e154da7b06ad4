"""Bootstrap draws of a curve's cell levels under its fitted null or its fitted model.

Each draw is the fitted trend (with the fitted regimes, for the model's draws) plus the
cell medians of the curve's own trial and process residuals, resampled, and a normal
between-cell term for the noise they leave unexplained (docs/method.md, sections 4
and 5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from regimes._stats.intervals import candidate_intervals
from regimes._stats.scan import RowFit, difference_scale
from regimes.detect._trials import median_draws

if TYPE_CHECKING:
    from regimes.detect._model import CurveInput

__all__ = ["draw_levels"]


def _draws(c: CurveInput, fit: RowFit, row: int, scale: float, b: int, part: int) -> np.ndarray:
    """Noise of ``n_boot`` draws of the curve (``part`` 0: the null draws, 1: the model's).

    The cell medians of the curve's own trial and process residuals, resampled, plus a
    normal between-cell term for the noise they leave unexplained: the larger of the
    fitted model's residual scale and the difference-based scale of the detrended
    levels (a cell that selection fitted as a regime cannot shrink the noise its draws
    are made with).
    """
    rng = np.random.default_rng(np.random.SeedSequence((*c.seed, part)))
    medians, var = median_draws(c.pools, c.n.size, fit.trend[row], b, rng)
    sigma = max(float(fit.sigma[row]), scale)
    tau = float(np.sqrt(max(0.0, sigma**2 - float(var.mean()))))
    return medians + rng.normal(0.0, tau, size=medians.shape)


def _fitted(fit: RowFit, row: int, t: int) -> np.ndarray:
    """Return the row's fitted values: trend plus regimes."""
    starts, ends = candidate_intervals(t)
    out = fit.trend[row].copy()
    for j, c in enumerate(fit.chosen[row]):
        if c >= 0:
            out[starts[c] : ends[c] + 1] += fit.coef[row, j]
    return out


def draw_levels(
    curves: list[CurveInput], fit: RowFit, rows: list[int], u: np.ndarray, b: int, part: int
) -> np.ndarray:
    """``b`` draws of the levels of each curve in ``rows``, stacked by curve.

    Under its fitted null (``part`` 0: the trend alone) or its fitted model (1: trend
    and regimes).
    """
    t = u.size
    levels = np.stack([curves[i].level for i in rows])
    # the residuals of the fitted model: on a short grid a spike's cells are most of the
    # differences, and left in they would make every null draw as noisy as the spike
    fitted = np.stack([_fitted(fit, i, t) for i in rows])
    scale = difference_scale(u, levels - fitted)
    stacked = []
    for k, i in enumerate(rows):
        noise = _draws(curves[i], fit, i, float(scale[k]), b, part)
        stacked.append((fit.trend[i] if part == 0 else fitted[k]) + noise)
    return np.concatenate(stacked)
