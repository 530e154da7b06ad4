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

import numpy as np

from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.selection import explained_floor
from regimes._stats.smoother import Smoother
from regimes.detect._regimes import WIDTH_CLASSES, width_class

__all__ = ["scan_maxima"]

_CHUNK_ENTRIES = 2_000_000
"""Rows x intervals per chunk: bounds the memory of the per-interval statistics."""


def _intervals(t: int, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``A z`` of every candidate interval ``(T, n)``, ``z'Az`` and ``||Az|| / z'Az``."""
    z = interval_indicators(t)
    az = a @ z
    zaz = np.sum(z * az, axis=0)
    # an interval the trend spans leaves nothing to estimate, as in selection
    zaz = np.where(zaz > explained_floor(zaz), zaz, np.nan)
    return az, zaz, np.sqrt(np.sum(az**2, axis=0)) / zaz


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
    classes = width_class(ends - starts + 1)
    tested = np.full((levels.shape[0], WIDTH_CLASSES), -np.inf)
    either = tested.copy()
    chunk = max(1, _CHUNK_ENTRIES // max(starts.size, 1))
    for w in np.unique(which):
        az, zaz, se_unit = _intervals(t, sm.residual[w])
        rows = np.flatnonzero(which == w)
        for first in range(0, rows.size, chunk):
            part = rows[first : first + chunk]
            delta = (levels[part] @ az) / zaz
            stat = (np.abs(delta) - tau0) / (se_unit * np.maximum(sigma[part], 1e-12)[:, None])
            stat = np.nan_to_num(stat, nan=-np.inf)
            own = stat if sign == 0 else np.where(sign * delta > 0, stat, -np.inf)
            for c in range(WIDTH_CLASSES):
                in_class = classes == c
                either[part, c] = stat[:, in_class].max(axis=1, initial=-np.inf)
                tested[part, c] = own[:, in_class].max(axis=1, initial=-np.inf)
    return tested, either
