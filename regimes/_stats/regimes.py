r"""Which cells of a segmented curve are normal, and which runs of segments are regimes.

A curve's segmentation (:mod:`regimes._stats.segmentation`) cuts it where its level
shifts along the smooth trend :math:`G` (fitted with a free level per segment, so the
shifts do not bend it). Each segment :math:`k` then has a level :math:`m_k`, the
precision-weighted mean of its residuals :math:`\\ell_t - G_t`. What is *normal* is
decided once per curve, from those levels, before anything is tested:

* **reference.** A curve starts normal, and a step or a down-step departs from it: the
  start (the leading segments all at one level, their precision-weighted mean) sets the
  reference when the segments at its level hold more than :data:`EDGE_CELLS` cells (read
  past a first segment of one cell, which the extrapolated trend may tilt off the next,
  or which may be an anomaly of its own). A level known no better than the threshold (a
  cell or two at an end, where the trend is extrapolated) is close to anything, so it
  never supports a level, it only joins it. A shorter start may itself be a spike or a
  dip at the first budgets. Then, when the curve also ends in a short segment and the
  two ends (with the segments close to either) share one level along one smooth trend
  fitted to them alone, they are the reference (a long anomaly between two short normal
  stretches); otherwise the level shared by most cells is, unless the start leaves fewer
  runs of departing segments, or as many that cross the reference less often (a spike
  right after a short normal start, then a step: read from the step's level, the start
  would be a dip running straight into a spike). The reference level is the
  precision-weighted mean of its segments' levels.
* **local levels.** Closeness is judged along the trend and in local levels too
  (:func:`_local_levels`: the local jumps between neighbouring segments, chained), and
  both must agree: where few normal cells pin the trend down, its free segment levels
  can follow a step that the local jumps still show.
* **normal.** A segment is normal when its level is close to the reference: within
  ``log(min_ratio)``, or within two standard errors. Normal cells set every trend an
  interval is judged against; a dip next door is never a flank.
* **regimes.** Maximal runs of non-normal segments, cut where the sign of the departure
  changes or where neighbouring levels differ by more than ``min_ratio`` both along the
  trend and in the local jump between them (a spike right before a step is two regimes;
  a step whose onset the trend tilts is one). A regime whose two neighbours are one
  level on the same side (a spike on top of a step) is *nested*: the neighbours and it
  form the enclosing regime, and it is judged against the enclosing regime's own cells.

Each :class:`Regime` carries the cells its level comes from (its own, without nested
regimes) and its flanks: up to ``clip(width, 3, 8)`` of the nearest normal cells on
each side (of the enclosing regime's own cells for a nested one). The interval tests
(:mod:`regimes._stats.interval_tests`) compare the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats

from regimes._stats.contrasts import jump_contrast
from regimes._stats.curves import CurveEstimates
from regimes._stats.trends import SmoothTrend, default_degree

__all__ = ["EDGE_CELLS", "Regime", "find_regimes", "regime_groups"]

EDGE_CELLS = 3
"""A first segment this short (or shorter) does not set the reference level: it may be
an anomaly at the start of the grid."""

_CLOSE_SE = 2.0
"""Levels within this many standard errors of each other count as one level."""

_ONE_LEVEL_P = 0.01
"""A set of segments is one level when a single smooth trend fits it at this level."""

_JUMP_CELLS = 5
"""Cells on each side of a boundary that its local jump is measured on."""


class Regime(NamedTuple):
    """A run of non-normal segments, cell indices into its curve.

    ``inside``: the cells its level is measured on (``start..end`` without nested
    regimes); ``left`` and ``right``: its flank cells (either may be empty);
    ``parent``: the index of the enclosing regime, or -1; ``level``: its segments'
    log level over the reference (its sign is the direction of the departure).
    """

    start: int
    end: int
    inside: np.ndarray
    left: np.ndarray
    right: np.ndarray
    parent: int
    level: float


class _Piece(NamedTuple):
    """Consecutive non-normal segments of one level: cells ``start..end``."""

    start: int
    end: int
    level: float
    se: float


class _Levels(NamedTuple):
    """Segment levels from the smooth trend and their covariance.

    The trend's own uncertainty is included (it dominates at the ends of the grid, where the trend
    is an
    extrapolation).
    """

    level: np.ndarray
    cov: np.ndarray

    def gap_se(self, i: int, j: int) -> float:
        """Return the standard error of ``level[i] - level[j]``."""
        c = self.cov
        return float(np.sqrt(max(c[i, i] + c[j, j] - 2.0 * c[i, j], 0.0)))

    def close(self, i: int, j: int, threshold: float) -> bool:
        """Whether segments ``i`` and ``j`` are at one level."""
        return _close(float(self.level[i]), float(self.level[j]), self.gap_se(i, j), threshold)

    def departure(self, k: int, members: Sequence[int]) -> tuple[float, float]:
        """Return the level of segment ``k`` over the weighted mean of ``members``.

        With its standard error; ``members`` are weighted by precision.
        """
        members = list(members)
        w = 1.0 / np.diag(self.cov)[members]
        contrast = np.zeros(self.level.size)
        contrast[members] = -w / w.sum()
        contrast[k] += 1.0
        return float(contrast @ self.level), float(
            np.sqrt(max(contrast @ self.cov @ contrast, 0.0))
        )


def _segment_levels(est: CurveEstimates, trend: SmoothTrend, edges: np.ndarray) -> _Levels:
    """Measure each segment's precision-weighted mean residual from the trend.

    As contrasts of the levels (:meth:`~regimes._stats.trends.SmoothTrend.adjust`), with their
    covariance.
    """
    t, k = est.u.size, edges.size - 1
    weight = 1.0 / est.total_var
    rows = np.zeros((k, t))
    for j in range(k):
        a, b = edges[j], edges[j + 1]
        rows[j, a:b] = weight[a:b] / weight[a:b].sum()
    rows = rows - (rows @ trend.basis) @ trend.coef_map
    return _Levels(rows @ est.level, (rows * est.total_var) @ rows.T)


def _local_levels(est: CurveEstimates, edges: np.ndarray) -> _Levels:
    """Each segment's level over the first's, chained from the local jumps between them.

    Each jump is fitted on up to :data:`_JUMP_CELLS` cells on either side of a boundary
    with a common local slope (:func:`_jump_contrast`); their running sum places every
    segment without the curve's trend, whose shape, fitted with a free level per
    segment, can follow a step when few normal cells pin it down.
    """
    k, t = edges.size - 1, est.u.size
    rows = np.zeros((k, t))
    for j in range(1, k):
        a, b, c = int(edges[j - 1]), int(edges[j]), int(edges[j + 1])
        rows[j] = rows[j - 1] + _jump_contrast(est, np.arange(a, b), np.arange(b, c))
    return _Levels(rows @ est.level, (rows * est.total_var) @ rows.T)


def _locally_close(local: _Levels, anchor: Sequence[int], j: int, threshold: float) -> bool:
    """Whether segment ``j`` sits at the mean local level of the ``anchor`` segments."""
    contrast = np.zeros(local.level.size)
    contrast[list(anchor)] -= 1.0 / len(anchor)
    contrast[j] += 1.0
    se = float(np.sqrt(max(contrast @ local.cov @ contrast, 0.0)))
    return _close(float(contrast @ local.level), 0.0, se, threshold)


def _close(a: float, b: float, se: float, threshold: float) -> bool:
    gap = abs(a - b)
    return gap < threshold or gap < _CLOSE_SE * se


def _weighted_rss(design: np.ndarray, values: np.ndarray, root_w: np.ndarray) -> float:
    fit = np.linalg.lstsq(design * root_w[:, None], values * root_w, rcond=None)[0]
    return float(np.sum(((values - design @ fit) * root_w) ** 2))


def _one_level(est: CurveEstimates, members: list[int], edges: np.ndarray) -> bool:
    """Whether the segments ``members`` share one level along one smooth trend.

    A polynomial in the trend coordinate is fitted by weighted least squares to their
    cells twice: with one level for all, and with a level per segment (the degree of
    :func:`regimes._stats.trends.default_degree`, lowered until each coefficient has
    four cells; weights the inverse total variances). The drop in the weighted residual
    sum of squares is chi-square with one df per extra level under one level; the
    segments share one when its p-value exceeds 0.01.
    """
    if len(members) < 2:
        return True
    cells = np.concatenate([np.arange(edges[j], edges[j + 1]) for j in members])
    segment = np.concatenate([np.full(edges[j + 1] - edges[j], k) for k, j in enumerate(members)])
    n, m = cells.size, len(members)
    degree = default_degree(n)
    while degree > 1 and n < 4 * (degree + m):
        degree -= 1
    u = est.u[cells]
    powers = np.vander((u - u.mean()) / (float(np.ptp(u)) or 1.0), degree + 1, increasing=True)
    levels = (segment[:, None] == np.arange(m)[None, :]).astype(float)
    if n <= degree + m:
        return True
    root_w = 1.0 / np.sqrt(est.total_var[cells])
    one = _weighted_rss(powers, est.level[cells], root_w)
    free = _weighted_rss(np.column_stack([powers[:, 1:], levels]), est.level[cells], root_w)
    return bool(stats.chi2.sf(max(one - free, 0.0), m - 1) > _ONE_LEVEL_P)


def _departures(levels: _Levels, anchor: list[int], threshold: float) -> tuple[int, int]:
    """How many runs of segments would depart from the level of the ``anchor`` segments.

    Neighbouring departing segments at one level count once. Second, how many times
    neighbouring departing segments cross the anchor's level without touching it (a
    dip straight into a spike): of two readings with as many departures, the one whose
    departures stay on one side at a time is the simpler.
    """
    runs, crossings, previous, side = 0, 0, None, 0.0
    for j in range(levels.level.size):
        gap, se = levels.departure(j, anchor)
        if _close(gap, 0.0, se, threshold):
            previous = None
            continue
        if previous is None or not levels.close(previous, j, threshold):
            runs += 1
        crossings += previous is not None and gap * side < 0
        previous, side = j, gap
    return runs, crossings


def _start(levels: _Levels, threshold: float) -> list[int]:
    """Return the leading segments that are all at one level: where the curve starts."""
    start = [0]
    while len(start) < levels.level.size and all(
        levels.close(i, len(start), threshold) for i in start
    ):
        start.append(len(start))
    return start


def _reference(
    est: CurveEstimates, levels: _Levels, edges: np.ndarray, threshold: float, local: _Levels
) -> list[int]:
    """Return the reference segments (see the module docstring)."""
    k = levels.level.size
    if k == 1:
        return [0]
    sizes = np.diff(edges)
    se = np.sqrt(np.diag(levels.cov))
    # a level known no better than the threshold (one cell at an end, where the trend
    # is extrapolated) is close to anything: it may join a level, not support one
    precise = [int(j) for j in np.flatnonzero(se < max(threshold, 0.1))] or list(range(k))

    def near(anchor: list[int], j: int) -> bool:
        gap, gap_se = levels.departure(j, anchor)
        return _close(gap, 0.0, gap_se, threshold) and _locally_close(local, anchor, j, threshold)

    def members_of(anchor: list[int]) -> list[int]:
        return sorted({*anchor, *(j for j in range(k) if near(anchor, j))})

    def support(anchor: list[int]) -> int:
        return sum(int(sizes[j]) for j in precise if near(anchor, j))

    start = _start(levels, threshold)
    if support(start) > EDGE_CELLS:
        return members_of(start)
    # the first cell alone may be tilted off the next by the extrapolated trend (or be
    # an anomaly of its own): the start is then read from the segments after it
    if sizes[0] == 1 and k > 2:
        after = [j + 1 for j in _start(_Levels(levels.level[1:], levels.cov[1:, 1:]), threshold)]
        if support(after) > EDGE_CELLS:
            return members_of(after)
    ends = sorted(
        {j for j in range(k) if levels.close(j, 0, threshold) or levels.close(j, k - 1, threshold)}
    )
    if int(sizes[-1]) <= EDGE_CELLS and _one_level(est, ends, edges):
        return ends
    counts = np.asarray([support([i]) for i in precise])
    # ties go to the level the grid ends at
    majority = [precise[int(np.flatnonzero(counts == counts.max())[-1])]]
    simpler = _departures(levels, start, threshold) < _departures(levels, majority, threshold)
    anchor = start if simpler else majority
    return members_of(anchor)


def _jump_contrast(est: CurveEstimates, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Contrast of the level shift from the ``left`` cells to the adjacent ``right`` ones.

    Fitted on up to :data:`_JUMP_CELLS` cells of each next to the boundary, with a
    common slope (:func:`regimes._stats.contrasts.jump_contrast`): unlike the segments'
    levels along the curve's trend, it does not tilt where the trend is poorly
    determined.
    """
    return jump_contrast(est.u, est.total_var, left[-_JUMP_CELLS:], right[:_JUMP_CELLS])


def _pieces(
    est: CurveEstimates,
    levels: _Levels,
    departure: np.ndarray,
    edges: np.ndarray,
    normal: np.ndarray,
    threshold: float,
) -> list[_Piece]:
    """Group the non-normal segments into runs, cut at sign and large level changes.

    A segment joins the run before it when their levels differ by less than
    ``threshold`` or two of its standard errors, or when the local jump from the run's
    cells to its own (:func:`_jump_contrast`) is within ``threshold``. ``departure``
    holds each segment's level over the reference.
    """
    pieces: list[_Piece] = []
    previous = -2
    se = np.sqrt(np.diag(levels.cov))
    for k in np.flatnonzero(~normal).tolist():
        start, end = int(edges[k]), int(edges[k + 1]) - 1
        if pieces and previous == k - 1:
            last = pieces[-1]
            same_side = (last.level > 0) == (departure[k] > 0)
            run, own = np.arange(last.start, start), np.arange(start, end + 1)
            local = abs(float(_jump_contrast(est, run, own) @ est.level)) < threshold
            if same_side and (levels.close(k - 1, k, threshold) or local):
                w1, w2 = 1.0 / last.se**2, 1.0 / se[k] ** 2
                merged = (w1 * last.level + w2 * departure[k]) / (w1 + w2)
                pieces[-1] = _Piece(last.start, end, float(merged), float((w1 + w2) ** -0.5))
                previous = k
                continue
        pieces.append(_Piece(start, end, float(departure[k]), float(se[k])))
        previous = k
    return pieces


def _nest(pieces: list[_Piece], threshold: float) -> list[tuple[_Piece, list[_Piece]]]:
    """Group pieces into top-level regimes with their nested children.

    Three adjacent pieces ``a, b, c`` with ``a`` and ``c`` at one level on the same side
    and ``b`` further from the reference become one regime ``a..c`` with ``b`` nested.
    """
    groups: list[tuple[_Piece, list[_Piece]]] = [(p, []) for p in pieces]
    changed = True
    while changed:
        changed = False
        for i in range(1, len(groups) - 1):
            (a, kids_a), (b, kids_b), (c, kids_c) = groups[i - 1], groups[i], groups[i + 1]
            adjacent = a.end + 1 == b.start and b.end + 1 == c.start
            same = (a.level > 0) == (c.level > 0) == (b.level > 0)
            level_ac = _close(a.level, c.level, math.hypot(a.se, c.se), threshold)
            further = abs(b.level) > max(abs(a.level), abs(c.level))
            if adjacent and same and level_ac and further:
                w1, w2 = 1.0 / a.se**2, 1.0 / c.se**2
                merged = _Piece(
                    a.start,
                    c.end,
                    float((w1 * a.level + w2 * c.level) / (w1 + w2)),
                    float((w1 + w2) ** -0.5),
                )
                groups[i - 1 : i + 2] = [(merged, [*kids_a, b, *kids_b, *kids_c])]
                changed = True
                break
    return groups


def _flanks(
    pool: np.ndarray, start: int, end: int, flank: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``clip(width, *flank)`` cells of ``pool`` on each side of ``start..end``."""
    n = int(np.clip(end - start + 1, flank[0], flank[1]))
    return pool[pool < start][-n:], pool[pool > end][:n]


def find_regimes(
    est: CurveEstimates,
    trend: SmoothTrend,
    breaks: Sequence[int],
    min_ratio: float,
    flank: tuple[int, int] = (3, 8),
) -> list[Regime]:
    """Find the regimes of one curve, each with the cells it is measured on and its flanks.

    ``breaks`` are the indices where a new segment starts; ``min_ratio`` sets how far
    from the reference a level must be to count as a departure (see the module
    docstring). Regimes are returned top-level first, each followed by its nested ones.
    """
    if not breaks:
        return []
    t = est.u.size
    edges = np.asarray([0, *[int(b) for b in breaks], t])
    threshold = math.log(min_ratio)
    levels = _segment_levels(est, trend, edges)
    local = _local_levels(est, edges)
    members = _reference(est, levels, edges, threshold, local)
    departure = np.empty(levels.level.size)
    normal = np.zeros(levels.level.size, dtype=bool)
    for k in range(departure.size):
        departure[k], se_k = levels.departure(k, members)
        close = abs(departure[k]) < threshold and _locally_close(local, members, k, threshold)
        normal[k] = k in members or close
    pool = np.flatnonzero(np.repeat(normal, np.diff(edges)))
    out: list[Regime] = []
    pieces = _pieces(est, levels, departure, edges, normal, threshold)
    for outer, kids in _nest(pieces, threshold):
        span = np.arange(outer.start, outer.end + 1)
        own = span[~np.isin(span, [i for k in kids for i in range(k.start, k.end + 1)])]
        left, right = _flanks(pool, outer.start, outer.end, flank)
        parent = len(out)
        out.append(Regime(outer.start, outer.end, own, left, right, -1, outer.level))
        for kid in kids:
            kid_left, kid_right = _flanks(own, kid.start, kid.end, flank)
            inside = np.arange(kid.start, kid.end + 1)
            out.append(Regime(kid.start, kid.end, inside, kid_left, kid_right, parent, kid.level))
    return out


def regime_groups(regimes: Sequence[Regime], t: int) -> np.ndarray:
    """Label each of ``t`` cells: 0 when normal, ``k + 1`` when it is regime ``k``'s own.

    The labels give the trend of the tests one level for all normal cells and one per
    regime (:func:`regimes._stats.trends.grouped_trends`).
    """
    labels = np.zeros(t, dtype=np.int64)
    for k, regime in enumerate(regimes):
        labels[regime.inside] = k + 1
    return labels
