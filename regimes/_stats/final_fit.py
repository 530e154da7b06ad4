r"""The fit of each row with its chosen intervals: estimates, their covariance, scale, trend.

For a row :math:`\ell` on the smoother with residual maker :math:`A`, holding the
intervals :math:`Z` (a regime each):

.. math::

    \hat\delta = (Z^\top A Z)^{+} Z^\top A \ell, \qquad
    \operatorname{cov}(\hat\delta) = \sigma^2 (Z^\top AZ)^{+} Z^\top A^2 Z (Z^\top AZ)^{+},

with :math:`e = A_Z \ell` the residual of the joint fit, :math:`A_Z = A - Q^\top Q` for
the basis :math:`Q` of :math:`Z` orthonormal in the metric of :math:`A`
(Gram-Schmidt), :math:`\hat\sigma^2 = \lVert e\rVert^2 /
\operatorname{tr}(A_Z^2)` and the trend :math:`\ell - e - Z\hat\delta`. The pseudo-inverse
(of the eigen-decomposition, eigenvalues under :math:`10^{-15}` of the largest taken as
zero, as :func:`numpy.linalg.pinv` does) keeps a row whose intervals are dependent (an
interval from the first cell and its complement, through the trend's free constant)
finite.

Compiled (numba), one row at a time: every quantity is a few dozen numbers per row, and
as numpy operations over rows x intervals x cells they cost a tenth of a 1M-row call
in passes over arrays a few kilobytes per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numba
import numpy as np

from regimes._stats.selection import times

if TYPE_CHECKING:
    from regimes._stats.stack import Stack

__all__ = ["final_rows", "residual_sums"]

_TINY = 1e-9
"""Smallest residual degrees of freedom."""

_RCOND = 1e-15
"""Eigenvalues under this share of the largest are taken as zero (numpy's default)."""


@numba.njit(cache=True, error_model="numpy")
def _pinv(m: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with the pseudo-inverse of the symmetric ``m``, from its eigen-decomposition.

    A diagonal ``m`` (a row of one interval or none) is its own eigen-decomposition,
    exactly: its inverse is read off without one.
    """
    k = m.shape[0]
    out[:] = 0.0
    diagonal = True
    for i in range(k):
        for j in range(k):
            diagonal &= i == j or m[i, j] == 0.0
    if diagonal:
        cutoff = _RCOND * np.max(np.abs(np.diag(m)))
        for i in range(k):
            out[i, i] = 1.0 / m[i, i] if abs(m[i, i]) > cutoff else 0.0
        return
    values, vectors = np.linalg.eigh(m)
    cutoff = _RCOND * np.max(np.abs(values))
    for v in range(k):
        if abs(values[v]) > cutoff:
            for i in range(k):
                for j in range(k):
                    out[i, j] += vectors[i, v] * vectors[j, v] / values[v]


@numba.njit(cache=True, error_model="numpy")
def _basis(az: np.ndarray, zaz: np.ndarray, bounds: np.ndarray, q: np.ndarray) -> None:
    """Fill ``q`` with the intervals' basis, orthonormal in the metric of ``A`` (Gram-Schmidt).

    ``az``: each interval's ``A z``; ``zaz``: its ``z'Az`` and the floor below which it is
    explained already (its row of ``q`` stays zero, as an unused one's); ``bounds``: each
    interval's first cell and the cell after it, ``-1`` where unused.
    """
    q[:] = 0.0
    for j in range(q.shape[0]):
        if bounds[j, 0] < 0:
            continue
        den = zaz[j, 0]
        vec = az[j].copy()
        for i in range(j):
            zq = np.sum(q[i, bounds[j, 0] : bounds[j, 1]])
            den -= zq * zq
            vec -= zq * q[i]
        if den > zaz[j, 1]:
            q[j] = vec / np.sqrt(den)


@numba.njit(cache=True, error_model="numpy")
def _products(
    lev: np.ndarray, a: np.ndarray, q: np.ndarray, used: np.ndarray, w: np.ndarray
) -> None:
    r"""Fill ``w[0]`` with :math:`A\ell` and ``w[1 + j]`` with :math:`q_j A` for the used ``j``."""
    w[:] = 0.0
    times(lev, a, w[0])
    for j in used:
        times(q[j], a, w[1 + j])


@numba.njit(cache=True, error_model="numpy")
def _row(
    lev: np.ndarray,
    a: np.ndarray,
    a_sq: float,
    z: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    work: tuple[np.ndarray, np.ndarray],
) -> None:
    """Fit one row; ``z``: its intervals' ``Z'AZ`` (unused: identity), ``AZ``, bounds, basis."""
    m, az, bounds, q = z
    delta, se, cov, trend, scale = out
    prod, m_inv = work
    used = np.flatnonzero(bounds[:, 0] >= 0)
    _pinv(m, m_inv)
    _products(lev, a, q, used, prod)
    e = prod[0].copy()
    df = a_sq
    for j in used:
        e -= np.dot(q[j], lev) * q[j]
        df -= 2.0 * np.dot(prod[1 + j], q[j])
        for i in used:
            df += np.dot(q[i], q[j]) ** 2
    df = max(df, _TINY)
    scale[0], scale[1] = np.sqrt(np.sum(e * e) / df), df
    trend[:] = lev - e
    delta[:], se[:], cov[:] = np.nan, np.nan, 0.0
    # Z'A^2Z between the used intervals, then (Z'AZ)^+ Z'A^2Z (Z'AZ)^+ among them
    gram = np.zeros((used.size, used.size))
    for a_i, i in enumerate(used):
        for a_h, h in enumerate(used):
            gram[a_i, a_h] = np.dot(az[i], az[h])
    for j in used:
        for k in used:
            for a_i, i in enumerate(used):
                for a_h, h in enumerate(used):
                    cov[j, k] += m_inv[j, i] * gram[a_i, a_h] * m_inv[h, k]
    for j in used:
        delta[j] = 0.0
        for i in used:
            delta[j] += m_inv[j, i] * np.sum(prod[0, bounds[i, 0] : bounds[i, 1]])
        se[j] = np.sqrt(max(cov[j, j], 0.0))
        trend[bounds[j, 0] : bounds[j, 1]] -= delta[j]


@numba.njit(cache=True, error_model="numpy")
def _intervals(
    chosen: np.ndarray,
    s: int,
    st: tuple[np.ndarray, ...],
    intervals: tuple[np.ndarray, np.ndarray],
    z: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Fill ``z`` with one row's intervals on smoother ``s``: ``Z'AZ``, ``AZ``, bounds, ``z'Az``.

    ``Z'AZ`` holds the identity where an interval is unused, bounds ``-1``; ``z'Az`` its
    value and the floor below which the interval is explained already.
    """
    a_cols, prefix2, zaz, floor = st[1], st[2], st[3], st[4]
    starts, ends = intervals
    m, az, bounds, z_az = z
    kmax = m.shape[0]
    for j in range(kmax):
        c = chosen[j]
        m[j, :] = 0.0
        m[j, j] = 1.0
        az[j, :] = 0.0
        bounds[j, 0], bounds[j, 1] = -1, -1
        z_az[j, 0], z_az[j, 1] = 0.0, 0.0
        if c >= 0:
            bounds[j, 0], bounds[j, 1] = starts[c], ends[c] + 1
            az[j, :] = a_cols[s, ends[c] + 1] - a_cols[s, starts[c]]
            z_az[j, 0], z_az[j, 1] = zaz[s, c], floor[s, c]
    for i in range(kmax):
        for j in range(kmax):
            if bounds[i, 0] >= 0 and bounds[j, 0] >= 0:
                s0, e0, s1, e1 = bounds[i, 0], bounds[i, 1], bounds[j, 0], bounds[j, 1]
                m[i, j] = (
                    prefix2[s, e0, e1]
                    - prefix2[s, s0, e1]
                    - prefix2[s, e0, s1]
                    + prefix2[s, s0, s1]
                )


@numba.njit(cache=True, error_model="numpy")
def _work(kmax: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Work arrays of :func:`_intervals`."""
    return (
        np.empty((kmax, kmax)),
        np.empty((kmax, t)),
        np.empty((kmax, 2), dtype=np.int64),
        np.empty((kmax, 2)),
    )


@numba.njit(cache=True, error_model="numpy")
def _rows(
    levels: np.ndarray,
    w: np.ndarray,
    chosen: np.ndarray,
    st: tuple[np.ndarray, ...],
    intervals: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, ...]:
    """Fit every row on its smoother ``w[k]`` (:func:`_row`)."""
    a, a_sq = st[0], st[5]
    k_rows, kmax = chosen.shape
    t = levels.shape[1]
    delta, se = np.empty((k_rows, kmax)), np.empty((k_rows, kmax))
    cov, trend = np.empty((k_rows, kmax, kmax)), np.empty((k_rows, t))
    scale = np.empty((k_rows, 2))
    z, q = _work(kmax, t), np.empty((kmax, t))
    work = (np.empty((kmax + 1, t)), np.empty((kmax, kmax)))
    for k in range(k_rows):
        _intervals(chosen[k], w[k], st, intervals, z)
        m, az, bounds, z_az = z
        _basis(az, z_az, bounds, q)
        out = (delta[k], se[k], cov[k], trend[k], scale[k])
        _row(levels[k], a[w[k]], a_sq[w[k]], (m, az, bounds, q), out, work)
    return delta, se, scale[:, 0].copy(), scale[:, 1].copy(), trend, cov


@numba.njit(cache=True, error_model="numpy")
def _sums(
    levels: np.ndarray,
    w: np.ndarray,
    chosen: np.ndarray,
    st: tuple[np.ndarray, ...],
    intervals: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Per row: the residual sums of squares with and without its intervals, and ``tr Q'Q``."""
    a = st[0]
    k_rows, kmax = chosen.shape
    t = levels.shape[1]
    out = np.empty((k_rows, 3))
    z, q, r = _work(kmax, t), np.empty((kmax, t)), np.empty(t)
    for k in range(k_rows):
        _intervals(chosen[k], w[k], st, intervals, z)
        _basis(z[1], z[3], z[2], q)
        lev = levels[k]
        times(lev, a[w[k]], r)
        out[k, 0] = np.sum(r * r)
        for j in range(kmax):
            r -= np.dot(q[j], lev) * q[j]
        out[k, 1], out[k, 2] = np.sum(r * r), np.sum(q * q)
    return out


def _arguments(st: Stack) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, np.ndarray]]:
    g = st.grids[0]
    return (st.a, st.a_cols, st.prefix2, st.zaz, st.floor, st.a_squared), (g.starts, g.ends)


def residual_sums(
    levels: np.ndarray, st: Stack, w: np.ndarray, chosen: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Return each row's residual sums of squares without and with its intervals, and ``tr Q'Q``.

    :math:`\lVert A\ell\rVert^2`, :math:`\lVert A_Z\ell\rVert^2` and
    :math:`\operatorname{tr}(Q^\top Q)`, the degrees of freedom its intervals' basis
    takes, for row ``k`` on smoother ``w[k]`` of ``st`` with the intervals ``chosen[k]``
    (``(K, kmax)``, -1 where unused): the joint choice's scores
    (:mod:`regimes._stats.joint`).
    """
    arrays, intervals = _arguments(st)
    out = _sums(
        np.ascontiguousarray(levels, dtype=float),
        np.asarray(w, dtype=np.int64),
        np.asarray(chosen, dtype=np.int64),
        arrays,
        intervals,
    )
    return out[:, 0], out[:, 1], out[:, 2]


def final_rows(
    levels: np.ndarray, st: Stack, w: np.ndarray, chosen: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Estimates, unit standard errors, residual scale, df, trend and covariance of each row.

    Parameters
    ----------
    levels : numpy.ndarray
        Rows ``(K, T)``.
    st : Stack
        The grid's smoothers (:mod:`regimes._stats.stack`).
    w : numpy.ndarray
        Each row's smoother ``(K,)``.
    chosen : numpy.ndarray
        Each row's intervals ``(K, kmax)``, -1 where unused.

    Returns
    -------
    tuple of numpy.ndarray
        ``delta`` and ``se_unit`` ``(K, kmax)`` (NaN where unused), ``sigma`` and ``df``
        ``(K,)``, ``trend`` ``(K, T)`` and the unit covariance ``(K, kmax, kmax)`` (0
        where an interval is unused).
    """
    arrays, intervals = _arguments(st)
    return _rows(
        np.ascontiguousarray(levels, dtype=float),
        np.asarray(w, dtype=np.int64),
        np.asarray(chosen, dtype=np.int64),
        arrays,
        intervals,
    )
