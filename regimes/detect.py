"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The pipeline, per curve (one group of case columns), all on the log of ``y``, each
stage a function below:

1. cells ``(group, x)``: median and bootstrap interval of ``y``
   (:mod:`regimes._stats.bootstrap`); level, sampling variance and df from the raw
   replicates, with session effects removed and disagreeing sessions or trials
   inflating a cell's variance (:mod:`regimes._stats.levels`); the curve's between-cell
   variance (:mod:`regimes._stats.between_cell`);
2. change points: penalised l2 segmentation of robustly detrended, standardised levels
   (:mod:`regimes._stats.segmentation`), each boundary tested for a jump;
3. candidate intervals: every run of consecutive segments, tested against the trend
   of its flanks with a scan-adjusted p-value (:mod:`regimes._stats.interval_tests`);
4. Benjamini-Hochberg across every candidate of the call (and separately across every
   change point); an anomaly is a candidate with ``q < alpha`` whose ratio passes
   ``min_ratio``, kept greedily by evidence so that anomalies never overlap
   (:mod:`regimes._stats.candidates`).

The method, with its references, is described in ``docs/method.md``.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

import numpy as np
import polars as pl
from scipy import stats

from regimes._result import AnalysisResult, untested_frame
from regimes._stats.anomaly_table import Interval, anomaly_frame, x_value
from regimes._stats.between_cell import between_cell_variance, fill_missing_taus
from regimes._stats.bootstrap import cell_summaries
from regimes._stats.candidates import candidate_intervals, choose_intervals, passes_min_ratio
from regimes._stats.curves import CurveEstimates, CurveIndex, curve_slices, index_curves
from regimes._stats.interval_tests import DIRECTIONS, change_point_tests, interval_tests
from regimes._stats.levels import cell_levels
from regimes._stats.multitest import benjamini_hochberg
from regimes._stats.segmentation import bic_penalty, segment_curves
from regimes._stats.trends import SmoothTrend, trend_coordinate
from regimes.data._prepare import prepare_trials
from regimes.data.schema import check_fraction, check_min_ratio, check_n_boot, check_seed
from regimes.errors import RegimesInputError, RegimesWarning
from regimes.explain.history import detection_note

__all__ = ["RegimeResult", "detect_regimes"]

MIN_CELLS = 3
"""Fewest distinct ``x`` a curve needs: an interval needs a cell and a flank on each side."""

_WIDTH = 96

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


@dataclass(frozen=True, repr=False)
class RegimeResult(AnalysisResult):
    """Result of :func:`detect_regimes`.

    Attributes
    ----------
    curve : polars.DataFrame
        Per group and ``x``: ``n``, ``n_sessions``, ``median``, ``ci_low``, ``ci_high``
        (bootstrap interval of the median), ``baseline`` (smooth trend at ``x``: the
        flank trend inside anomalies, a robust fit of the other cells elsewhere),
        ``ratio`` (median / baseline), ``segment`` and ``anomalous``.
    change_points : polars.DataFrame
        Per group, each segment boundary: ``x_before``, ``x_after``, ``ratio`` (level
        after / before, along the trend) with ``ratio_low``, ``ratio_high``, two-sided
        ``p_value`` (scan-adjusted), ``q_value`` (BH over the call) and ``significant``.
    anomalies : polars.DataFrame
        Significant intervals only: ``start``, ``end`` (inclusive ``x``), ``peak_x``,
        ``ratio`` (level over flank trend) with ``ratio_low``, ``ratio_high``, one-sided
        ``p_value`` (scan-adjusted), ``q_value``, ``recovered``, ``kind`` (``spike`` /
        ``step``) and ``n_points``.
    groups : polars.DataFrame
        Per group: cells, trials, noise components, counts of findings and a ``note``.
    untested : polars.DataFrame
        The groups that could not be tested, with the ``reason``.
    trials : polars.DataFrame
        The analysed trial rows: group columns, ``x``, ``y`` and ``session`` (the
        process key the analysis used).
    x, y : str
        The position and measured columns.
    group_columns : list of str
        The columns that form a group.
    params : dict
        The call's arguments.
    history_note : str or None
        Which anomalies process history explains, or may explain, when their trials met
        KV lengths for the first time (:func:`regimes.explain.history.detection_note`).
    """

    _tables: ClassVar[tuple[str, ...]] = ("anomalies", "change_points", "curve", "groups")
    _title: ClassVar[str] = "Regime detection"

    curve: pl.DataFrame
    change_points: pl.DataFrame
    anomalies: pl.DataFrame
    groups: pl.DataFrame
    untested: pl.DataFrame
    trials: pl.DataFrame
    x: str
    y: str
    group_columns: list[str]
    params: dict[str, Any]
    history_note: str | None = None

    def _label(self, row: dict[str, Any]) -> str:
        """Label a group by the columns that tell this call's groups apart."""
        varying = [c for c in self.group_columns if self.groups.get_column(c).n_unique() > 1]
        shown = varying or [c for c in ("model",) if c in self.group_columns]
        return ", ".join(f"{c}={row[c]}" for c in shown) or "all rows"

    def _header(self) -> list[str]:
        p = self.params
        n_trials = int(self.groups.get_column("n_trials").sum()) if self.groups.height else 0
        n_cells = int(self.groups.get_column("n_cells").sum()) if self.groups.height else 0
        significant = self.change_points.filter(pl.col("significant")).height
        pairs = [
            ("Quantity:", f"{self.y} over {self.x}"),
            ("Groups:", str(self.groups.height)),
            ("Cells:", str(n_cells)),
            ("Trials:", str(n_trials)),
            ("Direction:", str(p.get("direction"))),
            ("alpha:", f"{p.get('alpha')}"),
            ("min_ratio:", f"{p.get('min_ratio')}"),
            ("Anomalies:", str(self.anomalies.height)),
            ("Change points:", f"{significant} significant of {self.change_points.height}"),
            (
                "Bootstrap:",
                f"n_boot={p.get('n_boot')}, seed={p.get('seed')}, level={p.get('level')}",
            ),
        ]
        half = (len(pairs) + 1) // 2
        lines = ["=" * _WIDTH, self._title.center(_WIDTH), "=" * _WIDTH]
        for i in range(half):
            left = f"{pairs[i][0]:<15}{pairs[i][1]:>31}"
            right = (
                f"{pairs[i + half][0]:<15}{pairs[i + half][1]:>31}" if i + half < len(pairs) else ""
            )
            lines.append(f"{left}    {right}".rstrip())
        lines.append(f"{'Grouped by:':<15}{', '.join(self.group_columns) or 'nothing (one curve)'}")
        return lines

    def _no_anomaly_text(self) -> str:
        """Why the anomaly table is empty: nothing found, or nothing testable."""
        if self.untested.height and self.untested.height == self.groups.height:
            reasons = "; ".join(sorted(set(self.untested.get_column("reason").to_list())))
            return f"not testable here: {reasons}"
        return "none at q < alpha with ratio >= min_ratio"

    def summary(self) -> str:
        """Return a fixed-width text report: call, groups, anomalies and change points."""
        lines = self._header()
        lines += self._section(
            "Anomalies",
            self.anomalies,
            ("interval", "kind"),
            lambda r: f"{r['start']}..{r['end']}",
            lambda r: f"{r['kind']}{'' if r['recovered'] else ' (no recovery)'}",
            self._no_anomaly_text(),
        )
        lines += self._section(
            "Change points",
            self.change_points,
            ("between", "sig"),
            lambda r: f"{r['x_before']}|{r['x_after']}",
            lambda r: "*" if r["significant"] else "",
            "none",
        )
        lines.append("=" * _WIDTH)
        for row in self.untested.iter_rows(named=True):
            lines.append(f"Not testable here: {self._label(row)}: {row['reason']}")
        if self.history_note:
            lines += textwrap.wrap(f"History: {self.history_note}", _WIDTH)
        return "\n".join(lines)

    def _section(
        self,
        title: str,
        frame: pl.DataFrame,
        heads: tuple[str, str],
        locate: Any,
        describe: Any,
        empty: str,
    ) -> list[str]:
        lines = ["=" * _WIDTH if title == "Anomalies" else "-" * _WIDTH, title, "-" * _WIDTH]
        if frame.height == 0:
            return [*lines, empty]
        where, last = heads
        lines.append(f"{'group':<34}{where:>16}{'ratio':>8}{'[CI]':>18}{'p':>9}{'q':>9}  {last}")
        for row in frame.iter_rows(named=True):
            ci = f"[{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"
            lines.append(
                f"{self._label(row)[:33]:<34}{locate(row):>16}{row['ratio']:>8.3g}{ci:>18}"
                f"{row['p_value']:>9.2g}{row['q_value']:>9.2g}  {describe(row)}"
            )
        return lines

    def __str__(self) -> str:
        return self.summary()


RegimeReport = RegimeResult
"""Former name of :class:`RegimeResult`, kept for existing code."""


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
    """A tested interval (cell indices into the call's cells) and its flank trend."""

    curve: int
    start: int
    end: int
    peak: int
    kind: str
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    strength: float
    trend: np.ndarray


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
    return params


def _cell_arrays(index: CurveIndex, y: str, n_boot: int, seed: int, level: float) -> _Cells:
    """Cell summaries (median and its interval) joined with cell levels, as arrays."""
    summaries = cell_summaries(
        index.frame, ["_curve", "_x"], y, session="_session", n_boot=n_boot, seed=seed, level=level
    )
    levels = cell_levels(index.frame, "_curve", "_x", "_ly", "_session")
    table = summaries.join(levels.drop("n", "n_sessions"), on=["_curve", "_x"], how="left").sort(
        ["_curve", "_x"]
    )
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


def _fit_curves(cells: _Cells, penalty: float) -> tuple[list[_CurveFit], list[tuple[float, float]]]:
    """Between-cell variance and segmentation of every curve with enough cells.

    The whole-curve variance (curves too short for their own borrow the median) scales
    the segmentation, batched over curves of equal length; it is then refined around
    the curve's own trend and segments where that estimate exists. Returns the fits and
    every curve's final ``(tau2, df)``.
    """
    bounds = list(zip(cells.starts, cells.stops, strict=True))
    taus = fill_missing_taus(
        [between_cell_variance(cells.u[a:b], cells.level[a:b], cells.var[a:b]) for a, b in bounds]
    )
    lengths = cells.stops - cells.starts
    segmented: dict[int, tuple[list[int], SmoothTrend]] = {}
    for t in np.unique(lengths[lengths >= MIN_CELLS]):
        members = np.flatnonzero(lengths == t)
        index = cells.starts[members][:, None] + np.arange(t)
        tau2 = np.asarray([taus[m][0] for m in members])[:, None]
        found = segment_curves(
            cells.u[index],
            cells.level[index],
            cells.var[index] + tau2,
            bic_penalty(int(t), penalty),
        )
        for m, cuts, fit in zip(members, *found, strict=True):
            segmented[int(m)] = (cuts, fit)
    fits = []
    for k in sorted(segmented):
        a, b = bounds[k]
        breaks, trend = segmented[k]
        refined = between_cell_variance(
            cells.u[a:b], cells.level[a:b], cells.var[a:b], breaks, trend.values
        )
        if math.isfinite(refined[0]):
            taus[k] = refined
        est = CurveEstimates(
            cells.u[a:b], cells.level[a:b], cells.var[a:b], cells.df[a:b], *taus[k]
        )
        fits.append(_CurveFit(int(cells.curve[a]), int(a), est, breaks, trend))
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
    z_cut = stats.norm.isf(0.5 / max(1, fit.est.u.size - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        strength = np.abs(cps.estimate) / cps.se
    kept = [b for b, z in zip(fit.breaks, strength, strict=True) if not z < z_cut]
    return rows, kept


def _test_candidates(
    fit: _CurveFit, kept: list[int], direction: str, level: float
) -> list[_Candidate]:
    """Interval tests of every candidate run of the kept segments."""
    candidates = candidate_intervals(fit.est.u.size, kept)
    if not candidates:
        return []
    tests = interval_tests(fit.est, candidates, kept, smooth=fit.trend, direction=direction)
    ratio, low, high = tests.ratio_interval(level)
    a = fit.offset
    return [
        _Candidate(
            curve=fit.curve,
            start=a + int(tests.start[k]),
            end=a + int(tests.end[k]),
            peak=a + int(tests.peak[k]),
            kind=str(tests.kind[k]),
            ratio=ratio[k],
            ratio_low=low[k],
            ratio_high=high[k],
            p_value=tests.p_value[k],
            strength=abs(tests.estimate[k] / tests.se[k]) if tests.se[k] > 0 else np.inf,
            trend=tests.trend[k],
        )
        for k in range(tests.size)
    ]


def _decide(
    change_points: list[_ChangePoint],
    candidates: list[_Candidate],
    alpha: float,
    min_ratio: float,
    direction: str,
) -> _Decision:
    """Control the false discovery rate and choose the anomalies.

    Benjamini-Hochberg over the call's change points and, separately, its candidates;
    per curve, the greedy non-overlapping choice among the candidates with ``q < alpha``
    whose ratio passes ``min_ratio``, smallest p first, then largest ``|z|``.
    """
    cp_q = benjamini_hochberg(np.asarray([c.p_value for c in change_points], dtype=float))
    p = np.asarray([c.p_value for c in candidates], dtype=float)
    q = benjamini_hochberg(p)
    ratio = np.asarray([c.ratio for c in candidates], dtype=float)
    significant = (q < alpha) & passes_min_ratio(ratio, min_ratio, direction)
    curve = np.asarray([c.curve for c in candidates], dtype=np.int64)
    start = np.asarray([c.start for c in candidates], dtype=np.int64)
    end = np.asarray([c.end for c in candidates], dtype=np.int64)
    strength = np.asarray([c.strength for c in candidates], dtype=float)
    chosen: list[int] = []
    for cid in dict.fromkeys(curve[significant].tolist()):
        eligible = significant & (curve == cid)
        chosen.extend(int(k) for k in choose_intervals(start, end, eligible, (-strength, p)))
    return _Decision(cp_q, q, chosen)


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
    for a, b in zip(cells.starts, cells.stops, strict=True):
        normal = ~anomalous[a:b]
        if b - a >= MIN_CELLS and normal.any():
            log_trend[a:b] += np.median((cells.level[a:b] - log_trend[a:b])[normal])
    for k in chosen:
        log_trend[candidates[k].start : candidates[k].end + 1] = candidates[k].trend
    offsets = np.zeros(cells.curve.size)
    for a, b in zip(cells.starts, cells.stops, strict=True):
        offsets[a:b] = np.median(cells.log_median[a:b] - cells.level[a:b])
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


def _anomaly_table(
    cells: _Cells,
    index: CurveIndex,
    x_dtype: pl.DataType,
    candidates: list[_Candidate],
    decision: _Decision,
) -> pl.DataFrame:
    """Build the ``anomalies`` frame from the chosen candidates."""
    groups = _group_values(index)
    stops = dict(zip(cells.curve[cells.starts].tolist(), cells.stops.tolist(), strict=True))
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
            recovered=c.end + 1 < stops[c.curve],
            kind=c.kind,
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
        (Benjamini-Hochberg across every candidate of the call).
    min_ratio : float, default 1.25
        An anomaly's level over its trend must be at least this (at most its inverse
        for ``direction="down"``).
    direction : {"up", "down", "both"}, default "up"
        Slowdowns (the default for latency), speed-ups, or either.
    n_boot : int, default 2000
        Bootstrap replicates for the intervals of cells with several sessions.
    seed : int, default 0
        Seed of the bootstrap; the same seed gives the same result.
    level : float, default 0.95
        Confidence level of every interval.
    penalty : float, default 2.0
        Factor ``c`` of the segmentation penalty ``c * log(T)`` per change point, in
        units of the estimated noise variance.
    session : str, optional
        Column naming the process of each trial; by default ``run_id``, ``session``
        and ``process_id`` together, those present.

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
       clustered data. *J. R. Stat. Soc. B* 69, 369-390 (the cluster bootstrap).
    .. [6] Truong, C., Oudre, L. and Vayatis, N. (2020). Selective review of offline
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
    )
    frame, group_columns = prepare_trials(df, x, y, by, session)
    index = index_curves(frame, group_columns, x)
    cells = _cell_arrays(index, y, n_boot, seed, level)
    _check_lengths(cells, x)
    fits, taus = _fit_curves(cells, penalty)
    change_points: list[_ChangePoint] = []
    candidates: list[_Candidate] = []
    for fit in fits:
        rows, kept = _test_change_points(fit, level)
        change_points += rows
        candidates += _test_candidates(fit, kept, direction, level)
    decision = _decide(change_points, candidates, alpha, min_ratio, direction)
    result = _assemble(
        cells, index, fits, taus, (change_points, candidates, decision), frame, params
    )
    return replace(result, history_note=detection_note(result, df))


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
    extra = {"baseline": baseline, "segment": _segment_numbers(cells, fits), "anomalous": anomalous}
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
