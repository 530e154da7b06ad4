r"""Each row's smoother: first by robust cross-validation, then jointly with its regimes.

The first choice scores each smoother a row is offered by
:math:`T\,\mathrm{RSS}_{rob} / (T - \gamma\,\nu)^2`, the residual sum of squares replaced by
its robust counterpart (the squared median absolute residual, times ``T``), so that a
spike the regimes have yet to explain does not pull the choice towards a trend that
chases it. Where the first selection kept a regime (or the first smoother is hinged),
every smoother the row is offered gets its own selection, and the pair with the smallest
:math:`T \log \mathrm{GCV} + k h^2 + \mathrm{edf} \log T` wins (:func:`joint_choice`).

A row is offered the smoothers of its *menu* (:mod:`regimes._stats.offers`): rows with
different hinges are fitted together, each choosing among its own.
"""

from __future__ import annotations

import numpy as np

from regimes._stats.final_fit import residual_sums
from regimes._stats.selection import TINY, select_with_sums
from regimes._stats.smoother import GCV_GAMMA, KNOT_PRICE
from regimes._stats.stack import Stack

__all__ = ["Menu", "choose", "joint_choice"]

Menu = tuple[np.ndarray, np.ndarray]
"""Each row's menu ``(K,)`` and the smoothers each menu offers ``(M, S)``."""


def _median(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=1)``, to the bit, from one sort.

    On rows of a few dozen cells a sort costs a third of what ``np.median``'s partition
    around three pivots and its checks do.
    """
    t = x.shape[1]
    s = np.sort(x, axis=1)
    lo, hi = (t - 1) // 2, t // 2
    mid = s[:, lo] if lo == hi else (s[:, lo] + s[:, hi]) / 2
    # a NaN sorts last, and makes the median NaN
    return np.where(np.isnan(s[:, -1]), np.nan, mid)


def _robust_choice(
    levels: np.ndarray, a: np.ndarray, trace: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""Return each row's smallest robust score's index among ``a`` ``(S, T, T)``, and bare RSS.

    The bare residual sums of squares :math:`\lVert A\ell \rVert^2` are ``(S, K)``.
    """
    t = levels.shape[1]
    # the stacked product is one product per smoother, as a call of its own makes it,
    # and one sort serves every median
    e = np.abs(np.matmul(levels, a))  # (S, K, T)
    rss = t * (1.4826 * _median(e.reshape(-1, t)).reshape(e.shape[:2])) ** 2
    used = t - trace
    best = np.argmin(t * rss / np.maximum(t - GCV_GAMMA * used, TINY)[:, None] ** 2, axis=0)
    return best, np.einsum("skt,skt->sk", e, e)


def choose(levels: np.ndarray, st: Stack, menu: Menu | None) -> tuple[np.ndarray, np.ndarray]:
    r"""Return each row's first smoother, the smallest robust score among those offered.

    ``menu``: which smoothers each row is offered (None: every one); ties go to the
    first offered. Also returns each row's :math:`\lVert A\ell \rVert^2` on every
    smoother ``(K, S)``, NaN where not offered: the joint choice's bare scores.
    """
    if menu is None:
        which, bare = _robust_choice(levels, st.a, st.trace)
        return which, bare.T
    which = np.empty(levels.shape[0], dtype=int)
    rss = np.full((levels.shape[0], st.a.shape[0]), np.nan)
    of_row, menus = menu
    for m in np.unique(of_row).tolist():
        rows = np.flatnonzero(of_row == m)
        offered = np.flatnonzero(menus[m])
        best, bare = _robust_choice(levels[rows], st.a[offered], st.trace[offered])
        which[rows] = offered[best]
        rss[np.ix_(rows, offered)] = bare.T
    return which, rss


def _scores(
    st: Stack, pw: np.ndarray, picks: np.ndarray, sums: np.ndarray, h2: float
) -> tuple[np.ndarray, np.ndarray]:
    r"""Each pair's joint score with its regimes, and without any, ``(P,)`` each.

    ``pw``: each pair's smoother; ``picks``: its regimes; ``sums``: its residual sums of
    squares without and with them and ``tr Q'Q`` ``(3, P)``.
    :math:`\mathrm{GCV} = T\,\mathrm{RSS}/(T - \gamma\nu)^2` with :math:`\nu` the
    trend's and the regimes' degrees of freedom; a hinged trend pays
    :data:`~regimes._stats.smoother.KNOT_PRICE` for its hinge.
    """
    t = st.a.shape[1]
    bare_rss, rss, regimes_df = sums
    free = t - st.trace[pw]
    edf = free + (KNOT_PRICE - 1.0) * st.hinged[pw]

    def score(rss: np.ndarray, used: np.ndarray, k: np.ndarray) -> np.ndarray:
        gcv = t * rss / np.maximum(t - GCV_GAMMA * used, TINY) ** 2
        return t * np.log(np.maximum(gcv, TINY * TINY)) + h2 * k + np.log(t) * edf

    with_regimes = score(rss, free + regimes_df, np.sum(picks >= 0, axis=1))
    return with_regimes, score(bare_rss, free, np.zeros(pw.size))


def joint_choice(
    levels: np.ndarray,
    st: Stack,
    first: tuple[np.ndarray, np.ndarray, np.ndarray],
    menu: Menu | None,
    h2: float,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Offer each row every smoother of its menu with that smoother's own regimes.

    ``first``: each row's first smoother, its selection ``(K, kmax)`` and its
    :math:`\lVert A\ell \rVert^2` on every smoother offered (:func:`choose`). A row's own
    first smoother keeps its selection; the others select afresh, but a hinged one is
    scored without regimes where the first selected none (a hinged trend's regimes would
    answer a hinge, not a step); a smoother hinged in the grid's last step is scored
    without regimes too (docs/method.md, section 2). The pair with the smallest
    :math:`T \log \mathrm{GCV} + k h^2 + \mathrm{edf} \log T` wins, the first offered
    on a tie, with regimes before without. Returns each row's smoother and regimes.
    """
    which, chosen, bare_rss = first
    k_rows, kmax = chosen.shape
    offered = np.ones((k_rows, len(st.grids)), dtype=bool) if menu is None else menu[1][menu[0]]
    pr, pw = np.nonzero(offered)  # the pairs, by row, then smoother
    picks = chosen[pr]
    kept = np.any(chosen >= 0, axis=1)
    need = np.flatnonzero((which[pr] != pw) & (kept[pr] | ~st.hinged[pw]))
    sums = np.empty((3, pr.size))
    # the pairs selected afresh read their sums off the selection, those without
    # regimes (scored bare) off the first choice's products; a row's own first choice
    # with regimes has them computed
    fresh = select_with_sums(levels[pr[need]], st, pw[need], h2, kmax)
    picks[need], sums[:, need] = fresh[0], fresh[1:]
    rest = np.setdiff1d(np.arange(pr.size), need, assume_unique=True)
    own = rest[np.any(picks[rest] >= 0, axis=1)]
    none = np.setdiff1d(rest, own, assume_unique=True)
    sums[:, own] = residual_sums(levels[pr[own]], st, pw[own], picks[own])
    sums[:2, none], sums[2, none] = bare_rss[pr[none], pw[none]], 0.0
    scores, bare = _scores(st, pw, picks, sums, h2)
    # a table row per row: its pairs in order, then the same pairs scored bare, so that
    # argmin takes the first offered on a tie, with regimes before without
    start = np.searchsorted(pr, np.arange(k_rows))
    slot = np.arange(pr.size) - start[pr]
    width = int(offered.sum(axis=1).max())
    table = np.full((k_rows, 2 * width), np.inf)
    table[pr, slot] = scores
    table[pr, width + slot] = np.where(st.last_step[pw], bare, np.inf)
    best = np.argmin(table, axis=1)
    pair, bare_best = start + best % width, best >= width
    return pw[pair], np.where(bare_best[:, None], -1, picks[pair])
