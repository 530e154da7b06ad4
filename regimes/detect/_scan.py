r"""The largest statistic any interval shows in a draw, selected or not.

For a row :math:`\ell` fitted on smoother :math:`A` with residual scale
:math:`\hat\sigma`, every candidate interval :math:`z` has the estimate and standard
error it would have as the row's only regime (:mod:`regimes._stats.scan`),

.. math::

    \hat\delta_z = \frac{z^\top A \ell}{z^\top A z}, \qquad
    \mathrm{se}_z = \hat\sigma \frac{\lVert A z \rVert}{z^\top A z},

and its TREAT statistic :math:`(|\hat\delta_z| - \log r_0) / \mathrm{se}_z`. A regime
the fit selects alone has exactly the statistic of its interval, so per width class
the largest over every interval bounds the largest over the selected regimes (up to
the adjustment between regimes selected together). Unlike the latter, it exists in
every draw: its tail can be fitted where the draws select too rarely to give a
p-value under the count's floor (:func:`regimes.detect._nulls.class_p`).
"""

from __future__ import annotations

import numba
import numpy as np

from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.selection import explained_floor, interval_sums, times
from regimes._stats.smoother import Smoother
from regimes.detect._regimes import WIDTH_CLASSES, width_class

__all__ = ["scan_maxima"]


def _intervals(t: int, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``z'Az`` of every candidate interval (NaN where explained) and ``||Az|| / z'Az``."""
    z = interval_indicators(t)
    az = a @ z
    zaz = np.sum(z * az, axis=0)
    # an interval the trend spans leaves nothing to estimate, as in selection
    zaz = np.where(zaz > explained_floor(zaz), zaz, np.nan)
    return zaz, np.sqrt(np.sum(az**2, axis=0)) / zaz


_LARGEST = float(np.finfo(float).max)


@numba.njit(cache=True, error_model="numpy")
def _maxima(
    levels: np.ndarray,
    which: np.ndarray,
    a: np.ndarray,
    per_interval: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sigma: np.ndarray,
    tau0: float,
    sign: float,
    out: tuple[np.ndarray, np.ndarray],
) -> None:
    r"""Fill ``out`` (tested, either) with each row's largest statistic per width class.

    :math:`z^\top A\ell` is the sum over :math:`z` of the row times its smoother
    (:func:`~regimes._stats.selection.times`), a difference of two prefix sums
    (:func:`~regimes._stats.selection.interval_sums`): one pass over the intervals per
    row, where a product with every ``A z`` took the rows x cells x intervals.
    """
    starts, ends, classes, zaz, se_unit = per_interval
    tested, either = out
    t = levels.shape[1]
    r, pre, sums = np.empty(t), np.empty(t + 1), np.empty(starts.size)
    for k in range(levels.shape[0]):
        g = which[k]
        times(levels[k], a[g], r)
        interval_sums(r, pre, starts, ends, sums)
        scale = max(sigma[k], 1e-12)
        for i in range(starts.size):
            delta = sums[i] / zaz[g, i]
            stat = (abs(delta) - tau0) / (se_unit[g, i] * scale)
            if stat != stat:
                continue  # an explained interval: no statistic
            stat = min(stat, _LARGEST)  # an infinite one counts as the largest finite
            c = classes[i]
            either[k, c] = max(either[k, c], stat)
            if sign == 0 or sign * delta > 0:
                tested[k, c] = max(tested[k, c], stat)


def scan_maxima(
    levels: np.ndarray,
    sm: Smoother,
    which: np.ndarray,
    sigma: np.ndarray,
    tau0: float,
    sign: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row and width class, the largest TREAT statistic of any candidate interval.

    Parameters
    ----------
    levels : numpy.ndarray
        Rows ``(K, T)``, each fitted on smoother ``which`` ``(K,)`` with scale ``sigma``.
    sm : Smoother
        The grid's smoothers.
    tau0 : float
        The log of ``min_ratio``.
    sign : float
        +1 or -1 to test increases or decreases only, 0 for both.

    Returns
    -------
    tuple of numpy.ndarray
        The largest in the tested direction and in either, each ``(K, C)``.
    """
    t = sm.size
    starts, ends = candidate_intervals(t)
    used, own = np.unique(which, return_inverse=True)
    zaz, se_unit = np.empty((used.size, starts.size)), np.empty((used.size, starts.size))
    for k, w in enumerate(used.tolist()):
        zaz[k], se_unit[k] = _intervals(t, sm.residual[w])
    tested = np.full((levels.shape[0], WIDTH_CLASSES), -np.inf)
    either = tested.copy()
    classes = width_class(ends - starts + 1).astype(np.int64)
    _maxima(
        np.ascontiguousarray(levels, dtype=float),
        own.astype(np.int64),
        np.ascontiguousarray(sm.residual[used]),
        (starts, ends, classes, zaz, se_unit),
        np.asarray(sigma, dtype=float),
        float(tau0),
        float(sign),
        (tested, either),
    )
    return tested, either
