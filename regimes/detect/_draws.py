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
from regimes.detect._trials import Pools, resampled

if TYPE_CHECKING:
    from regimes.detect._model import CurveInput

__all__ = ["draw_levels", "median_draws"]


def median_draws(
    p: Pools, t: int, trend: np.ndarray, b: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Cell medians of resampled processes and trials, centred per cell ``(b, t)``.

    Each of the cell's processes draws a deviation from the curve's process residuals
    (:func:`~regimes.detect._trials.resampled`, about its fitted ``trend``), each of
    its trials one of the trials' own deviations; the cell level is the median of its
    trials, as for the data. A cell of one process draws its median directly
    (:func:`_middle_draws`). Returns the medians and their variances.
    """
    events, residuals = resampled(p, trend)
    if residuals.size < 2 and events.size < 2:
        return np.zeros((b, t)), np.zeros(t)
    sizes, cells = p.block_size, p.block_cell
    alone = np.bincount(cells, minlength=t)[cells] == 1
    shared = ~alone
    lo, hi = np.zeros((b, int(alone.sum()))), np.zeros((b, int(alone.sum())))
    values = np.zeros((b, int(sizes[shared].sum())))
    if residuals.size >= 2:
        lo, hi = _middle_draws(residuals, sizes[alone], b, rng)
        values += residuals[rng.integers(0, residuals.size, size=values.shape)]
    effect = np.zeros((b, sizes.size))
    if events.size >= 2:
        effect = events[rng.integers(0, events.size, size=(b, sizes.size))]
    medians = np.zeros((b, t))
    # a process's deviation moves each of its trials, so its cell's median by as much
    medians[:, cells[alone]] = 0.5 * ((lo + effect[:, alone]) + (hi + effect[:, alone]))
    if shared.any():
        values += np.repeat(effect[:, shared], sizes[shared], axis=1)
        medians[:, np.unique(cells[shared])] = _shared_medians(values, sizes[shared], cells[shared])
    medians -= medians.mean(axis=0, keepdims=True)
    return medians, medians.var(axis=0)


def _middle_draws(
    pool: np.ndarray, n: np.ndarray, b: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    r"""Draw the two middle values of ``n[j]`` draws with replacement from ``pool``, ``b`` times.

    ``pool`` is sorted, so the :math:`a`-th smallest of :math:`n` draws is the pool's
    value at the :math:`a`-th smallest of :math:`n` uniform indices, which is
    :math:`\lfloor N U_{(a)} \rfloor` for the :math:`a`-th order statistic of :math:`n`
    uniforms on (0, 1) (the floor keeps the order). That one is drawn directly from
    exponential spacings, :math:`U_{(a)} = S_a / S_{n+1}` with :math:`S_k` the sum of
    the first :math:`k` of :math:`n + 1` exponentials (Devroye 1986, chapter V), and
    :math:`U_{(a+1)}` from the next spacing: three draws per median where resampling
    every trial and sorting took :math:`n` and a sort. Returns the ``(b, len(n))`` values
    of ranks :math:`\lfloor (n-1)/2 \rfloor` and :math:`\lfloor n/2 \rfloor` (from 0),
    equal for odd :math:`n`.
    """
    a = (n - 1) // 2 + 1
    before = rng.standard_gamma(_shape(a), size=(b, n.size))
    gap = rng.standard_exponential(size=(b, n.size))
    after = rng.standard_gamma(_shape(n - a), size=(b, n.size))
    total = before + gap + after
    top = pool.size - 1
    low = np.minimum((pool.size * (before / total)).astype(np.int64), top)
    high = np.minimum((pool.size * ((before + gap) / total)).astype(np.int64), top)
    even = n % 2 == 0
    return pool[low], pool[np.where(even, high, low)]


def _shape(a: np.ndarray) -> float | np.ndarray:
    """Return ``a`` as the gamma's shape: one number where every cell has the same.

    The same draws either way (numpy draws element by element), a quarter faster.
    """
    return float(a[0]) if a.size and (a == a[0]).all() else a.astype(float)


def _shared_medians(values: np.ndarray, sizes: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Medians of the cells measured in several processes, from every drawn trial.

    ``values``: the drawn trials ``(b, trials)``, block after block; ``sizes``,
    ``cells``: the blocks' sizes and cells, in cell order. Returns ``(b, cells)``.
    """
    b, total = values.shape
    _, cell_of = np.unique(np.repeat(cells, sizes), return_inverse=True)
    m = int(cell_of.max()) + 1
    n = np.bincount(cell_of, minlength=m)
    first = np.searchsorted(cell_of, np.arange(m))
    grid = np.full((b, m, int(n.max())), np.inf)
    grid[:, cell_of, np.arange(total) - first[cell_of]] = values
    grid.sort(axis=2)
    return 0.5 * (grid[:, np.arange(m), (n - 1) // 2] + grid[:, np.arange(m), n // 2])


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
