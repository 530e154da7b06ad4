r"""Greedy forward selection of intervals, each row on its own smoother.

Each step adds to a row the interval :math:`z` that reduces its residual sum of squares
most, :math:`(z^\top A_Z r)^2 / z^\top A_Z z`, until an interval no longer lowers
:math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2` (the maths: :mod:`regimes._stats.scan`).

The loop over a row's steps is compiled (numba): a step reads each candidate interval
once for its gain and once to update its sums, where numpy's one pass per array
operation over rows x intervals made about a dozen, on arrays too small for the passes
to pay (selection took a third of a 1M-row call that way; ``bench/speed.py``). Each
row is selected on its own, so a row's choice does not depend on the rows selected
beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numba
import numpy as np

if TYPE_CHECKING:
    from regimes._stats.stack import Stack

__all__ = [
    "Grid",
    "Near",
    "explained_floor",
    "interval_sums",
    "select",
    "select_near",
    "select_with_sums",
    "steps_allowed",
    "times",
]

TINY = 1e-9
"""Relative size below which a quantity is taken as zero."""


def explained_floor(zaz: np.ndarray) -> np.ndarray:
    """Return the ``z'Az`` at or below which an interval is taken as explained already."""
    return TINY * zaz + TINY


_TIE = 1e-9
"""Relative difference below which two candidates' gains are a tie."""


class Grid(NamedTuple):
    """What one smoother of the grid contributes, computed once for every row.

    ``a``: the residual maker; ``a_cols``: prefix sums of its columns, one per row
    ``(T + 1, T)``, so that ``A z`` of any interval is a difference of two rows;
    ``zaz``: ``z'Az`` of every candidate interval; ``floor``: the ``z'Az`` left after the
    basis below which an interval is taken as explained already; ``prefix2``: the 2-D
    prefix sums of ``A`` (``z_i'Az_j``); ``indicators``: the intervals' indicator
    columns ``(T, n)``, shared by the smoothers; ``hinged``: whether the smoother holds
    a hinge (:mod:`regimes._stats.smoother`); ``trace``: the trace of ``A``.
    """

    a: np.ndarray
    a_cols: np.ndarray
    zaz: np.ndarray
    floor: np.ndarray
    prefix2: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    indicators: np.ndarray
    hinged: bool
    trace: float


def steps_allowed(trace: np.ndarray, kmax: int) -> np.ndarray:
    """Return the most intervals each smoother allows: one per three residual df, 1 to ``kmax``.

    On a short grid, more would fit the noise away and leave the scale to nothing.
    """
    return np.clip((trace - 1.0) // 3, 1, kmax).astype(np.int64)


# the compiled kernels: error_model="numpy" lets a division by an explained interval's
# zero give inf (discarded) instead of raising, and lets the loops over intervals vectorise


@numba.njit(cache=True, error_model="numpy")
def _bic(rss: float, trace: float, k: int, t: int, h2: float) -> float:
    spare = max(trace - k, 1.0)
    return t * np.log(max(rss / spare, TINY * TINY)) + h2 * k


@numba.njit(cache=True, error_model="numpy")
def times(v: np.ndarray, a: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with ``v @ a`` for a row ``v``, as a loop.

    The compiled fits multiply one row at a time by its smoother's ``A``: a matrix
    library's call per product of a few thousand terms would cost more than the product.
    """
    out[:] = 0.0
    for i in range(v.size):
        for c in range(out.size):
            out[c] += v[i] * a[i, c]


@numba.njit(cache=True, error_model="numpy")
def interval_sums(
    v: np.ndarray, pre: np.ndarray, starts: np.ndarray, ends: np.ndarray, out: np.ndarray
) -> None:
    """Fill ``out`` with the sum of ``v`` over every interval (a prefix sum's differences)."""
    pre[0] = 0.0
    for j in range(v.size):
        pre[j + 1] = pre[j] + v[j]
    for i in range(starts.size):
        out[i] = pre[ends[i] + 1] - pre[starts[i]]


@numba.njit(cache=True, error_model="numpy")
def _best(
    rz: np.ndarray, explained: np.ndarray, zaz: np.ndarray, floor: np.ndarray, gain: np.ndarray
) -> tuple[int, float]:
    """Return the interval of largest gain and the gain; the first in order on a tie.

    An interval touching the first cell and its complement, a step to the end, fit the
    same model (the trend has a free constant): their gains tie exactly, and which one
    rounding favours must not decide. A NaN or infinite gain has no tolerance: the
    first interval is taken.
    """
    for i in range(rz.size):
        den = zaz[i] - explained[i]
        value = rz[i] * rz[i] / den
        gain[i] = -1.0 if den <= floor[i] else value
    top, best = -np.inf, 0
    for i in range(rz.size):
        if gain[i] > top:
            top, best = gain[i], i
        elif gain[i] != gain[i]:
            return 0, gain[0]
    if top == np.inf:
        return 0, gain[0]
    if top > 0:
        low = top - _TIE * abs(top)
        for i in range(best):
            if gain[i] >= low:
                return i, gain[i]
    return best, top


@numba.njit(cache=True, error_model="numpy")
def _add(
    lev: np.ndarray, r: np.ndarray, q: np.ndarray, step: int, vec: np.ndarray, fitted: np.ndarray
) -> float:
    """Make ``vec`` the basis's row ``step``; take its part out of ``r``; return the new RSS."""
    value = 0.0
    for j in range(lev.size):
        q[step, j] = vec[j]
        value += vec[j] * lev[j]
    rss = 0.0
    for j in range(lev.size):
        r[j] -= vec[j] * value
        rss += r[j] * r[j]
    fitted[0] = value
    return rss


@numba.njit(cache=True, error_model="numpy")
def _row(
    lev: np.ndarray,
    a: np.ndarray,
    a_cols: np.ndarray,
    zaz: np.ndarray,
    floor: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    steps: int,
    trace: float,
    h2: float,
    out: tuple[np.ndarray, np.ndarray],
    w: tuple[np.ndarray, ...],
) -> None:
    """Select one row's intervals into ``out[0]``, its residual sums into ``out[1]``.

    ``out[1]``: the residual sums of squares without and with the intervals kept, and
    ``tr Q'Q`` of their basis; the other arrays are its smoother's, ``w`` work arrays.
    """
    r, rz, explained, gain, pre, vec, rss, q, sums, fitted = w
    t = lev.size
    times(lev, a, r)
    interval_sums(r, pre, starts, ends, rz)
    explained[:] = 0.0
    rss[:] = np.inf
    rss[0] = np.sum(r * r)
    for step in range(steps):
        best, top = _best(rz, explained, zaz, floor, gain)
        if not top > 0:
            break
        out[0][step] = best
        scale = np.sqrt(zaz[best] - explained[best])
        for j in range(t):
            v = a_cols[ends[best] + 1, j] - a_cols[starts[best], j]
            for m in range(step):
                v -= sums[m, best] * q[m, j]
            vec[j] = v / scale
        rss[step + 1] = _add(lev, r, q, step, vec, fitted)
        # forward selection stops where the last interval did not lower BIC (the
        # criterion's minimum is then behind it), and at the smoother's last step
        lowered = _bic(rss[step + 1], trace, step + 1, t, h2) < _bic(rss[step], trace, step, t, h2)
        if step + 1 >= steps or not lowered:
            break
        # the residual loses fitted * vec, so its interval sums lose fitted * vec's
        interval_sums(vec, pre, starts, ends, sums[step])
        for i in range(rz.size):
            rz[i] -= fitted[0] * sums[step, i]
            explained[i] += sums[step, i] * sums[step, i]
    keep, lowest = 0, np.inf
    for k in range(rss.size):
        value = _bic(rss[k], trace, k, t, h2)
        if value < lowest:
            keep, lowest = k, value
    out[0][keep:] = -1
    out[1][0], out[1][1], out[1][2] = rss[0], rss[keep], np.sum(q[:keep] * q[:keep])


@numba.njit(cache=True, error_model="numpy")
def _forward(
    levels: np.ndarray,
    which: np.ndarray,
    a: np.ndarray,
    a_cols: np.ndarray,
    zaz: np.ndarray,
    floor: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    steps: np.ndarray,
    trace: np.ndarray,
    h2: float,
    kmax: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Select every row on its smoother ``which[k]``: its intervals and sums (:func:`_row`)."""
    k_rows, t = levels.shape
    n = starts.size
    chosen = np.full((k_rows, kmax), -1, dtype=np.int64)
    sums = np.empty((k_rows, 3))
    w = (
        np.empty(t), np.empty(n), np.empty(n), np.empty(n), np.empty(t + 1), np.empty(t),
        np.empty(kmax + 1), np.empty((kmax, t)), np.empty((kmax, n)), np.empty(1),
    )  # fmt: skip
    for k in range(k_rows):
        g = which[k]
        _row(
            levels[k], a[g], a_cols[g], zaz[g], floor[g], starts, ends,
            steps[g], trace[g], h2, (chosen[k], sums[k]), w,
        )  # fmt: skip
    return chosen, sums


def select(
    levels: np.ndarray,
    st: Stack,
    which: np.ndarray,
    h2: float,
    kmax: int,
    candidates: np.ndarray | None = None,
) -> np.ndarray:
    r"""Greedy forward selection of intervals, stopped by BIC, for each row on its smoother.

    Each step adds the interval that reduces the residual sum of squares most, while
    that lowers :math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2` (``h2``: the penalty
    of one interval; :math:`\nu_k` the residual degrees of freedom left, which a short
    grid runs out of), with at most one interval per three residual degrees of freedom
    of the trend (at least one). A row stops at the first interval that does not lower
    the criterion, or once nothing can enter its model: BIC as forward selection's
    stopping rule. Running every path to ``kmax`` and keeping the criterion's minimum
    also caught the paths whose criterion falls again after rising, at 1.5 to 2 times
    the time of a whole detection: 7 of 200 noise rows that hold a bump with another
    of either sign right after it (``tests/regimes/stats/test_selection.py``); no
    recall or null rate of ``bench/trust.py`` moved by more than one curve in 100.

    Parameters
    ----------
    levels : numpy.ndarray
        Rows ``(K, T)``.
    st : Stack
        The grid's smoothers (:mod:`regimes._stats.stack`).
    which : numpy.ndarray
        Each row's smoother ``(K,)``, an index into ``st``.
    h2 : float
        The penalty of one interval.
    kmax : int
        Most intervals per row.
    candidates : numpy.ndarray, optional
        The candidate intervals the rows select among, ascending indices; by default
        every one.

    Returns
    -------
    numpy.ndarray
        The chosen intervals ``(K, kmax)``, indices among every candidate, -1 where unused.
    """
    chosen, _ = _select(levels, st, which, h2, kmax, candidates)
    return chosen


def select_with_sums(
    levels: np.ndarray, st: Stack, which: np.ndarray, h2: float, kmax: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Return :func:`select`'s intervals, and each row's residual sums and ``tr Q'Q``.

    :math:`\lVert A\ell\rVert^2`, :math:`\lVert A_Z\ell\rVert^2` with the intervals
    kept, and :math:`\operatorname{tr}(Q^\top Q)` for their basis: what the joint
    choice scores each pair of a row and a smoother by (:mod:`regimes._stats.joint`),
    read off the selection's own steps.
    """
    chosen, sums = _select(levels, st, which, h2, kmax, None)
    return chosen, sums[:, 0], sums[:, 1], sums[:, 2]


def _select(
    levels: np.ndarray,
    st: Stack,
    which: np.ndarray,
    h2: float,
    kmax: int,
    candidates: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    g = st.grids[0]
    a, a_cols, zaz, floor, trace = st.a, st.a_cols, st.zaz, st.floor, st.trace
    # writable copies, as a subset's are: one compiled kernel serves both
    starts, ends = g.starts.copy(), g.ends.copy()
    if candidates is not None:
        # a subset is asked for by few rows (one curve's draws), on one smoother or a
        # few: only theirs are sliced
        used, which = np.unique(which, return_inverse=True)
        a, a_cols, trace = a[used], a_cols[used], trace[used]
        a.setflags(write=False)  # as the smoothers' own: one compiled kernel serves both
        zaz, floor = zaz[np.ix_(used, candidates)], floor[np.ix_(used, candidates)]
        starts, ends = starts[candidates], ends[candidates]
    chosen, sums = _forward(
        np.ascontiguousarray(levels, dtype=float),
        np.asarray(which, dtype=np.int64),
        a,
        a_cols,
        zaz,
        floor,
        starts,
        ends,
        steps_allowed(trace, kmax),
        trace,
        float(h2),
        int(kmax),
    )
    if candidates is None:
        return chosen, sums
    return np.where(chosen >= 0, candidates[np.maximum(chosen, 0)], -1), sums


Near = tuple[np.ndarray, list[np.ndarray]]
"""Each row's block ``(K,)``, and per block the candidate intervals its rows may select."""


def select_near(
    levels: np.ndarray, st: Stack, which: np.ndarray, near: Near, h2: float, kmax: int
) -> np.ndarray:
    """Select each block of rows among its own candidate intervals, as :func:`select` does.

    ``near``: each row's block ``(K,)``, and per block the indices of the candidate
    intervals its rows may select (a block without any selects nothing). Returns the
    chosen intervals ``(K, kmax)``, indices among every candidate, -1 where unused.
    """
    block, candidates = near
    chosen = np.full((levels.shape[0], kmax), -1)
    for b in np.unique(block).tolist():
        rows, sub = np.flatnonzero(block == b), candidates[b]
        if sub.size:
            chosen[rows] = select(levels[rows], st, which[rows], h2, kmax, sub)
    return chosen
