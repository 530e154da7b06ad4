"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The pipeline, per curve (one group of case columns), all on the log of ``y``, each
stage a function below:

1. cells ``(group, x)``: median and interval of ``y``; a robust level (one-step Huber),
   its sampling variance and df from the raw replicates, with session effects removed
   and disagreeing sessions or trials inflating a cell's variance
   (:mod:`regimes._stats.levels`); the curve's between-cell variance
   (:mod:`regimes._stats.between_cell`);
2. change points: penalised l2 segmentation of robustly detrended, standardised levels
   (:mod:`regimes._stats.segmentation`), each boundary tested for a jump;
3. regimes: which segments are normal (the reference level of the curve) and which runs
   of segments depart from it, neighbours and nested ones apart
   (:mod:`regimes._stats.regimes`);
4. each regime tested against the trend of its normal flanks, TREAT-style against
   ``min_ratio``, scan-adjusted, its boundaries gated by a jump
   (:mod:`regimes._stats.interval_tests`);
5. Benjamini-Hochberg over the call's regimes (or each curve's), and separately over
   its change points.

The method, with its references, is described in ``docs/method.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import polars as pl
from scipy import special, stats

from regimes._result import untested_frame
from regimes._stats.anomaly_table import Interval, anomaly_frame, x_value
from regimes._stats.between_cell import (
    between_cell_variance,
    fill_missing_taus,
    qn_scale_rows,
    second_difference_taus,
)
from regimes._stats.curves import CurveEstimates, CurveIndex, curve_slices, index_curves
from regimes._stats.interval_tests import (
    DIRECTIONS,
    IntervalTests,
    change_point_tests,
    regime_kind,
    regime_tests,
)
from regimes._stats.levels import cell_levels
from regimes._stats.multitest import benjamini_hochberg
from regimes._stats.regimes import Regime, find_regimes, regime_groups
from regimes._stats.segmentation import bic_penalty, edge_breaks, segment_curves
from regimes._stats.trends import SmoothTrend, grouped_trends, level_trends, trend_coordinate
from regimes.data._prepare import prepare_trials
from regimes.data.schema import check_fraction, check_min_ratio, check_n_boot, check_seed
from regimes.detect._result import RegimeResult
from regimes.errors import RegimesInputError, RegimesWarning

__all__ = ["detect_regimes"]

MIN_CELLS = 3
"""Fewest distinct ``x`` a curve needs: an interval needs a cell and a flank on each side."""

CAVEATS = {
    "first budgets": (
        "starts at the grid's first budgets, where the trend is extrapolated: its "
        "interval spans the trend continued straight and curved, and the ratio, taken "
        "along the straight one, runs 7-11 % high in simulation (docs/method.md, "
        "Known limits)"
    ),
    "neighbour": (
        "borders or holds another anomaly: its ratio interval may be narrower than "
        "stated (a nominal 0.95 covered 0.91-0.92 for a spike right before a step in "
        "simulation, 0.94-0.96 for a spike on a step and the step under it; "
        "docs/method.md, Known limits)"
    ),
}
"""The ``caveat`` of an anomaly so placed (``bench/accuracy.py`` measures both)."""

FDR_FAMILIES = ("call", "curve")
"""Benjamini-Hochberg families of the anomaly tests: every tested regime of the call, or
each curve's own."""

_CURVE_COLUMNS = (
    "n",
    "n_sessions",
    "median",
    "ci_low",
    "ci_high",
    "baseline",
    "ratio",
    "segment",
    "anomalous",
)

_CHANGE_POINT_FLOATS = ("ratio", "ratio_low", "ratio_high", "p_value", "q_value")

_GROUP_COLUMNS = (
    "n_cells",
    "n_trials",
    "sigma_within",
    "tau_between",
    "n_change_points",
    "n_anomalies",
    "note",
)


# -- records passed between the stages ------------------------------------------------


class _Cells(NamedTuple):
    """Every cell of the call, sorted by ``(curve, x)``, as aligned arrays."""

    table: pl.DataFrame
    curve: np.ndarray
    x: np.ndarray
    u: np.ndarray
    level: np.ndarray
    var: np.ndarray
    df: np.ndarray
    log_median: np.ndarray
    starts: np.ndarray
    stops: np.ndarray


class _CurveFit(NamedTuple):
    """One curve long enough to test.

    Its cells (``offset`` into the call's cells), its between-cell variance and its segmentation.
    """

    curve: int
    offset: int
    est: CurveEstimates
    breaks: list[int]
    trend: SmoothTrend
    edges: list[int]


class _ChangePoint(NamedTuple):
    """A tested segment boundary (cell indices into the call's cells)."""

    curve: int
    before: int
    after: int
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float


class _Candidate(NamedTuple):
    """A tested regime and its flank trend.

    Cell indices into the call's cells; the trend at cells ``start..end``; ``nested``
    when it lies inside another regime.
    """

    curve: int
    start: int
    end: int
    peak: int
    kind: str
    recovered: bool | None
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    trend: np.ndarray
    nested: bool


class _Decision(NamedTuple):
    """Multiple testing over the call: q-values and the chosen candidates."""

    change_point_q: np.ndarray
    candidate_q: np.ndarray
    chosen: list[int]


# -- stages -----------------------------------------------------------------------------


def _check_arguments(**params: Any) -> dict[str, Any]:
    """Validate the scalar arguments; return them as the result's ``params``."""
    check_fraction(alpha=params["alpha"], level=params["level"])
    check_min_ratio(params["min_ratio"])
    if params["direction"] not in DIRECTIONS:
        raise RegimesInputError(
            f"direction must be one of {DIRECTIONS}, got {params['direction']!r}"
        )
    check_n_boot(params["n_boot"], level=params["level"])
    check_seed(params["seed"])
    penalty = params["penalty"]
    if not (math.isfinite(penalty) and penalty > 0):
        raise RegimesInputError(f"penalty must be a positive number, got {penalty!r}")
    if params["fdr"] not in FDR_FAMILIES:
        raise RegimesInputError(
            f"fdr must be one of {FDR_FAMILIES} (the Benjamini-Hochberg family), "
            f"got {params['fdr']!r}"
        )
    return params


def _cell_arrays(index: CurveIndex, y: str) -> _Cells:
    """Cell medians joined with cell levels, as arrays sorted by ``(curve, x)``."""
    table = cell_levels(index.frame, "_curve", "_x", "_ly", "_session", raw=y)
    curve = table.get_column("_curve").to_numpy()
    xs = table.get_column("_x").to_numpy()
    starts, stops = curve_slices(curve)
    return _Cells(
        table=table,
        curve=curve,
        x=xs,
        u=trend_coordinate(xs),
        level=table.get_column("level").to_numpy(),
        var=table.get_column("var").to_numpy(),
        df=table.get_column("df").to_numpy(),
        log_median=np.log(table.get_column("median").to_numpy()),
        starts=starts,
        stops=stops,
    )


def _median_intervals(
    cells: _Cells, taus: list[tuple[float, float]], level: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's t interval for its median, as an estimate for a fresh process.

    The cell's own variance (:func:`regimes._stats.levels.cell_levels`) covers the
    trials and, with several sessions, the session lottery; a cell measured in one
    process cannot see that lottery, so its curve's between-cell variance, estimated
    from all its cells, stands in for it. Welch-Satterthwaite degrees of freedom.
    """
    var = cells.table.get_column("median_var").to_numpy()
    dof = cells.table.get_column("median_df").to_numpy()
    single = cells.table.get_column("n_sessions").to_numpy() == 1
    sizes = cells.stops - cells.starts
    tau2 = np.repeat([t[0] for t in taus], sizes) * single
    tau_df = np.maximum(np.repeat([t[1] for t in taus], sizes), 1.0)
    total = var + tau2
    welch = total**2 / (var**2 / dof + np.where(tau2 > 0, tau2**2 / tau_df, 0.0))
    half = stats.t.ppf((1.0 + level) / 2.0, welch) * np.sqrt(total)
    return np.exp(cells.log_median - half), np.exp(cells.log_median + half)


def _check_lengths(cells: _Cells, x: str) -> None:
    """Raise when no curve has :data:`MIN_CELLS` cells; warn when some have fewer."""
    lengths = cells.stops - cells.starts
    if (lengths < MIN_CELLS).all():
        raise RegimesInputError(
            f"every group has fewer than {MIN_CELLS} distinct {x} values (most: "
            f"{int(lengths.max())}); a trend and an interval need at least {MIN_CELLS}"
        )
    if (lengths < MIN_CELLS).any():
        warnings.warn(
            f"{int((lengths < MIN_CELLS).sum())} group(s) have fewer than {MIN_CELLS} distinct "
            f"{x} values and are summarised without a trend (see result.untested)",
            RegimesWarning,
            stacklevel=3,
        )


def _short_ends(t: int, breaks: Sequence[int]) -> tuple[int, int]:
    """Cells before the first and after the last segment of three or more cells.

    Each end counts only when it is at most three cells long (segments of one or two
    cells); 0 otherwise, and for a curve without such a segment.
    """
    edges = np.asarray([0, *breaks, t])
    long_segments = np.flatnonzero(np.diff(edges) >= 3)
    if long_segments.size == 0:
        return 0, 0
    lead = int(edges[long_segments[0]])
    trail = int(t - edges[long_segments[-1] + 1])
    return (lead if lead <= 3 else 0), (trail if trail <= 3 else 0)


def _linear_ends(trend: SmoothTrend, u: np.ndarray, breaks: Sequence[int]) -> SmoothTrend:
    """Continue the trend straight over short segments at the ends of the grid.

    Those of :func:`_short_ends`.
    """
    lead, trail = _short_ends(u.size, breaks)
    return trend.linear_ends(u, lead, trail)


def _first_taus(cells: _Cells) -> list[tuple[float, float]]:
    """Estimate each curve's whole-curve between-cell variance.

    From its second differences, batched over curves of equal length; short curves
    borrow the median of the others.
    """
    lengths = cells.stops - cells.starts
    first: list[tuple[float, float]] = [(float("nan"), 0.0)] * lengths.size
    for t in np.unique(lengths):
        members = np.flatnonzero(lengths == t)
        index = cells.starts[members][:, None] + np.arange(t)
        found = second_difference_taus(cells.u[index], cells.level[index], cells.var[index])
        for m, tau in zip(members, found, strict=True):
            first[m] = tau
    return fill_missing_taus(first)


def _segment_all(
    cells: _Cells, taus: list[tuple[float, float]], penalty: float, min_ratio: float
) -> dict[int, tuple[list[int], SmoothTrend, list[int]]]:
    """Segment every curve with enough cells: breaks, trend and forced breaks.

    Segmented in batches of curves of equal length; a cell at an end that stands off its
    neighbours gets its own segment (:func:`regimes._stats.segmentation.edge_breaks`),
    a break that is forced.
    """
    lengths = cells.stops - cells.starts
    segmented: dict[int, tuple[list[int], SmoothTrend, list[int]]] = {}
    for t in np.unique(lengths[lengths >= MIN_CELLS]):
        members = np.flatnonzero(lengths == t)
        index = cells.starts[members][:, None] + np.arange(t)
        total = cells.var[index] + np.asarray([taus[m][0] for m in members])[:, None]
        found = segment_curves(
            cells.u[index], cells.level[index], total, bic_penalty(int(t), penalty)
        )
        fits = list(found[1])
        edges = [
            edge_breaks(cells.u[i], cells.level[i], v, [])
            for i, v in zip(index, total, strict=True)
        ]
        edged = [sorted({*cuts, *ends}) for cuts, ends in zip(found[0], edges, strict=True)]
        # curves given a break at an end are refitted together: one batched fit, each
        # curve's arithmetic its own
        redo = [k for k, cuts in enumerate(found[0]) if edged[k] != cuts]
        if redo:
            refits = level_trends(
                cells.u[index[redo]],
                cells.level[index[redo]],
                total[redo],
                [edged[k] for k in redo],
            )
            for k, fit in zip(redo, refits, strict=True):
                fits[k] = fit
        for k, m in enumerate(members):
            u = cells.u[index[k]]
            segmented[int(m)] = (edged[k], _linear_ends(fits[k], u, edged[k]), edges[k])
    return segmented


def _refined_taus(
    cells: _Cells, segmented: dict[int, tuple[list[int], SmoothTrend, list[int]]]
) -> dict[int, tuple[float, float]]:
    """Estimate each segmented curve's between-cell variance around its trend.

    Around its own trend and segments
    (:func:`regimes._stats.between_cell.between_cell_variance`); curves without breaks
    of one length in one batch (the Qn scale of their centred residuals).
    """
    out: dict[int, tuple[float, float]] = {}
    plain = [k for k, (breaks, _, _) in segmented.items() if not breaks]
    lengths = cells.stops - cells.starts
    for t in np.unique(lengths[plain]) if plain else []:
        members = [k for k in plain if lengths[k] == t]
        index = cells.starts[members][:, None] + np.arange(t)
        residual = cells.level[index] - np.stack([segmented[k][1].values for k in members])
        centred = (residual - residual.mean(axis=1, keepdims=True)) / np.sqrt(1.0 - 1.0 / t)
        total = qn_scale_rows(centred) ** 2
        tau2 = np.maximum(0.0, total - np.median(cells.var[index], axis=1))
        for k, value in zip(members, tau2, strict=True):
            out[k] = (float(value), 0.82 * (t - 1))
    for k, (breaks, trend, _) in segmented.items():
        if breaks:
            a, b = cells.starts[k], cells.stops[k]
            out[k] = between_cell_variance(
                cells.u[a:b], cells.level[a:b], cells.var[a:b], breaks, trend.values
            )
    return out


def _fit_curves(
    cells: _Cells, penalty: float, min_ratio: float
) -> tuple[list[_CurveFit], list[tuple[float, float]]]:
    """Between-cell variance and segmentation of every curve with enough cells.

    The whole-curve variance (:func:`_first_taus`) scales the segmentation; it is then
    refined around the curve's own trend and segments where that estimate has at least
    4 degrees of freedom. Returns the fits and every curve's final ``(tau2, df)``.
    """
    taus = _first_taus(cells)
    segmented = _segment_all(cells, taus, penalty, min_ratio)
    for k, refined in _refined_taus(cells, segmented).items():
        if math.isfinite(refined[0]) and refined[1] >= 4:
            taus[k] = refined
    fits = []
    for k in sorted(segmented):
        a, b = cells.starts[k], cells.stops[k]
        breaks, trend, at_ends = segmented[k]
        est = CurveEstimates(
            cells.u[a:b], cells.level[a:b], cells.var[a:b], cells.df[a:b], *taus[k]
        )
        fits.append(_CurveFit(int(cells.curve[a]), int(a), est, breaks, trend, at_ends))
    return fits, taus


def _test_change_points(fit: _CurveFit, level: float) -> tuple[list[_ChangePoint], list[int]]:
    """Jump tests at the curve's breaks, and the breaks with evidence of a shift.

    A break with no evidence of a shift cannot bound an interval whose boundary gates
    must pass (a stricter test of nearly the same shift): its segments are merged. The
    scan adjustment covers every interval, so this prunes work, not validity.
    """
    if not fit.breaks:
        return [], fit.breaks
    cps = change_point_tests(fit.est, fit.breaks, smooth=fit.trend)
    ratio, low, high = cps.ratio_interval(level)
    a = fit.offset
    rows = [
        _ChangePoint(
            fit.curve, a + int(i) - 1, a + int(i), ratio[k], low[k], high[k], cps.p_value[k]
        )
        for k, i in enumerate(cps.index)
    ]
    z_cut = -special.ndtri(0.5 / max(1, fit.est.u.size - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        strength = np.abs(cps.estimate) / cps.se
    kept = [b for b, z in zip(fit.breaks, strength, strict=True) if not z < z_cut or b in fit.edges]
    return rows, kept


class _CurveRegimes(NamedTuple):
    """One curve's regimes.

    All it found (their cells leave the normal level) and those to test in the call's
    direction, with the labels of its cells.
    """

    fit: _CurveFit
    kept: list[int]
    tested: list[Regime]
    labels: np.ndarray


def _find_regimes(
    fit: _CurveFit, kept: list[int], direction: str, min_ratio: float
) -> _CurveRegimes:
    """Find the curve's regimes (:func:`regimes._stats.regimes.find_regimes`).

    Those tested have a flank and depart in ``direction``.
    """
    found = find_regimes(fit.est, fit.trend, kept, min_ratio)
    tested = [
        r
        for r in found
        if (r.left.size or r.right.size)
        and (direction == "both" or (r.level > 0) == (direction == "up"))
    ]
    return _CurveRegimes(fit, kept, tested, regime_groups(found, fit.est.u.size))


class _RegimeTrend(NamedTuple):
    """A curve's trend for its regime tests, and the alternative at the grid's start.

    ``bent`` continues the trend over the short segments at the start with its own
    curvature instead of a straight line (``None`` where the curve has none); the cells
    it changes are the first ``lead``.
    """

    trend: SmoothTrend
    bent: SmoothTrend | None
    lead: int


def _regime_trends(curves: list[_CurveRegimes]) -> list[_RegimeTrend | None]:
    """Fit each curve's trend for its regime tests.

    One level for its normal cells and one per regime
    (:func:`regimes._stats.trends.grouped_trends`), fitted in batches of curves of equal
    length; ``None`` for curves with nothing to test.
    """
    out: list[_RegimeTrend | None] = [None] * len(curves)
    todo = [k for k, c in enumerate(curves) if c.tested]
    for t in sorted({curves[k].fit.est.u.size for k in todo}):
        batch = [k for k in todo if curves[k].fit.est.u.size == t]
        ests = [curves[k].fit.est for k in batch]
        fitted = grouped_trends(
            np.stack([e.u for e in ests]),
            np.stack([e.level for e in ests]),
            np.stack([e.total_var for e in ests]),
            np.stack([curves[k].labels for k in batch]),
        )
        for k, trend in zip(batch, fitted, strict=True):
            u, kept = curves[k].fit.est.u, curves[k].kept
            lead, trail = _short_ends(t, kept)
            bent = trend.linear_ends(u, lead, trail, lead_degree=2) if lead else None
            out[k] = _RegimeTrend(trend.linear_ends(u, lead, trail), bent, lead)
    return out


class _RegimeStats(NamedTuple):
    """Ratios, their intervals and the p-values of one curve's tested regimes."""

    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray


def _robust_to_the_start(
    curve: _CurveRegimes,
    trends: _RegimeTrend,
    tests: IntervalTests,
    level: float,
    direction: str,
    threshold: float,
) -> _RegimeStats:
    """Judge the regimes that reach below the first long segment under both continuations.

    Below the curve's first segment of three cells the trend has nothing to follow:
    continued straight, or with its curvature carried on, the data cannot tell which. A
    regime whose cells or flanks reach there is tested under both: its p-value is the
    larger (an intersection-union test: significant only if significant either way),
    its interval the union of both (docs/method.md, section 7). Its ratio is the
    straight continuation's.
    """
    ratio, low, high = tests.ratio_interval(level)
    p = tests.p_value.copy()
    if trends.bent is None:
        return _RegimeStats(ratio, low, high, p)
    lowest = [int(np.concatenate([r.inside, r.left, r.right]).min()) for r in curve.tested]
    reach = np.asarray(lowest) < trends.lead
    if not reach.any():
        return _RegimeStats(ratio, low, high, p)
    fit = curve.fit
    bent = regime_tests(
        fit.est, trends.bent, curve.tested, curve.labels, direction=direction, threshold=threshold
    )
    _, bent_low, bent_high = bent.ratio_interval(level)
    return _RegimeStats(
        ratio,
        np.where(reach, np.minimum(low, bent_low), low),
        np.where(reach, np.maximum(high, bent_high), high),
        np.where(reach, np.maximum(p, bent.p_value), p),
    )


def _test_regimes(
    curve: _CurveRegimes, trends: _RegimeTrend, direction: str, min_ratio: float, level: float
) -> list[_Candidate]:
    """TREAT tests of the curve's regimes in ``direction`` against their flank trends."""
    fit, regimes = curve.fit, curve.tested
    threshold = math.log(min_ratio)
    tests = regime_tests(
        fit.est, trends.trend, regimes, curve.labels, direction=direction, threshold=threshold
    )
    found = _robust_to_the_start(curve, trends, tests, level, direction, threshold)
    a, t = fit.offset, fit.est.u.size
    out = []
    for k, r in enumerate(regimes):
        kind, recovered = regime_kind(r.start, r.end, t)
        out.append(
            _Candidate(
                curve=fit.curve,
                start=a + r.start,
                end=a + r.end,
                peak=a + int(tests.peak[k]),
                kind=kind,
                recovered=recovered,
                ratio=found.ratio[k],
                ratio_low=found.low[k],
                ratio_high=found.high[k],
                p_value=found.p_value[k],
                trend=tests.trend[k],
                nested=r.parent >= 0,
            )
        )
    return out


def _decide(
    change_points: list[_ChangePoint],
    candidates: list[_Candidate],
    alpha: float,
    fdr: str,
) -> _Decision:
    """Control the false discovery rate of change points and of anomalies.

    Benjamini-Hochberg over the call's change points, and separately over its tested
    regimes: all of the call (``fdr="call"``) or each curve's (``fdr="curve"``). A
    regime is reported when its q-value is below ``alpha``; its test was against
    ``min_ratio`` already (TREAT), so a reported ratio is beyond it.
    """
    cp_q = benjamini_hochberg(np.asarray([c.p_value for c in change_points], dtype=float))
    p = np.asarray([c.p_value for c in candidates], dtype=float)
    if fdr == "call":
        q = benjamini_hochberg(p)
    else:
        curve = np.asarray([c.curve for c in candidates], dtype=np.int64)
        q = np.empty(p.size)
        for cid in np.unique(curve):
            members = np.flatnonzero(curve == cid)
            q[members] = benjamini_hochberg(p[members])
    chosen = [int(k) for k in np.flatnonzero(q < alpha)]
    return _Decision(cp_q, q, chosen)


def _curve_medians(cells: _Cells, values: np.ndarray, use: np.ndarray) -> np.ndarray:
    """Per curve, ``np.median`` of ``values`` over its cells in ``use`` (NaN where none).

    Curves of one length are sorted as the rows of one array, cells not used as ``inf``
    at the end, and the two middle used values of each row averaged as numpy's median
    averages them (a NaN among them gives NaN, as there): the same numbers, without a
    call per curve.
    """
    lengths = cells.stops - cells.starts
    out = np.full(lengths.size, np.nan)
    for t in np.unique(lengths):
        members = np.flatnonzero(lengths == t)
        index = cells.starts[members][:, None] + np.arange(t)
        kept, picked = use[index], values[index]
        ordered = np.sort(np.where(kept, picked, np.inf), axis=1)
        count = kept.sum(axis=1)
        rows = np.arange(members.size)
        middle = (ordered[rows, np.maximum(count - 1, 0) // 2] + ordered[rows, count // 2]) / 2.0
        unusable = (count == 0) | (np.isnan(picked) & kept).any(axis=1)
        out[members] = np.where(unusable, np.nan, middle)
    return out


def _baseline(
    cells: _Cells, fits: list[_CurveFit], candidates: list[_Candidate], chosen: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Smooth trend at every cell on the scale of ``y``, and the anomaly flags.

    Each curve's trend takes its constant from the cells outside anomalies; inside an
    anomaly it is the anomaly's flank trend. Levels are medians after removing session
    effects, so the trend is moved onto the medians by their median difference.
    """
    log_trend = np.full(cells.curve.size, np.nan)
    for fit in fits:
        log_trend[fit.offset : fit.offset + fit.est.u.size] = fit.trend.values
    anomalous = np.zeros(cells.curve.size, dtype=bool)
    for k in chosen:
        anomalous[candidates[k].start : candidates[k].end + 1] = True
    sizes = cells.stops - cells.starts
    shift = _curve_medians(cells, cells.level - log_trend, ~anomalous)
    has_normal = np.add.reduceat((~anomalous).astype(np.int64), cells.starts) > 0
    moved = np.repeat((sizes >= MIN_CELLS) & has_normal, sizes)
    np.add(log_trend, np.repeat(shift, sizes), out=log_trend, where=moved)
    for k in chosen:
        log_trend[candidates[k].start : candidates[k].end + 1] = candidates[k].trend
    everything = np.ones(cells.curve.size, dtype=bool)
    offsets = np.repeat(_curve_medians(cells, cells.log_median - cells.level, everything), sizes)
    with np.errstate(over="ignore"):
        return np.exp(log_trend + offsets), anomalous


def _segment_numbers(cells: _Cells, fits: list[_CurveFit]) -> np.ndarray:
    """Segment number of every cell within its curve (0 for curves without a fit)."""
    segment = np.zeros(cells.curve.size, dtype=np.int64)
    for fit in fits:
        edges = np.asarray([0, *fit.breaks, fit.est.u.size])
        segment[fit.offset : fit.offset + fit.est.u.size] = np.repeat(
            np.arange(edges.size - 1), np.diff(edges)
        )
    return segment


def _curve_table(
    cells: _Cells, index: CurveIndex, x: str, x_dtype: pl.DataType, extra: dict[str, np.ndarray]
) -> pl.DataFrame:
    """Build the ``curve`` frame: cell summaries with baseline, ratio and flags."""
    curve = cells.table.with_columns(
        *(pl.Series(name, values) for name, values in extra.items())
    ).with_columns((pl.col("median") / pl.col("baseline")).alias("ratio"))
    return (
        curve.join(index.groups, on="_curve", how="left")
        .with_columns(pl.col("_x").cast(x_dtype).alias(x))
        .select([*index.group_columns, x, *_CURVE_COLUMNS])
    )


def _group_values(index: CurveIndex) -> dict[int, list[Any]]:
    """Each curve id's values of the group columns."""
    return {
        int(row[0]): list(row[1:])
        for row in index.groups.select(["_curve", *index.group_columns]).iter_rows()
    }


def _change_point_table(
    cells: _Cells,
    index: CurveIndex,
    x_dtype: pl.DataType,
    rows: list[_ChangePoint],
    q: np.ndarray,
    alpha: float,
) -> pl.DataFrame:
    """Build the ``change_points`` frame."""
    groups = _group_values(index)
    schema: dict[str, Any] = {c: index.groups.schema[c] for c in index.group_columns}
    schema |= {"x_before": x_dtype, "x_after": x_dtype}
    schema |= {c: pl.Float64 for c in _CHANGE_POINT_FLOATS} | {"significant": pl.Boolean}
    records = [
        [
            *groups[r.curve],
            x_value(cells.x[r.before], x_dtype),
            x_value(cells.x[r.after], x_dtype),
            float(r.ratio),
            float(r.ratio_low),
            float(r.ratio_high),
            float(r.p_value),
            float(qv),
            bool(qv < alpha),
        ]
        for r, qv in zip(rows, q, strict=True)
    ]
    return pl.DataFrame(records, schema=schema, orient="row")


def _caveat(anomaly: _Candidate, spans: list[tuple[int, int]], first_cell: int) -> str | None:
    """Return what simulation showed of an anomaly placed like this one (:data:`CAVEATS`).

    One that starts at one of its curve's first two cells (``first_cell`` is the
    curve's first), or one next to or around another reported anomaly of its curve
    (``spans``: the ``(start, end)`` of every reported anomaly of the curve, its own
    included).
    """
    if anomaly.start - first_cell <= 1:
        return CAVEATS["first budgets"]
    own = (anomaly.start, anomaly.end)
    if any(s <= anomaly.end + 1 and e >= anomaly.start - 1 for s, e in spans if (s, e) != own):
        return CAVEATS["neighbour"]
    return None


def _anomaly_table(
    cells: _Cells,
    index: CurveIndex,
    x_dtype: pl.DataType,
    candidates: list[_Candidate],
    decision: _Decision,
) -> pl.DataFrame:
    """Build the ``anomalies`` frame from the chosen candidates."""
    groups = _group_values(index)
    spans: dict[int, list[tuple[int, int]]] = {}
    for k in decision.chosen:
        spans.setdefault(candidates[k].curve, []).append((candidates[k].start, candidates[k].end))
    keyed = []
    for k in decision.chosen:
        c = candidates[k]
        interval = Interval(
            start=c.start,
            end=c.end,
            peak=c.peak,
            ratio=c.ratio,
            ratio_low=c.ratio_low,
            ratio_high=c.ratio_high,
            p_value=c.p_value,
            q_value=decision.candidate_q[k],
            recovered=c.recovered,
            kind=c.kind,
            caveat=_caveat(c, spans[c.curve], int(np.searchsorted(cells.curve, c.curve))),
        )
        keyed.append((groups[c.curve], interval, cells.x))
    schema = {c: index.groups.schema[c] for c in index.group_columns}
    return anomaly_frame(keyed, schema, x_dtype)


def _group_table(
    cells: _Cells,
    index: CurveIndex,
    taus: list[tuple[float, float]],
    notes: dict[int, str],
    counts: tuple[list[int], list[int]],
) -> pl.DataFrame:
    """Build the ``groups`` frame: per group its cells, trials, noise and findings.

    ``counts`` holds the curve of each significant change point and of each anomaly.
    """
    curve_ids = cells.curve[cells.starts]
    group_stats = cells.table.group_by("_curve").agg(
        pl.len().cast(pl.Int64).alias("n_cells"),
        pl.col("n").sum().cast(pl.Int64).alias("n_trials"),
        pl.col("sigma_w").first().alias("sigma_within"),
    )
    per_curve = pl.DataFrame(
        {
            "_curve": curve_ids.astype(np.int64),
            "tau_between": np.sqrt([t[0] for t in taus]),
            "note": [notes.get(int(c)) for c in curve_ids],
        },
        schema={"_curve": pl.Int64, "tau_between": pl.Float64, "note": pl.String},
    )
    found = [
        pl.DataFrame({"_curve": ids}, schema={"_curve": pl.Int64})
        .group_by("_curve")
        .agg(pl.len().cast(pl.Int64).alias(name))
        for ids, name in zip(counts, ("n_change_points", "n_anomalies"), strict=True)
    ]
    return (
        index.groups.join(group_stats, on="_curve", how="left")
        .join(per_curve, on="_curve", how="left")
        .join(found[0], on="_curve", how="left")
        .join(found[1], on="_curve", how="left")
        .with_columns(pl.col("n_change_points", "n_anomalies").fill_null(0))
        .sort("_curve")
        .select([*index.group_columns, *_GROUP_COLUMNS])
    )


def _short_curves(cells: _Cells, index: CurveIndex, x: str) -> tuple[dict[int, str], pl.DataFrame]:
    """Note the curves too short to test; return the notes and the ``untested`` frame."""
    notes: dict[int, str] = {}
    for a, b in zip(cells.starts, cells.stops, strict=True):
        if b - a < MIN_CELLS:
            notes[int(cells.curve[a])] = (
                f"only {b - a} distinct {x} value(s); at least {MIN_CELLS} are needed"
            )
    groups = _group_values(index)
    rows = [
        dict(zip(index.group_columns, groups[cid], strict=True)) | {"reason": reason}
        for cid, reason in notes.items()
    ]
    return notes, untested_frame(rows, index.group_columns)


def _trial_rows(frame: pl.DataFrame, group_columns: list[str], x: str, y: str) -> pl.DataFrame:
    """Keep the analysed trials: group columns, ``x``, ``y`` and the process ``session``."""
    kept = list(dict.fromkeys([*group_columns, x, y]))
    out = frame.select(kept)
    if "session" not in kept:
        out = out.with_columns(frame.get_column("_session").alias("session"))
    return out


def detect_regimes(
    df: Any,
    x: str = "budget",
    y: str = "latency_s",
    by: str | Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    direction: str = "up",
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    penalty: float = 2.0,
    session: str | None = None,
    fdr: str = "call",
) -> RegimeResult:
    """Find change points and anomalous intervals of ``y`` along ``x`` for each group.

    Each group of case columns is one curve. Its cells (one per ``x``) get a median with
    a confidence interval, and on the log scale a level with a moderated sampling
    variance; the curve is segmented against its smooth trend, and every run of
    segments is tested against the trend of its flanks. The method is described in
    ``docs/method.md``.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table, one row per measured generation; warm-up rows are dropped.
    x : str, default "budget"
        Position along the curve: ``budget``, ``total_tokens`` (derived as
        ``prompt_tokens + budget`` when absent) or any numeric column.
    y : str, default "latency_s"
        The measured quantity: ``latency_s``, ``decode_s``, ``prefill_s`` or any
        positive column; analysed on the log scale.
    by : str or sequence of str, optional
        Group columns; by default every case column present
        (:data:`regimes.CASE_COLUMNS`) except ``x``.
    alpha : float, default 0.05
        False discovery rate for anomalies and, separately, for change points
        (Benjamini-Hochberg; see ``fdr``).
    min_ratio : float, default 1.25
        The effect an anomaly must exceed: each regime is tested for a level over its
        trend above ``min_ratio`` (below its inverse for ``direction="down"``), a
        TREAT test, so a reported ratio is beyond it with significance, not only in
        its point estimate.
    direction : {"up", "down", "both"}, default "up"
        Slowdowns (the default for latency), speed-ups, or either.
    n_boot : int, default 2000
        Validated and kept in ``params`` for one signature with the analyses that
        resample (:func:`regimes.attribute_phases`); detection draws nothing: its
        intervals are t intervals on moderated variances, which reach their level with
        two or three trials or sessions, where a cluster bootstrap cannot.
    seed : int, default 0
        As ``n_boot``; the result is deterministic.
    level : float, default 0.95
        Confidence level of every interval: each cell's median (a t interval on the log
        scale whose variance includes the session lottery, or the curve's between-cell
        variance for a cell measured in one process), each ratio and each change.
    penalty : float, default 2.0
        Factor ``c`` of the segmentation penalty ``c * log(T)`` per change point, in
        units of the estimated noise variance.
    session : str, optional
        Column naming the process of each trial; by default ``run_id``, ``session``
        and ``process_id`` together, those present.
    fdr : {"call", "curve"}, default "call"
        The Benjamini-Hochberg family of the anomaly tests: every tested regime of the
        call, or each curve's own (then a curve's q-values do not depend on the other
        curves of the call).

    Returns
    -------
    RegimeResult
        ``curve``, ``change_points``, ``anomalies``, ``groups``, ``untested``
        (groups with fewer than 3 distinct ``x``, with the reason), ``trials`` and
        ``params``; ``summary()`` prints them.

    Raises
    ------
    RegimesInputError
        When an argument is out of range, the table is empty, lacks a column, holds
        non-finite or non-positive ``y``, every cell holds a single trial, or no group
        has 3 distinct ``x``.

    Warns
    -----
    RegimesWarning
        When exact duplicate rows or single-trial cells are dropped, or some groups
        are too short to test.

    See Also
    --------
    cache_speedup : the KV cache's speedup per ``x`` and where it collapses.
    regimes.attribute_phases : split an anomaly's excess into prefill and decode.
    regimes.compare_backends : is an anomaly specific to its backend?

    References
    ----------
    .. [1] Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery
       rate: a practical and powerful approach to multiple testing. *J. R. Stat. Soc.
       B* 57, 289-300.
    .. [2] Rousseeuw, P. J. and Croux, C. (1993). Alternatives to the median absolute
       deviation. *J. Am. Stat. Assoc.* 88, 1273-1283 (the Qn scale).
    .. [3] Smyth, G. K. (2004). Linear models and empirical Bayes methods for assessing
       differential expression in microarray experiments. *Stat. Appl. Genet. Mol.
       Biol.* 3, article 3 (moderated variances).
    .. [4] Satterthwaite, F. E. (1946). An approximate distribution of estimates of
       variance components. *Biometrics Bulletin* 2, 110-114; Welch, B. L. (1947). The
       generalization of Student's problem when several different population
       variances are involved. *Biometrika* 34, 28-35.
    .. [5] Davison, A. C. and Hinkley, D. V. (1997). *Bootstrap Methods and their
       Application*, section 3.8; Field, C. A. and Welsh, A. H. (2007). Bootstrapping
       clustered data. *J. R. Stat. Soc. B* 69, 369-390 (the cluster bootstrap, which
       these t intervals replace: with two or three sessions it cannot reach its level).
    .. [6] McCarthy, D. J. and Smyth, G. K. (2009). Testing significance relative to a
       fold-change threshold is a TREAT. *Bioinformatics* 25, 765-771.
    .. [7] Truong, C., Oudre, L. and Vayatis, N. (2020). Selective review of offline
       change point detection methods. *Signal Processing* 167, 107299 (ruptures).

    Examples
    --------
    Synthetic trials around the published gpt2-medium MPS means (5 per budget):

    >>> import regimes
    >>> trials = regimes.simulate.published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    >>> result = regimes.detect_regimes(trials)
    >>> result.anomalies.select("start", "end", "kind", "recovered").rows()
    [(512, 624, 'spike', True)]
    >>> result.status
    'tested'
    """
    params = _check_arguments(
        x=x,
        y=y,
        by=by,
        alpha=alpha,
        min_ratio=min_ratio,
        direction=direction,
        n_boot=n_boot,
        seed=seed,
        level=level,
        penalty=penalty,
        session=session,
        fdr=fdr,
    )
    frame, group_columns = prepare_trials(df, x, y, by, session)
    index = index_curves(frame, group_columns, x)
    cells = _cell_arrays(index, y)
    _check_lengths(cells, x)
    fits, taus = _fit_curves(cells, penalty, min_ratio)
    change_points: list[_ChangePoint] = []
    curves = []
    for fit in fits:
        rows, kept = _test_change_points(fit, level)
        change_points += rows
        curves.append(_find_regimes(fit, kept, direction, min_ratio))
    candidates: list[_Candidate] = []
    for curve, trends in zip(curves, _regime_trends(curves), strict=True):
        if trends is not None:
            candidates += _test_regimes(curve, trends, direction, min_ratio, level)
    decision = _decide(change_points, candidates, alpha, fdr)
    result = _assemble(
        cells, index, fits, taus, (change_points, candidates, decision), frame, params
    )
    return replace(result, source=df)


def _assemble(
    cells: _Cells,
    index: CurveIndex,
    fits: list[_CurveFit],
    taus: list[tuple[float, float]],
    tested: tuple[list[_ChangePoint], list[_Candidate], _Decision],
    frame: pl.DataFrame,
    params: dict[str, Any],
) -> RegimeResult:
    """Build the result's tables from the stages' records."""
    change_points, candidates, decision = tested
    x, y = params["x"], params["y"]
    x_dtype = frame.schema[x]
    baseline, anomalous = _baseline(cells, fits, candidates, decision.chosen)
    low, high = _median_intervals(cells, taus, params["level"])
    extra = {
        "ci_low": low,
        "ci_high": high,
        "baseline": baseline,
        "segment": _segment_numbers(cells, fits),
        "anomalous": anomalous,
    }
    cp_table = _change_point_table(
        cells, index, x_dtype, change_points, decision.change_point_q, params["alpha"]
    )
    anomalies = _anomaly_table(cells, index, x_dtype, candidates, decision)
    if index.group_columns:
        anomalies = anomalies.sort([*index.group_columns, "start"], nulls_last=True)
        cp_table = cp_table.sort([*index.group_columns, "x_before"], nulls_last=True)
    notes, untested = _short_curves(cells, index, x)
    significant = [
        c.curve
        for c, q in zip(change_points, decision.change_point_q, strict=True)
        if q < params["alpha"]
    ]
    counts = (significant, [candidates[k].curve for k in decision.chosen])
    return RegimeResult(
        curve=_curve_table(cells, index, x, x_dtype, extra),
        change_points=cp_table,
        anomalies=anomalies,
        groups=_group_table(cells, index, taus, notes, counts),
        untested=untested,
        trials=_trial_rows(frame, index.group_columns, x, y),
        x=x,
        y=y,
        group_columns=index.group_columns,
        params=params,
    )
