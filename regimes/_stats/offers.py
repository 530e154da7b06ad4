"""The smoothers offered to the curves of one grid, each curve its own hinges, fitted at once.

A curve is offered the grid's ladder of smoothers and, where its levels show a hinge,
the ladder hinged at that knot and its neighbours (:func:`~regimes._stats.smoother.smoother_for`).
Curves with different knots are fitted together on the union of their smoothers, each
row choosing among its own only (its *menu*): on a grid of a thousand curves the knots
fall in a hundred or more places, and fitted one knot at a time, the few rows of each
paid every array operation of the fit for themselves (a third of a 1M-row call). A
row's answer is the one its own smoothers give; the union only shares the work.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regimes._stats.smoother import Knot, Smoother, hinged_smoothers, near_cells

__all__ = ["Offers", "offer_batches", "offers"]

_UNION_BYTES = 64 * 2**20
"""Memory of the selection arrays a union of smoothers may hold (about ``32 T^2`` bytes
per smoother: its residual maker, their prefix sums, each interval's ``z'Az``): about
800 smoothers of a 50-cell grid, 22 of a 300-cell one (a knot's own are always kept
together)."""


class Offers(NamedTuple):
    """The smoothers of a set of rows, and which of them each row may take.

    ``sm``: the grid's ladder, then the ladder hinged at each knot and shape some row is
    offered, in blocks of the ladder's length ordered by cell and shape; ``menus``: per
    distinct hinge (None first, where some row has none), the smoothers it offers
    ``(M, L)``; ``menu``: each row's ``(K,)``.
    """

    sm: Smoother
    menus: np.ndarray
    menu: np.ndarray


def _pairs(knot: Knot | None, t: int) -> list[tuple[int, float]]:
    return [] if knot is None else [(k, knot[1]) for k in near_cells(knot, t)]


def _order(knot: Knot | None) -> tuple[int, float, tuple[int, ...]]:
    return (-1, 0.0, ()) if knot is None else knot


def offers(u: np.ndarray, knots: list[Knot | None]) -> Offers:
    """Return the union of the smoothers ``knots`` offer, and each row's menu.

    Parameters
    ----------
    u : numpy.ndarray
        The grid's trend coordinates (as :func:`~regimes._stats.smoother.smoother_for`).
    knots : list of Knot or None
        Each row's hinge (:func:`~regimes._stats.smoother.choose_knots`).

    Returns
    -------
    Offers
        Each row's menu holds what ``smoother_for(u, knot)`` holds, in the same order.
    """
    t = u.size
    distinct = sorted(set(knots), key=_order)
    pairs = sorted({p for knot in distinct for p in _pairs(knot, t)})
    sm = hinged_smoothers(u, pairs)
    size = int(np.sum(~sm.hinged))
    block = {p: size * (1 + b) for b, p in enumerate(pairs)}
    menus = np.zeros((len(distinct), sm.edf.size), dtype=bool)
    menus[:, :size] = True
    for m, knot in enumerate(distinct):
        for p in _pairs(knot, t):
            menus[m, block[p] : block[p] + size] = True
    index = {knot: m for m, knot in enumerate(distinct)}
    return Offers(sm, menus, np.array([index[k] for k in knots], dtype=int))


def offer_batches(t: int, knots: list[Knot | None], ladder: int) -> list[list[int]]:
    """Split the rows into batches whose union of smoothers stays within a memory bound.

    Rows sharing a hinge stay together; batches are made in the order of the hinges.
    Returns each batch's row indices, ascending.
    """
    most = max(1, _UNION_BYTES // (32 * t * t * max(ladder, 1)))
    rows: dict[Knot | None, list[int]] = {}
    for i, knot in enumerate(knots):
        rows.setdefault(knot, []).append(i)
    batches: list[list[int]] = []
    held: set[tuple[int, float]] = set()
    for knot in sorted(rows, key=_order):
        mine = set(_pairs(knot, t))
        if not batches or len(held | mine) > most:
            batches.append([])
            held = set()
        held |= mine
        batches[-1] += rows[knot]
    return [sorted(b) for b in batches]
