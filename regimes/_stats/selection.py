r"""Greedy forward selection of intervals, for many sets of rows on their own smoothers.

Each step adds to every row the interval :math:`z` that reduces its residual sum of
squares most, :math:`(z^\top A_Z r)^2 / z^\top A_Z z`, until an interval no longer
lowers :math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2` (the maths:
:mod:`regimes._stats.scan`).

A fit offers a row to several smoothers (each its own first choice, then every other
where the first selected a regime), so selection runs on several sets of rows at once,
each with its own smoother, in lockstep: each matrix product is made per set, on the
same rows as a set on its own would make it (how BLAS rounds a product depends on its
shape, and the answers must not), and everything else once over all the sets' rows.
Selection over a few dozen rows is dominated by the cost of each array operation, not
by its size: fitted one set at a time, a grid of eight smoothers paid it eight times.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "Grid",
    "Near",
    "Scratch",
    "explained_floor",
    "residual_products",
    "scratch",
    "select",
    "select_near",
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


class Scratch(NamedTuple):
    """Work arrays of :func:`select`, ``(K, n)``, allocated once per fit.

    Fresh arrays of this size, one set per selection, would each fault in their pages.
    ``sums``: the basis's interval sums, one ``(K, n)`` per step but the last.
    """

    den: np.ndarray
    off: np.ndarray
    gain: np.ndarray
    explained: np.ndarray
    sums: np.ndarray


def scratch(k_rows: int, n: int, kmax: int) -> Scratch:
    """Return work arrays for selections of up to ``k_rows`` rows among ``n`` intervals."""
    return Scratch(
        np.empty((k_rows, n)),
        np.empty((k_rows, n), dtype=bool),
        np.empty((k_rows, n)),
        np.empty((k_rows, n)),
        np.empty((max(kmax - 1, 0), k_rows, n)),
    )


_SET_ROWS = 16
"""Rows per set, on average, below which :func:`_gains` gathers each row's ``z'Az`` and
floor instead of looping over the sets: a union of hinged smoothers gives a selection
hundreds of sets of a few rows, and two calls per set and step cost more than a pass."""


def residual_products(values: np.ndarray, mats: list[np.ndarray], group: np.ndarray) -> np.ndarray:
    """Return ``values[k] @ mats[group[k]]`` for every row ``k``, rows ordered by ``group``.

    ``values``: ``(K, T)`` or ``(K, J, T)``; one product per smoother that has rows.
    """
    out = np.empty((*values.shape[:-1], mats[0].shape[1]))
    edges = np.searchsorted(group, np.arange(len(mats) + 1))
    for g in np.flatnonzero(np.diff(edges)).tolist():
        a, b = int(edges[g]), int(edges[g + 1])
        np.matmul(values[a:b], mats[g], out=out[a:b])
    return out


def _bounds(group: np.ndarray, count: int) -> list[tuple[int, int]]:
    """Return each set's rows ``[a, b)``: the live rows stay ordered by set."""
    edges = np.searchsorted(group, np.arange(count + 1)).tolist()
    return list(zip(edges[:-1], edges[1:], strict=True))


class _Sets(NamedTuple):
    """The smoothers of one selection, as :func:`_best` reads them.

    ``grids``: one per set; ``zaz``, ``floor``: theirs stacked ``(S, n)`` where the
    sets are small, gathered per row at each step instead of a loop over the sets
    (None where sets are few and large: each set's row then broadcasts).
    """

    grids: list[Grid]
    zaz: np.ndarray | None
    floor: np.ndarray | None


def _sets(grids: list[Grid], rows: int) -> _Sets:
    if len(grids) * _SET_ROWS <= rows:
        return _Sets(grids, None, None)
    return _Sets(grids, np.stack([g.zaz for g in grids]), np.stack([g.floor for g in grids]))


def _gains(
    rz: np.ndarray, sets: _Sets, group: np.ndarray, explained: np.ndarray | None, w: Scratch
) -> tuple[np.ndarray, np.ndarray | None]:
    """Fill ``w``'s first rows with each interval's gain and ``z'A_Z z``; return them.

    ``z'A_Z z`` is None where it is each set's own ``z'Az`` (before the first interval,
    sets looped over).
    """
    n = rz.shape[0]
    den, off, gain = w.den[:n], w.off[:n], w.gain[:n]
    if sets.zaz is not None and sets.floor is not None:
        np.take(sets.zaz, group, axis=0, out=den)
        if explained is not None:
            np.subtract(den, explained, out=den)
        np.take(sets.floor, group, axis=0, out=gain)
        # den is finite (the basis is), so "not above the floor" is "at most it"
        np.less_equal(den, gain, out=off)
        np.square(rz, out=gain)
        np.divide(gain, den, out=gain)
        np.copyto(gain, -1.0, where=off)
        return gain, den
    np.square(rz, out=gain)
    # dividing everywhere and overwriting the intervals explained already is faster
    # than a masked division; what those few quotients overflow to is discarded (the
    # caller silences their warnings: one context per step would cost more)
    bounds = _bounds(group, len(sets.grids))
    for g, (a, b) in zip(sets.grids, bounds, strict=True):
        if a >= b:
            continue
        if explained is None:
            # before the first interval a set's rows share z'Az: divided by it as a row
            # vector, not by copies of it
            np.divide(gain[a:b], g.zaz, out=gain[a:b])
            np.copyto(gain[a:b], -1.0, where=g.zaz <= g.floor)
        else:
            np.subtract(g.zaz, explained[a:b], out=den[a:b])
            np.less_equal(den[a:b], g.floor, out=off[a:b])
    if explained is None:
        return gain, None
    np.divide(gain, den, out=gain)
    np.copyto(gain, -1.0, where=off)
    return gain, den


def _best(
    rz: np.ndarray,
    sets: _Sets,
    group: np.ndarray,
    explained: np.ndarray | None,
    w: Scratch,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return each row's best interval, its gain and ``z'A_Z z``, for residual sums ``rz``.

    ``rz``: the residual's sum over every interval, ``r'z``; ``explained``: the sums of
    squares of the basis's interval sums, ``None`` before the first interval
    (``z'A_Z z`` is then ``z'Az``). Works in the first ``len(rz)`` rows of ``w``: on rows
    of a few dozen draws each step is dominated by passes over these arrays, so none is
    allocated afresh.
    """
    n = rz.shape[0]
    gain, den = _gains(rz, sets, group, explained, w)
    # an interval touching the first cell and its complement, a step to the end, fit
    # the same model (the trend has a free constant): their gains tie exactly, and
    # which one rounding favours must not decide; the first in candidate order wins.
    # Only a row whose runner-up is within the tolerance can have a tie before its first
    # maximum, so only those rows are searched (a row whose best gain is not positive
    # takes nothing, whichever interval is its best)
    rows = np.arange(n)
    best = np.argmax(gain, axis=1)
    top = gain[rows, best]
    low = top - _TIE * np.abs(top)
    gain[rows, best] = -np.inf
    runner_up = gain.max(axis=1)
    gain[rows, best] = top
    near = (runner_up >= low) & (top > 0)
    if near.any():
        best[near] = np.argmax(gain[near] >= low[near, None], axis=1)
    # a row whose best gain is NaN or infinite has no tolerance: nothing ties with it,
    # and its first interval counts as its best (low holds no -inf, so a NaN sum is a
    # NaN entry, and a NaN is the one value unequal to itself)
    total = low.sum()
    if total != total:
        lost = np.flatnonzero(np.isnan(low))
        best[lost], top[lost] = 0, gain[lost, 0]
    if den is not None:
        return best, top, den[rows, best]
    picked = np.empty(n)
    for g, (a, b) in zip(sets.grids, _bounds(group, len(sets.grids)), strict=True):
        picked[a:b] = g.zaz[best[a:b]]
    return best, top, picked


class _State(NamedTuple):
    """The live rows of a selection, compacted as rows leave (ordered by set).

    ``live``: their index among all rows; ``group``: their set; ``lev``, ``r``: levels
    and residual; ``rz``: the residual's interval sums; ``q``: the basis so far;
    ``sums``: its interval sums; ``explained``: their running sum of squares.
    """

    live: np.ndarray
    group: np.ndarray
    lev: np.ndarray
    r: np.ndarray
    rz: np.ndarray
    q: np.ndarray
    sums: list[np.ndarray]
    explained: np.ndarray | None


def _keep(s: _State, rows: np.ndarray) -> _State:
    """Return the state of the rows ``rows`` (a mask) only."""
    live, group, lev, r, rz, q = (v[rows] for v in (s.live, s.group, s.lev, s.r, s.rz, s.q))
    explained = None if s.explained is None else s.explained[rows]
    return _State(live, group, lev, r, rz, q, [v[rows] for v in s.sums], explained)


def _start(parts: list[tuple[np.ndarray, Grid]], kmax: int) -> _State:
    """Return the state before the first step: every row live, its residual ``A l``."""
    sizes = [lev.shape[0] for lev, _ in parts]
    lev = np.concatenate([lev for lev, _ in parts])
    group = np.repeat(np.arange(len(parts)), sizes)
    r = residual_products(lev, [g.a for _, g in parts], group)
    # the parts' intervals are the same: one product for every row
    rz = r @ parts[0][1].indicators
    q = np.zeros((lev.shape[0], kmax, lev.shape[1]))
    return _State(np.arange(lev.shape[0]), group, lev, r, rz, q, [], None)


class _Step(NamedTuple):
    """What every step of one selection reads: its smoothers and the steps each allows.

    ``a_cols``: the smoothers' :attr:`Grid.a_cols`, stacked ``(S, T + 1, T)``;
    ``trace``: each smoother's ``tr A``; ``h2``: the penalty of one interval.
    """

    sets: _Sets
    a_cols: np.ndarray
    steps: np.ndarray
    trace: np.ndarray
    h2: float
    work: Scratch


def _step(s: _State, c: _Step, step: int, chosen: np.ndarray, rss: np.ndarray) -> _State:
    """Add each live row's best interval to its model; return the rows that go on.

    A row goes on while its last interval lowered its criterion and its set allows
    another step.
    """
    best, top, den = _best(s.rz, c.sets, s.group, s.explained, c.work)
    take = top > 0
    if not take.all():
        s, best, den = _keep(s, take), best[take], den[take]
    chosen[s.live, step] = best
    g = c.sets.grids[0]
    vec = c.a_cols[s.group, g.ends[best] + 1] - c.a_cols[s.group, g.starts[best]]
    if s.sums:
        zq = np.empty((best.size, step))
        for j, v in enumerate(s.sums):
            zq[:, j] = v[np.arange(best.size), best]
        vec -= np.einsum("kj,kjt->kt", zq, s.q[:, :step])
    np.divide(vec, np.sqrt(den)[:, None], out=vec)
    s.q[:, step] = vec
    # np.add.reduce is what np.sum runs, without its wrappers' cost per call
    fitted = np.add.reduce(vec * s.lev, axis=1, keepdims=True)
    np.subtract(s.r, vec * fitted, out=s.r)
    rss[s.live, step + 1] = np.add.reduce(np.square(s.r), axis=1)
    # forward selection stops a row where its last interval did not lower BIC (the
    # criterion's minimum is then behind it), and a set at its last step: the interval
    # sums below would serve a next step only
    go_on = (c.steps[s.group] > step + 1) & _improved(rss, s, c.trace, step, c.h2)
    if not go_on.all():
        s, vec, fitted = _keep(s, go_on), vec[go_on], fitted[go_on]
    m, w = s.live.size, c.work
    if m == 0:
        return s
    np.matmul(vec, g.indicators, out=w.sums[step, :m])
    sums = w.sums[step, :m]
    # the residual loses fitted * vec, so its interval sums lose fitted * sums: one
    # product per step where computing r'z afresh would take a second
    np.subtract(s.rz, np.multiply(fitted, sums, out=w.gain[:m]), out=s.rz)
    if s.explained is None:
        explained = np.square(sums, out=w.explained[:m])
    else:
        explained = s.explained
        explained += np.square(sums, out=w.gain[:m])
    return s._replace(sums=[*s.sums, sums], explained=explained)


def _bic(rss: np.ndarray, trace: np.ndarray, k: np.ndarray, t: int, h2: float) -> np.ndarray:
    r""":math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2`, :math:`\nu_k` = trace - k (at least 1)."""
    spare = np.maximum(trace - k, 1.0)
    return t * np.log(np.maximum(rss / spare, TINY * TINY)) + h2 * k


def _improved(rss: np.ndarray, s: _State, trace: np.ndarray, step: int, h2: float) -> np.ndarray:
    """Whether each live row's interval of ``step`` lowered its BIC."""
    ks = np.array([step, step + 1])
    t = s.lev.shape[1]
    bic = _bic(rss[s.live, step : step + 2], trace[s.group][:, None], ks[None, :], t, h2)
    return bic[:, 1] < bic[:, 0]


def _select_together(
    parts: list[tuple[np.ndarray, Grid]], h2: float, kmax: int, work: Scratch
) -> np.ndarray:
    """Select on every part at once; return the chosen intervals of all their rows."""
    s = _start(parts, kmax)
    grids = [g for _, g in parts]
    k_rows, t = s.lev.shape
    chosen = np.full((k_rows, kmax), -1)
    rss = np.full((k_rows, kmax + 1), np.inf)
    rss[:, 0] = np.sum(s.r**2, axis=1)
    trace = np.array([g.trace for g in grids])
    # each regime needs about three residual degrees of freedom of its own: on a short
    # grid, more would fit the noise away and leave the scale to nothing
    steps = np.array([min(kmax, max(1, int((v - 1.0) // 3))) for v in trace])
    c = _Step(_sets(grids, k_rows), np.stack([g.a_cols for g in grids]), steps, trace, h2, work)
    group = s.group
    # what the division in _best overflows to is discarded
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        for step in range(int(steps.max())):
            s = _step(s, c, step, chosen, rss)
            if s.live.size == 0:
                break
    k = np.arange(kmax + 1)[None, :]
    keep = np.argmin(_bic(rss, trace[group][:, None], k, t, h2), axis=1)
    chosen[np.arange(kmax)[None, :] >= keep[:, None]] = -1
    return chosen


def select(
    parts: list[tuple[np.ndarray, Grid]], h2: float, kmax: int, work: Scratch
) -> list[np.ndarray]:
    r"""Greedy forward selection of intervals, stopped by BIC, on each part.

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
    parts : list of (numpy.ndarray, Grid)
        Row sets ``(K_i, T)``, each with its smoother; each of at most as many rows as
        ``work`` holds. The smoothers are of one grid: their candidate intervals are
        the same.
    h2 : float
        The penalty of one interval.
    kmax : int
        Most intervals per row.
    work : Scratch
        Work arrays; parts are selected together while their rows fit in it.

    Returns
    -------
    list of numpy.ndarray
        Per part, the chosen intervals ``(K_i, kmax)``, -1 where unused.
    """
    cap = work.den.shape[0]
    out: list[np.ndarray] = []
    first = 0
    while first < len(parts):
        last, rows = first, 0
        while last < len(parts) and (last == first or rows + parts[last][0].shape[0] <= cap):
            rows += parts[last][0].shape[0]
            last += 1
        chosen = _select_together(parts[first:last], h2, kmax, work)
        edges = np.cumsum([p[0].shape[0] for p in parts[first:last]])[:-1]
        out += np.split(chosen, edges)
        first = last
    return out


Near = tuple[np.ndarray, list[np.ndarray]]
"""Each row's block ``(K,)``, and per block the candidate intervals its rows may select."""


def select_near(
    levels: np.ndarray,
    grids: list[Grid],
    which: np.ndarray,
    near: Near,
    h2: float,
    kmax: int,
) -> np.ndarray:
    """Select each block of rows among its own candidate intervals, as :func:`select` does.

    Parameters
    ----------
    levels : numpy.ndarray
        Rows ``(K, T)``.
    grids : list of Grid
        The smoothers; row ``k`` is selected on ``grids[which[k]]``.
    which : numpy.ndarray
        Each row's smoother ``(K,)``.
    near : Near
        Each row's block ``(K,)``, and per block the indices of the candidate intervals
        its rows may select; a block without any selects nothing.
    h2 : float
        The penalty of one interval.
    kmax : int
        Most intervals per row.

    Returns
    -------
    numpy.ndarray
        The chosen intervals ``(K, kmax)``, indices among every candidate, -1 where unused.
    """
    block, candidates = near
    chosen = np.full((levels.shape[0], kmax), -1)
    for b in np.unique(block).tolist():
        rows, sub = np.flatnonzero(block == b), candidates[b]
        if not sub.size:
            continue
        # the same rows and smoother with fewer columns: each grid's per-interval arrays
        # are sliced to the block's candidates, and the choices mapped back
        parts = [(rows[which[rows] == w], grids[w]) for w in np.unique(which[rows]).tolist()]
        narrow = [
            (
                levels[r],
                g._replace(
                    zaz=g.zaz[sub],
                    floor=g.floor[sub],
                    starts=g.starts[sub],
                    ends=g.ends[sub],
                    indicators=g.indicators[:, sub],
                ),
            )
            for r, g in parts
        ]
        picked = select(narrow, h2, kmax, scratch(rows.size, sub.size, kmax))
        for (r, _), part in zip(parts, picked, strict=True):
            chosen[r] = np.where(part >= 0, sub[np.maximum(part, 0)], -1)
    return chosen
