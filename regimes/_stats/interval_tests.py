r"""Tests of intervals against their flanking trend, and of shifts at change points.

Every statistic is a linear contrast of cell levels with a Welch-Satterthwaite t
reference (:mod:`regimes._stats.contrasts`). Contrasts of residuals from the curve's
smooth trend :math:`G` (:class:`~regimes._stats.trends.SmoothTrend`, a robust
polynomial fitted with a free level per segment) stay linear in the levels because
:math:`G` is, so the trend's own uncertainty is part of every variance.

* An *interior* interval ``[i, j]`` is compared with the straight line (weighted least
  squares) through up to ``flank`` residual cells on each side, taken from the
  neighbouring segments only: :math:`D` is the precision-weighted mean of the
  interval's residuals minus the line at their weighted mean position. A plateau may
  cover most of the grid; its flanks still set the trend. It must also jump up at its
  start and fall back at its end.
* An interval that runs to the end of the grid (a *step*) or starts at its beginning
  has one flank, and extrapolating a line over a long interval would mistake a change
  of slope for a level shift: its statistic is the mean residual over the interval
  minus that over the flank, gated by the jump at its inner boundary and by the
  segment at the grid's end standing up too (no recovery).

Gates enter as an intersection-union test: the p-value is the largest of the gates'
and the main test's.

Post-selection. Candidates are chosen by segmenting the same data, which would make a
naive p-value far too small. Each p-value is therefore Bonferroni-adjusted for the scan
over every interval the grid has (:math:`T(T+1)/2 - 1`, or :math:`T - 1` boundaries for
change points): whatever rule picked the candidate, the adjusted p-value stays valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy import special

from regimes._stats.contrasts import (
    ContrastResults,
    broken_line_jump_contrast,
    contrast_test,
    flank_line,
    jump_contrast,
    level_contrast,
    scan_family,
    scan_p_values,
    treat_p_values,
)
from regimes._stats.curves import CurveEstimates
from regimes._stats.regimes import Regime
from regimes._stats.trends import SmoothTrend

__all__ = [
    "DIRECTIONS",
    "ChangePointTests",
    "IntervalTests",
    "change_point_tests",
    "interval_tests",
    "regime_kind",
    "regime_tests",
]

DIRECTIONS = ("up", "down", "both")

Test = tuple[float, float, float]
"""``(estimate, se, df)`` of one contrast."""


@dataclass(frozen=True)
class IntervalTests(ContrastResults):
    """Tests of candidate intervals of one curve."""

    start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    peak: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    trend: list[np.ndarray] = field(default_factory=list)


@dataclass(frozen=True)
class ChangePointTests(ContrastResults):
    """Jump tests at the boundaries of one curve's segments (``index``: first cell after)."""

    index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class _Cells(NamedTuple):
    """The cells one candidate is judged on (index arrays)."""

    inside: np.ndarray
    left: np.ndarray
    right: np.ndarray
    first: np.ndarray
    last: np.ndarray


class _Outcome(NamedTuple):
    """One candidate's main test, its gates (``None``: none needed) and flank trend."""

    kind: str
    main: Test
    gates: list[Test] | None
    trend: np.ndarray


def _cells(
    candidate: tuple[int, int, int, int], edges: Sequence[int], flank: tuple[int, int]
) -> _Cells:
    """Collect the cells one candidate is judged on.

    Inside cells, flank cells from the neighbouring segments, and the cells of the first and last
    segment next to the boundaries.
    """
    start, end, a, b = candidate
    t = edges[-1]
    n_flank = int(np.clip(end - start + 1, flank[0], flank[1]))
    left = np.arange(max(edges[a - 1] if a > 0 else 0, start - n_flank), start)
    right = np.arange(end + 1, min(edges[b + 2] if b + 2 < len(edges) else t, end + 1 + n_flank))
    inside = np.arange(start, end + 1)
    first = inside[: min(n_flank, edges[a + 1] - start)]
    last = inside[-min(n_flank, end + 1 - edges[b]) :]
    return _Cells(inside, left, right, first, last)


class _Contrasts:
    """The tests of one curve: contrasts, jumps and the hopeless-statistic shortcut."""

    def __init__(
        self, est: CurveEstimates, smooth: SmoothTrend | None, direction: str, scan: int
    ) -> None:
        self.est = est
        self.smooth = smooth
        self.direction = direction
        self.total_var = est.total_var
        # a main statistic whose normal tail times the scan is at least 1 has p = 1 (a t
        # tail is heavier still): its gates cannot change that and are skipped
        self.z_cut = -special.ndtri((0.5 if direction == "both" else 1.0) / scan)

    def test(self, c: np.ndarray) -> Test:
        """Test the contrast ``c`` of the levels."""
        est = self.est
        return contrast_test(c, est.level, est.var, est.df, est.tau2, est.tau2_df)

    def hopeless(self, estimate: float, se: float) -> bool:
        """Whether the statistic cannot reach a p-value below 1 after the scan."""
        signed = {"up": estimate, "down": -estimate, "both": abs(estimate)}[self.direction]
        return bool(se > 0 and signed / se < self.z_cut)

    def jump(self, after: np.ndarray, before: np.ndarray) -> Test:
        """Shift from ``before`` to the adjacent ``after`` cells along the trend."""
        if self.smooth is not None:
            return self.test(self.smooth.adjust(level_contrast(self.total_var, after, before)))
        u = self.est.u
        if before[0] < after[0]:
            return self.test(jump_contrast(u, self.total_var, before, after))
        return self.test(-jump_contrast(u, self.total_var, after, before))


def _interior(tests: _Contrasts, cells: _Cells) -> _Outcome:
    """Test an interval with flanks on both sides against the line through them."""
    est, smooth = tests.est, tests.smooth
    flanks = np.concatenate([cells.left, cells.right])
    c, rows, proj = flank_line(est.u, tests.total_var, cells.inside, flanks)
    if smooth is None:
        main = tests.test(c)
        trend = rows @ (proj @ est.level[flanks])
    else:
        main = tests.test(smooth.adjust(c))
        residual = (est.level - smooth.values)[flanks]
        trend = smooth.values[cells.inside] + rows @ (proj @ residual)
    gates = (
        None
        if tests.hopeless(main[0], main[1])
        else [tests.jump(cells.first, cells.left), tests.jump(cells.last, cells.right)]
    )
    return _Outcome("spike", main, gates, trend)


def _edge(tests: _Contrasts, cells: _Cells, far: np.ndarray) -> _Outcome:
    """Test an interval touching an end of the grid against its one flank.

    ``far`` is the segment at the grid's end it must also stand off from its flank.
    """
    est, smooth = tests.est, tests.smooth
    if cells.left.size:
        side, own = cells.left, cells.first
    else:
        side, own = cells.right, cells.last
    kind = "step" if cells.left.size else "spike"
    if smooth is None:
        _, rows, proj = flank_line(est.u, tests.total_var, cells.inside, side)
        return _Outcome(kind, tests.jump(own, side), None, rows @ (proj @ est.level[side]))
    main = tests.jump(cells.inside, side)
    gates = (
        None if tests.hopeless(main[0], main[1]) else [tests.jump(own, side), tests.jump(far, side)]
    )
    w = 1.0 / tests.total_var[side]
    shift = float(w @ (est.level - smooth.values)[side] / w.sum())
    return _Outcome(kind, main, gates, smooth.values[cells.inside] + shift)


def _peak(level: np.ndarray, cells: _Cells, trend: np.ndarray, direction: str) -> int:
    """Index of the most extreme cell of the interval relative to its trend."""
    deviation = level[cells.inside] - trend
    if direction == "down":
        return int(cells.inside[np.argmin(deviation)])
    return int(cells.inside[np.argmax(np.abs(deviation) if direction == "both" else deviation)])


def _gated_p_values(
    outcomes: Sequence[_Outcome], direction: str, scan: int, threshold: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return estimates, standard errors, df and the gated, scan-adjusted p-values.

    Each p-value is the largest the main test's and its gates'.
    """
    estimate = np.asarray([o.main[0] for o in outcomes], dtype=float)
    se = np.asarray([o.main[1] for o in outcomes], dtype=float)
    dof = np.asarray([o.main[2] for o in outcomes], dtype=float)
    if estimate.size:
        p = np.minimum(1.0, scan * treat_p_values(estimate, se, dof, direction, threshold))
    else:
        p = estimate
    gated = [k for k, o in enumerate(outcomes) if o.gates is not None]
    if gated:
        g = np.asarray([outcomes[k].gates for k in gated], dtype=float)  # (k, gate, 3)
        gate_p = scan_p_values(g[..., 0], g[..., 1], g[..., 2], direction, scan).max(axis=1)
        p[gated] = np.maximum(p[gated], gate_p)
    return estimate, se, dof, p


def interval_tests(
    est: CurveEstimates,
    candidates: Sequence[tuple[int, int, int, int]],
    breaks: Sequence[int],
    *,
    smooth: SmoothTrend | np.ndarray | None = None,
    direction: str = "up",
    flank: tuple[int, int] = (3, 8),
    threshold: float = 0.0,
) -> IntervalTests:
    """Test each candidate interval of one curve against its flanking trend.

    ``candidates`` are ``(start, end, first_segment, last_segment)`` of
    :func:`regimes._stats.candidates.candidate_intervals`. ``flank = (lo, hi)``: each
    side uses ``clip(width, lo, hi)`` cells of the neighbouring segment. ``p_value`` is
    one-sided in ``direction`` (TREAT against the log-ratio ``threshold``,
    :func:`regimes._stats.contrasts.treat_p_values`; a plain t test at 0) and adjusted
    for the scan over all intervals of the grid;
    ``peak`` is the index of the most extreme cell relative to the trend; ``kind`` is
    ``spike`` or ``step`` (runs to the end of the grid).

    Boundaries are gates of an intersection-union test (the p-value is the largest of
    the gates' and the main test's, valid without further adjustment). A *jump* at a
    boundary compares up to ``flank[0]`` cells on either side, within their segments:
    with ``smooth``, a smooth trend of the whole curve whose shape is trusted, the
    difference of their precision-weighted means of ``level - smooth``; without, the
    common-slope shift of :func:`regimes._stats.contrasts.jump_contrast`.

    * An interior interval must jump up at its start and down at its end. Part of a
      step cut off by a spurious break, or a bend of the trend, cannot pass for a
      spike.
    * An interval touching an end of the grid has one flank. With ``smooth`` its main
      statistic is the difference of precision-weighted means of ``level - smooth``
      over the interval and over the flank. Gates: the jump at its inner boundary, and
      the same mean difference for the segment at the grid's end (for a step; its first
      segment for an interval from the grid's start), so a spike near the end cannot
      pass for a step that never recovers. Its trend is ``smooth`` shifted onto the
      flank. Without ``smooth`` the jump is the statistic.

    ``smooth`` is a :class:`~regimes._stats.trends.SmoothTrend` (its uncertainty enters
    every contrast) or an array of trend values taken as known.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if smooth is not None and not isinstance(smooth, SmoothTrend):
        smooth = SmoothTrend.fixed(smooth)
    t = est.u.size
    edges = [0, *[int(b) for b in breaks], t]
    scan = max(1, t * (t + 1) // 2 - 1)
    tests = _Contrasts(est, smooth, direction, scan)
    outcomes, peaks = [], []
    for candidate in candidates:
        cells = _cells(candidate, edges, flank)
        start, end, a, b = candidate
        if cells.left.size and cells.right.size:
            outcome = _interior(tests, cells)
        else:
            far = (
                np.arange(edges[b], end + 1) if cells.left.size else np.arange(start, edges[a + 1])
            )
            outcome = _edge(tests, cells, far)
        outcomes.append(outcome)
        peaks.append(_peak(est.level, cells, outcome.trend, direction))
    estimate, se, dof, p = _gated_p_values(outcomes, direction, scan, threshold)
    return IntervalTests(
        estimate=estimate,
        se=se,
        df=dof,
        p_value=p,
        start=np.asarray([c[0] for c in candidates], dtype=np.int64),
        end=np.asarray([c[1] for c in candidates], dtype=np.int64),
        kind=np.asarray([o.kind for o in outcomes], dtype=object),
        peak=np.asarray(peaks, dtype=np.int64),
        trend=[o.trend for o in outcomes],
    )


def change_point_tests(
    est: CurveEstimates,
    breaks: Sequence[int],
    *,
    smooth: SmoothTrend | np.ndarray | None = None,
    flank: int = 3,
) -> ChangePointTests:
    """Test the level shift at each break with up to ``flank`` cells per side.

    Cells are taken from the two adjacent segments only. With ``smooth`` (the curve's
    trend from :func:`regimes._stats.segmentation.segment_curve`) the shift is the
    difference of precision-weighted mean residuals ``level - smooth`` after and before
    the break; without it, the common-slope jump of
    :func:`regimes._stats.contrasts.jump_contrast`. The estimate is the log of the level
    after over the level before; the p-value is two-sided, Bonferroni-adjusted for the
    ``T - 1`` places a change could have been put.
    """
    if smooth is not None and not isinstance(smooth, SmoothTrend):
        smooth = SmoothTrend.fixed(smooth)
    t = est.u.size
    edges = [0, *[int(b) for b in breaks], t]
    total_var = est.total_var
    out = np.empty((len(breaks), 3))
    for k, b in enumerate(breaks):
        left = np.arange(max(edges[k], b - flank), b)
        right = np.arange(b, min(edges[k + 2], b + flank))
        if smooth is None:
            c = jump_contrast(est.u, total_var, left, right)
        else:
            c = smooth.adjust(level_contrast(total_var, right, left))
        out[k] = contrast_test(c, est.level, est.var, est.df, est.tau2, est.tau2_df)
    estimate, se, dof = out[:, 0], out[:, 1], out[:, 2]
    p = scan_p_values(estimate, se, dof, "both", max(1, t - 1))
    return ChangePointTests(
        estimate=estimate, se=se, df=dof, p_value=p, index=np.asarray(breaks, dtype=np.int64)
    )


def regime_kind(start: int, end: int, t: int) -> tuple[str, bool | None]:
    """``(kind, recovered)`` of cells ``start..end`` of a grid of ``t`` cells.

    One cell at an end of the grid cannot tell a spike from a step: ``edge``, recovery
    unknown. A longer run to the end is a ``step`` (no recovery seen); anything else
    comes back: a ``spike``.
    """
    if start == end and (start == 0 or end == t - 1):
        return "edge", None
    if end == t - 1:
        return "step", False
    return "spike", True


def _regime_outcome(tests: _Contrasts, regime: Regime) -> tuple[Test, np.ndarray]:
    """Test one regime against its flanks; its trend at cells ``start..end``."""
    est, smooth = tests.est, tests.smooth
    assert smooth is not None
    residual = est.level - smooth.values
    span = np.arange(regime.start, regime.end + 1)
    inside = regime.inside
    if regime.left.size and regime.right.size:
        flanks = np.concatenate([regime.left, regime.right])
        c, _, proj = flank_line(est.u, tests.total_var, inside, flanks)
        w_in = 1.0 / tests.total_var[inside]
        u_bar = float(w_in @ est.u[inside] / w_in.sum())
        rows = np.column_stack([np.ones(span.size), est.u[span] - u_bar])[:, : proj.shape[0]]
        return tests.test(smooth.adjust(c)), smooth.values[span] + rows @ (proj @ residual[flanks])
    side = regime.left if regime.left.size else regime.right
    c = level_contrast(tests.total_var, inside, side)
    w = 1.0 / tests.total_var[side]
    shift = float(w @ residual[side] / w.sum())
    return tests.test(smooth.adjust(c)), smooth.values[span] + shift


GATE_CELLS = 5
"""Cells on each side of a boundary that its discontinuity test looks at."""


def _discontinuity(
    tests: _Contrasts,
    before: np.ndarray,
    after: np.ndarray,
    shape: Callable[..., np.ndarray | None] = jump_contrast,
) -> Test | None:
    """Test the jump between two runs of adjacent cells along local lines.

    The residuals from the smooth trend are fitted, by weighted least squares, with a
    shift between the two sides and, by default, one common line for both
    (:func:`regimes._stats.contrasts.jump_contrast`): a change of slope alone, a kink,
    gives a shift far smaller than its bend, though not 0.
    ``shape=broken_line_jump_contrast`` gives each side a slope of its own
    (:func:`regimes._stats.contrasts.broken_line_jump_contrast`), which a kink does
    not move; ``None`` where a side is too short for it. The estimate is the shift
    (after minus before), with the trend's uncertainty.
    """
    est, smooth = tests.est, tests.smooth
    assert smooth is not None
    c = shape(est.u, tests.total_var, before, after)
    return None if c is None else tests.test(smooth.adjust(c))


def _run(labels: np.ndarray, first: int, step: int) -> np.ndarray:
    """Return up to :data:`GATE_CELLS` cells from ``first`` in direction ``step``.

    They share its label: a run of one level.
    """
    cells = [first]
    while len(cells) < GATE_CELLS:
        nxt = cells[-1] + step
        if not 0 <= nxt < labels.size or labels[nxt] != labels[first]:
            break
        cells.append(nxt)
    return np.asarray(sorted(cells), dtype=np.int64)


def _boundary_gates(
    tests: _Contrasts, regime: Regime, labels: np.ndarray
) -> tuple[list[Test], list[bool]]:
    """Test the jumps at the regime's boundaries inside the grid.

    Each is between the runs of one level on either side of it. Second, for each gate,
    whether the cells across its boundary are the regime's reference level (the normal
    cells, or the enclosing regime's own for a nested one) rather than another regime.
    A step's claim is its jump from the reference, which a change of slope can mimic
    along a common local line: for a regime with one flank, a boundary facing the
    reference gets a second gate, the jump between two lines.
    """
    t = tests.est.u.size
    reference = regime.parent + 1
    sides = []
    if regime.start > 0:
        before, after = _run(labels, regime.start - 1, -1), _run(labels, regime.start, 1)
        sides.append((before, after, bool(labels[regime.start - 1] == reference)))
    if regime.end < t - 1:
        before, after = _run(labels, regime.end, -1), _run(labels, regime.end + 1, 1)
        sides.append((before, after, bool(labels[regime.end + 1] == reference)))
    one_flank = regime.left.size == 0 or regime.right.size == 0
    gates: list[Test] = []
    facing: list[bool] = []
    for before, after, faces in sides:
        shapes = (
            [jump_contrast, broken_line_jump_contrast] if faces and one_flank else [jump_contrast]
        )
        for shape in shapes:
            gate = _discontinuity(tests, before, after, shape)
            if gate is not None:
                gates.append(gate)
                facing.append(faces)
    return gates, facing


def regime_tests(
    est: CurveEstimates,
    smooth: SmoothTrend,
    regimes: Sequence[Regime],
    labels: np.ndarray,
    *,
    direction: str = "up",
    threshold: float = 0.0,
    flank: tuple[int, int] = (3, 8),
) -> IntervalTests:
    """Test each regime of one curve against the trend of its flanks (TREAT).

    The statistic is the precision-weighted mean of the regime's residuals from the
    smooth trend minus the trend of its flank residuals: the weighted least-squares line
    through them when the regime has flanks on both sides, their weighted mean when it
    has one. The p-value tests that the log ratio exceeds ``threshold`` in
    ``direction`` (:func:`regimes._stats.contrasts.treat_p_values`), adjusted for the
    scan over every interval of the grid. Every regime needs a flank on one side at
    least. ``labels`` give each cell's level (0 normal, ``k + 1`` regime ``k``'s own).

    Each boundary inside the grid is a gate of an intersection-union test: the level
    must jump there (:func:`_discontinuity`, the one-sided tail of the jump's size), or
    the regime is a bend of the trend rather than an anomaly. A regime with one flank
    (a step) must jump by more than ``threshold`` there (TREAT on the jump): its mean
    over its flank's moves as far under a bend. That jump is also tested between two
    lines with a slope each (:func:`_discontinuity`, broken-line shape), which a change
    of slope alone does not move. The p-value is the largest of the main test's and the
    gates'.
    """
    tests = _Contrasts(est, smooth, direction, 1)
    t = est.u.size
    kept = list(regimes)
    outcomes = [_regime_outcome(tests, r) for r in kept]
    estimate = np.asarray([o[0][0] for o in outcomes], dtype=float)
    se = np.asarray([o[0][1] for o in outcomes], dtype=float)
    dof = np.asarray([o[0][2] for o in outcomes], dtype=float)
    family = scan_family(tests.total_var, flank)
    p = treat_p_values(estimate, se, dof, direction, threshold, family) if kept else estimate
    for k, regime in enumerate(kept):
        found, facing = _boundary_gates(tests, regime, labels)
        gates = np.asarray(found, dtype=float).reshape(-1, 3)
        if gates.size:
            # a boundary may face a flank or another regime: the jump's size counts, in
            # whichever direction the levels on either side put it
            jump = np.abs(gates[:, 0])
            # a regime with one flank (a step) claims a level shift of at least the
            # threshold from its reference, and only a boundary facing that reference can
            # show one: a bend of the trend moves the level as far, gradually, without
            # that jump (docs/method.md). A boundary facing another regime only has to
            # show a jump: the two were cut apart for differing by the threshold already.
            one_flank = regime.left.size == 0 or regime.right.size == 0
            floor = np.where(np.asarray(facing) & one_flank, threshold, 0.0)
            gate_p = treat_p_values(jump, gates[:, 1], gates[:, 2], "up", floor)
            p[k] = max(p[k], float(gate_p.max()))
    peaks = [
        _peak(
            est.level,
            _Cells(r.inside, r.left, r.right, r.inside, r.inside),
            trend[r.inside - r.start],
            direction,
        )
        for r, (_, trend) in zip(kept, outcomes, strict=True)
    ]
    return IntervalTests(
        estimate=estimate,
        se=se,
        df=dof,
        p_value=p,
        start=np.asarray([r.start for r in kept], dtype=np.int64),
        end=np.asarray([r.end for r in kept], dtype=np.int64),
        kind=np.asarray([regime_kind(r.start, r.end, t)[0] for r in kept], dtype=object),
        peak=np.asarray(peaks, dtype=np.int64),
        trend=[trend for _, trend in outcomes],
    )
