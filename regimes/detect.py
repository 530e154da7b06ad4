"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The pipeline, per curve (one group of case columns), all on the log of ``y``:

1. cells ``(group, x)``: median and bootstrap interval of ``y``
   (:mod:`regimes.bootstrap`); level, sampling variance and df from the raw replicates,
   with session effects removed and disagreeing sessions or trials inflating a cell's
   variance (:func:`regimes.intervals.cell_levels`); the curve's between-cell variance
   (:func:`regimes.intervals.between_cell_variance`);
2. change points: ruptures l2 segmentation of robustly detrended, standardised levels
   with a BIC-like penalty, each boundary tested for a jump
   (:mod:`regimes.changepoints`);
3. candidate intervals: every run of consecutive segments, tested against the trend
   of its flanks with a scan-adjusted p-value (:mod:`regimes.intervals`);
4. Benjamini-Hochberg across every candidate of the call (and separately across every
   change point); an anomaly is a candidate with ``q < alpha`` whose ratio passes
   ``min_ratio``, kept greedily by evidence so that anomalies never overlap.

The trend coordinate is ``log(x)`` when every ``x`` is positive (latency is close to a
power of the budget, so its log is close to a straight line in ``log x``), else ``x``.
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from regimes._stats.bootstrap import cell_summaries
from regimes._stats.changepoints import bic_penalty, segment_curves, test_change_points
from regimes._stats.intervals import (
    DIRECTIONS,
    CurveEstimates,
    between_cell_variance,
    candidate_intervals,
    cell_levels,
    select_non_overlapping,
    test_intervals,
)
from regimes.data.schema import (
    RegimesInputError,
    RegimesWarning,
    check_fraction,
    check_min_ratio,
    check_n_boot,
    present_case_columns,
    validate_trials,
)

__all__ = ["RegimeReport", "detect_regimes"]

MIN_CELLS = 3
"""Fewest distinct ``x`` a curve needs: an interval needs a cell and a flank on each side."""

SESSION_COLUMNS = ("run_id", "session", "process_id")
"""Columns that together identify the process a trial ran in."""

_WIDTH = 96


@dataclass
class RegimeReport:
    """Result of :func:`detect_regimes`.

    Attributes
    ----------
    curve : per group and ``x``: ``n``, ``n_sessions``, ``median``, ``ci_low``,
        ``ci_high`` (bootstrap interval of the median), ``baseline`` (smooth trend at
        ``x``: the flank trend inside anomalies, a robust fit of the other cells
        elsewhere), ``ratio`` (median / baseline), ``segment`` and ``anomalous``.
    change_points : per group, each segment boundary: ``x_before``, ``x_after``,
        ``ratio`` (level after / before, along a common slope) with ``ratio_low``,
        ``ratio_high``, two-sided ``p_value`` (scan-adjusted), ``q_value`` (BH over the
        call) and ``significant``.
    anomalies : significant intervals only: ``start``, ``end`` (inclusive ``x``),
        ``peak_x``, ``ratio`` (level over flank trend) with ``ratio_low``,
        ``ratio_high``, one-sided ``p_value`` (scan-adjusted), ``q_value``,
        ``recovered``, ``kind`` (``spike`` / ``step``) and ``n_points``.
    groups : per group: cells, trials, noise components and counts of findings.
    params : the call's parameters.
    """

    curve: pl.DataFrame
    change_points: pl.DataFrame
    anomalies: pl.DataFrame
    groups: pl.DataFrame
    x: str
    y: str
    group_columns: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    # -- presentation -------------------------------------------------------------------

    def _label(self, row: dict[str, Any]) -> str:
        """The group columns that tell this call's groups apart (the model if none do)."""
        varying = [c for c in self.group_columns if self.groups.get_column(c).n_unique() > 1]
        shown = varying or [c for c in ("model",) if c in self.group_columns]
        return ", ".join(f"{c}={row[c]}" for c in shown) or "all rows"

    def summary(self) -> str:
        """A fixed-width text report: call, groups, then anomalies and change points."""
        width = _WIDTH
        p = self.params
        n_trials = int(self.groups.get_column("n_trials").sum()) if self.groups.height else 0
        n_cells = int(self.groups.get_column("n_cells").sum()) if self.groups.height else 0
        header = [
            ("Quantity:", f"{self.y} over {self.x}"),
            ("Groups:", str(self.groups.height)),
            ("Cells:", str(n_cells)),
            ("Trials:", str(n_trials)),
            ("Direction:", str(p.get("direction"))),
            ("alpha:", f"{p.get('alpha')}"),
            ("min_ratio:", f"{p.get('min_ratio')}"),
            ("Anomalies:", str(self.anomalies.height)),
            (
                "Change points:",
                f"{self.change_points.filter(pl.col('significant')).height}"
                f" significant of {self.change_points.height}",
            ),
            (
                "Bootstrap:",
                f"n_boot={p.get('n_boot')}, seed={p.get('seed')}, level={p.get('level')}",
            ),
        ]
        half = (len(header) + 1) // 2
        lines = ["=" * width, "Regime detection".center(width), "=" * width]
        for i in range(half):
            left = f"{header[i][0]:<15}{header[i][1]:>31}"
            right = ""
            if i + half < len(header):
                right = f"{header[i + half][0]:<15}{header[i + half][1]:>31}"
            lines.append(f"{left}    {right}".rstrip())
        lines.append(f"{'Grouped by:':<15}{', '.join(self.group_columns) or 'nothing (one curve)'}")
        lines += self._section(
            "Anomalies",
            self.anomalies,
            "interval",
            "kind",
            lambda r: f"{r['start']}..{r['end']}",
            lambda r: f"{r['kind']}{'' if r['recovered'] else ' (no recovery)'}",
            "none at q < alpha with ratio >= min_ratio",
        )
        lines += self._section(
            "Change points",
            self.change_points,
            "between",
            "sig",
            lambda r: f"{r['x_before']}|{r['x_after']}",
            lambda r: "*" if r["significant"] else "",
            "none",
        )
        lines.append("=" * width)
        notes = self.groups.filter(pl.col("note").is_not_null())
        for row in notes.iter_rows(named=True):
            lines.append(f"Note: {self._label(row)}: {row['note']}")
        return "\n".join(lines)

    def _section(
        self,
        title: str,
        frame: pl.DataFrame,
        where: str,
        last: str,
        locate: Any,
        describe: Any,
        empty: str,
    ) -> list[str]:
        lines = ["=" * _WIDTH if title == "Anomalies" else "-" * _WIDTH, title, "-" * _WIDTH]
        if frame.height == 0:
            return [*lines, empty]
        lines.append(f"{'group':<34}{where:>16}{'ratio':>8}{'[CI]':>18}{'p':>9}{'q':>9}  {last}")
        for row in frame.iter_rows(named=True):
            ci = f"[{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"
            lines.append(
                f"{self._label(row)[:33]:<34}{locate(row):>16}{row['ratio']:>8.3g}{ci:>18}"
                f"{row['p_value']:>9.2g}{row['q_value']:>9.2g}  {describe(row)}"
            )
        return lines

    def __repr__(self) -> str:
        return (
            f"RegimeReport({self.y} over {self.x}: {self.groups.height} group(s), "
            f"{self.curve.height} cells, {self.anomalies.height} anomal"
            f"{'y' if self.anomalies.height == 1 else 'ies'}, "
            f"{self.change_points.filter(pl.col('significant')).height} significant change point(s))"
        )

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"

    def chart(self) -> Any:
        """A plain Altair layer: median line, CI band and shaded anomalies per group."""
        import altair as alt

        label = (
            pl.concat_str(
                [
                    pl.format("{}={}", pl.lit(c), pl.col(c).cast(pl.String))
                    for c in self.group_columns
                ],
                separator=", ",
            )
            if self.group_columns
            else pl.lit("all rows")
        ).alias("group")
        curve = self.curve.with_columns(label).to_pandas()
        anomalies = self.anomalies.with_columns(label).to_pandas()
        base = alt.Chart(curve).encode(
            x=alt.X(f"{self.x}:Q", title=self.x), color=alt.Color("group:N", title="group")
        )
        band = base.mark_area(opacity=0.2).encode(
            y=alt.Y("ci_low:Q", title=self.y, scale=alt.Scale(type="log")), y2="ci_high:Q"
        )
        line = base.mark_line(point=True).encode(
            y="median:Q", tooltip=[self.x, "median", "ci_low", "ci_high", "ratio", "group"]
        )
        trend = base.mark_line(strokeDash=[4, 3], opacity=0.6).encode(y="baseline:Q")
        layers = [band, line, trend]
        if len(anomalies):
            layers.insert(
                0,
                alt.Chart(anomalies)
                .mark_rect(opacity=0.15, color="firebrick")
                .encode(
                    x="start:Q",
                    x2="end:Q",
                    tooltip=["group", "start", "end", "ratio", "q_value", "kind"],
                ),
            )
        return alt.layer(*layers).properties(width=480, height=260)


# -------------------------------------------------------------------------------------------


def _session_key(frame: pl.DataFrame, session: str | None) -> pl.Expr:
    if session is not None:
        if session not in frame.columns:
            raise RegimesInputError(f"session column {session!r} is not in the trial table")
        return pl.col(session).cast(pl.String).fill_null("").alias("_session")
    present = [c for c in SESSION_COLUMNS if c in frame.columns]
    if not present:
        return pl.lit("0").alias("_session")
    return pl.concat_str(
        [pl.col(c).cast(pl.String).fill_null("") for c in present], separator="|"
    ).alias("_session")


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of ``p`` (statsmodels ``fdr_bh``); empty in, empty out.

    Shared by every analysis that controls the false discovery rate over a call.
    """
    if p.size == 0:
        return p
    from statsmodels.stats.multitest import multipletests

    return multipletests(p, method="fdr_bh")[1]


def prepare_trials(
    df: Any, x: str, y: str, by: Sequence[str] | None, session: str | None
) -> tuple[pl.DataFrame, list[str]]:
    """Validate, choose groups, drop exact duplicates and single-trial cells (warned)."""
    frame = validate_trials(df, x=x, y=y)
    if by is None:
        group_columns = present_case_columns(frame, exclude=(x,))
    else:
        group_columns = [by] if isinstance(by, str) else list(by)
        missing = [c for c in group_columns if c not in frame.columns]
        if missing:
            raise RegimesInputError(
                f"by= names column(s) not in the trial table: {missing}; it has {frame.columns}"
            )
        if x in group_columns:
            raise RegimesInputError(f"by= must not contain the x column {x!r}")
    # hash first: comparing a million rows on every column costs more than one u64 column,
    # and only rows whose hashes collide can be duplicates
    hashed = frame.hash_rows(seed=0)
    duplicated = (
        int(frame.filter(hashed.is_duplicated()).is_duplicated().sum())
        if bool(hashed.is_duplicated().any())
        else 0
    )
    if duplicated:
        before = frame.height
        frame = frame.unique(maintain_order=True)
        warnings.warn(
            f"dropped {before - frame.height} exact duplicate row(s) "
            f"({duplicated} rows were involved): a trial is counted once",
            RegimesWarning,
            stacklevel=3,
        )
    frame = frame.with_columns(_session_key(frame, session), pl.col(y).log().alias("_ly"))
    cell_keys = [*group_columns, x]
    frame = frame.with_columns(pl.len().over(cell_keys).alias("_n"))
    single = frame.filter(pl.col("_n") == 1)
    if single.height == frame.height:
        raise RegimesInputError(
            "every (group, x) cell holds a single trial; replication is required to "
            "estimate noise (run at least 2 trials per budget, 3 or more recommended)"
        )
    if single.height:
        warnings.warn(
            f"dropped {single.height} cell(s) with a single trial "
            f"(e.g. {x}={single.get_column(x)[0]}): replication is required to estimate "
            "a cell's noise",
            RegimesWarning,
            stacklevel=3,
        )
        frame = frame.filter(pl.col("_n") > 1)
    return frame.drop("_n"), group_columns


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
) -> RegimeReport:
    """Find change points and anomalous intervals of ``y`` along ``x`` for each group.

    Parameters
    ----------
    df : trial table (polars or pandas); warm-ups are dropped.
    x : ``budget`` (default) or ``total_tokens`` (derived as prompt + budget), or any
        numeric column.
    y : ``latency_s`` (default), ``decode_s``, ``prefill_s`` or any positive column.
    by : group columns; default every case column present (``regimes.CASE_COLUMNS``).
    alpha : false discovery rate for anomalies and change points (Benjamini-Hochberg
        across every candidate of the call).
    min_ratio : an anomaly's level over trend must be at least this (at most its
        inverse for ``direction="down"``).
    direction : ``up`` (slowdowns, the default for latency), ``down`` or ``both``.
    n_boot, seed : bootstrap replicates and seed for cells with several sessions
        (single-session cells get the exact interval without resampling).
    level : confidence level of every interval.
    penalty : factor ``c`` of the segmentation penalty ``c * log(T)`` in units of the
        estimated noise variance.
    session : column naming the process of each trial; default ``run_id``,
        ``session`` and ``process_id`` together, those present.

    Exact duplicate rows are dropped, and cells with a single trial are dropped, each
    with a :class:`~regimes.RegimesWarning`; groups with fewer than 3 distinct ``x``
    stay in ``curve`` without a trend, are reported in ``groups.note`` and warned about
    (an error when no group has 3). Every cell with a single trial, or an empty
    table, is an error: replication is what measures the noise.
    """
    check_fraction(alpha=alpha, level=level)
    check_min_ratio(min_ratio)
    if direction not in DIRECTIONS:
        raise RegimesInputError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    check_n_boot(n_boot)
    if not (math.isfinite(penalty) and penalty > 0):
        raise RegimesInputError(f"penalty must be a positive number, got {penalty!r}")
    frame, group_columns = prepare_trials(df, x, y, by, session)
    params = dict(
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

    groups = (
        frame.select(group_columns)
        .unique()
        .sort(group_columns, nulls_last=True)
        .with_row_index("_curve")
        .with_columns(pl.col("_curve").cast(pl.Int64))
        if group_columns
        else pl.DataFrame({"_curve": [0]}, schema={"_curve": pl.Int64})
    )
    frame = (
        frame.join(groups, on=group_columns, how="left", nulls_equal=True)
        if group_columns
        else frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("_curve"))
    )
    frame = frame.with_columns(pl.col(x).cast(pl.Float64).alias("_x"))

    summaries = cell_summaries(
        frame, ["_curve", "_x"], y, session="_session", n_boot=n_boot, seed=seed, level=level
    )
    levels = cell_levels(frame, "_curve", "_x", "_ly", "_session")
    cells = summaries.join(levels.drop("n", "n_sessions"), on=["_curve", "_x"], how="left").sort(
        ["_curve", "_x"]
    )

    curve_ids = cells.get_column("_curve").to_numpy()
    xs = cells.get_column("_x").to_numpy()
    use_log = bool(np.all(xs > 0))
    u_all = np.log(xs) if use_log else xs.astype(float)
    level_all = cells.get_column("level").to_numpy()
    var_all = cells.get_column("var").to_numpy()
    df_all = cells.get_column("df").to_numpy()
    log_median = np.log(cells.get_column("median").to_numpy())
    bounds = np.flatnonzero(np.diff(curve_ids)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [curve_ids.size]])

    lengths = stops - starts
    if (lengths < MIN_CELLS).all():
        raise RegimesInputError(
            f"every group has fewer than {MIN_CELLS} distinct {x} values (most: "
            f"{int(lengths.max())}); a trend and an interval need at least {MIN_CELLS}"
        )
    if (lengths < MIN_CELLS).any():
        warnings.warn(
            f"{int((lengths < MIN_CELLS).sum())} group(s) have fewer than {MIN_CELLS} distinct "
            f"{x} values and are summarised without a trend (see report.groups.note)",
            RegimesWarning,
            stacklevel=2,
        )

    # between-cell variance per curve; curves too short to estimate borrow the median
    taus = [
        between_cell_variance(u_all[a:b], level_all[a:b], var_all[a:b])
        for a, b in zip(starts, stops)
    ]
    known = [t for t in taus if math.isfinite(t[0])]
    fallback = (
        (float(np.median([t[0] for t in known])), float(np.median([t[1] for t in known])))
        if known
        else (0.0, 0.0)
    )
    taus = [t if math.isfinite(t[0]) else fallback for t in taus]

    cp_rows: list[tuple] = []
    cand_rows: list[tuple] = []
    baseline_all = np.full(curve_ids.size, np.nan)
    segment_all = np.zeros(curve_ids.size, dtype=np.int64)
    trends: dict[tuple[int, int], np.ndarray] = {}
    notes: dict[int, str] = {}
    # segmentation, batched over curves of equal length
    segmented: dict[int, tuple[list[int], Any]] = {}
    for t in np.unique(lengths[lengths >= MIN_CELLS]):
        members = np.flatnonzero(lengths == t)
        index = starts[members][:, None] + np.arange(t)
        tau2 = np.asarray([taus[m][0] for m in members])[:, None]
        found = segment_curves(
            u_all[index], level_all[index], var_all[index] + tau2, bic_penalty(int(t), penalty)
        )
        for m, cuts, fit in zip(members, *found):
            segmented[int(m)] = (cuts, fit)

    for curve_index, (a, b) in enumerate(zip(starts, stops)):
        cid = int(curve_ids[a])
        t = b - a
        if t < MIN_CELLS:
            notes[cid] = f"only {t} distinct {x} value(s); at least {MIN_CELLS} are needed"
            continue
        u, lev, var, dof = u_all[a:b], level_all[a:b], var_all[a:b], df_all[a:b]
        breaks, fit = segmented[curve_index]
        refined = between_cell_variance(u, lev, var, breaks, fit.values)
        if math.isfinite(refined[0]):
            taus[curve_index] = refined
        est = CurveEstimates(u, lev, var, dof, *taus[curve_index])
        edges = np.asarray([0, *breaks, t])
        segment_all[a:b] = np.repeat(np.arange(edges.size - 1), np.diff(edges))
        kept = breaks
        if breaks:
            cps = test_change_points(est, breaks, smooth=fit)
            ratio, low, high = cps.ratio_interval(level)
            for k in range(cps.size):
                i = int(cps.index[k])
                cp_rows.append((cid, a + i - 1, a + i, ratio[k], low[k], high[k], cps.p_value[k]))
            # a break with no evidence of a shift cannot bound an interval whose boundary
            # gates must pass (a stricter test of nearly the same shift): merge its segments.
            # The scan adjustment covers every interval, so this prunes work, not validity.
            z_cut = stats.norm.isf(0.5 / max(1, t - 1))
            with np.errstate(divide="ignore", invalid="ignore"):
                strength = np.abs(cps.estimate) / cps.se
            kept = [b for b, z in zip(breaks, strength) if not z < z_cut]
        candidates = candidate_intervals(t, kept)
        if candidates:
            tests = test_intervals(
                est, candidates, kept, smooth=fit, direction=direction, level=level
            )
            ratio, low, high = tests.ratio_interval(level)
            for k in range(tests.size):
                key = (cid, len(cand_rows))
                trends[key] = tests.trend[k]
                cand_rows.append(
                    (
                        cid,
                        a,
                        a + int(tests.start[k]),
                        a + int(tests.end[k]),
                        a + int(tests.peak[k]),
                        tests.kind[k],
                        ratio[k],
                        low[k],
                        high[k],
                        tests.p_value[k],
                        abs(tests.estimate[k] / tests.se[k]) if tests.se[k] > 0 else np.inf,
                    )
                )
        baseline_all[a:b] = fit.values

    # --- multiple testing over the call ------------------------------------------------
    cp_p = np.asarray([r[6] for r in cp_rows], dtype=float)
    cp_q = benjamini_hochberg(cp_p)
    cand_p = np.asarray([r[9] for r in cand_rows], dtype=float)
    cand_q = benjamini_hochberg(cand_p)
    ratio = np.asarray([r[6] for r in cand_rows], dtype=float)
    if direction == "up":
        big = ratio >= min_ratio
    elif direction == "down":
        big = ratio <= 1.0 / min_ratio
    else:
        big = (ratio >= min_ratio) | (ratio <= 1.0 / min_ratio)
    significant = (cand_q < alpha) & big if cand_p.size else np.zeros(0, dtype=bool)

    chosen: list[int] = []
    sig_idx = np.flatnonzero(significant)
    by_curve: dict[int, list[int]] = {}
    for k in sig_idx:
        by_curve.setdefault(cand_rows[k][0], []).append(int(k))
    for cid, ks in by_curve.items():
        ks_arr = np.asarray(ks)
        st = np.asarray([cand_rows[k][2] for k in ks])
        en = np.asarray([cand_rows[k][3] for k in ks])
        # best evidence first: smallest p, then largest |z|
        order = np.lexsort((-np.asarray([cand_rows[k][10] for k in ks]), cand_p[ks_arr]))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        chosen.extend(int(ks_arr[i]) for i in select_non_overlapping(st, en, rank))

    # --- baseline and anomaly flags on the curve ----------------------------------------
    anomalous = np.zeros(curve_ids.size, dtype=bool)
    for k in chosen:
        anomalous[cand_rows[k][2] : cand_rows[k][3] + 1] = True
    for a, b in zip(starts, stops):
        normal = ~anomalous[a:b]
        if b - a >= MIN_CELLS and normal.any():
            # the trend's constant from the cells that follow it
            baseline_all[a:b] += np.median((level_all[a:b] - baseline_all[a:b])[normal])
    for k in chosen:
        cid, a0, s, e = cand_rows[k][:4]
        baseline_all[s : e + 1] = trends[(cid, k)]
    offsets = np.zeros(curve_ids.size)
    for a, b in zip(starts, stops):
        offsets[a:b] = np.median(log_median[a:b] - level_all[a:b])
    with np.errstate(over="ignore"):
        baseline = np.exp(baseline_all + offsets)

    curve = cells.with_columns(
        pl.Series("baseline", baseline),
        pl.Series("segment", segment_all),
        pl.Series("anomalous", anomalous),
    ).with_columns((pl.col("median") / pl.col("baseline")).alias("ratio"))
    x_dtype = frame.schema[x]
    curve = (
        curve.join(groups, on="_curve", how="left")
        .with_columns(pl.col("_x").cast(x_dtype).alias(x))
        .select(
            [
                *group_columns,
                x,
                "n",
                "n_sessions",
                "median",
                "ci_low",
                "ci_high",
                "baseline",
                "ratio",
                "segment",
                "anomalous",
            ]
        )
    )

    def keyed(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
        out = pl.DataFrame(rows, schema={"_curve": pl.Int64, **schema}, orient="row")
        return out.join(groups, on="_curve", how="left").select([*group_columns, *schema])

    x_values = cells.get_column("_x").to_numpy()
    cast_x = (lambda v: int(v)) if x_dtype.is_integer() else float
    change_points = keyed(
        [
            (
                r[0],
                cast_x(x_values[r[1]]),
                cast_x(x_values[r[2]]),
                float(r[3]),
                float(r[4]),
                float(r[5]),
                float(r[6]),
                float(q),
                bool(q < alpha),
            )
            for r, q in zip(cp_rows, cp_q)
        ],
        {
            "x_before": x_dtype,
            "x_after": x_dtype,
            "ratio": pl.Float64,
            "ratio_low": pl.Float64,
            "ratio_high": pl.Float64,
            "p_value": pl.Float64,
            "q_value": pl.Float64,
            "significant": pl.Boolean,
        },
    )
    stops_by_curve = dict(zip(curve_ids[starts].tolist(), stops.tolist()))
    anomalies = keyed(
        [
            (
                cand_rows[k][0],
                cast_x(x_values[cand_rows[k][2]]),
                cast_x(x_values[cand_rows[k][3]]),
                cast_x(x_values[cand_rows[k][4]]),
                float(cand_rows[k][6]),
                float(cand_rows[k][7]),
                float(cand_rows[k][8]),
                float(cand_p[k]),
                float(cand_q[k]),
                bool(cand_rows[k][3] + 1 < stops_by_curve[cand_rows[k][0]]),
                str(cand_rows[k][5]),
                int(cand_rows[k][3] - cand_rows[k][2] + 1),
            )
            for k in chosen
        ],
        {
            "start": x_dtype,
            "end": x_dtype,
            "peak_x": x_dtype,
            "ratio": pl.Float64,
            "ratio_low": pl.Float64,
            "ratio_high": pl.Float64,
            "p_value": pl.Float64,
            "q_value": pl.Float64,
            "recovered": pl.Boolean,
            "kind": pl.String,
            "n_points": pl.Int64,
        },
    )
    if group_columns:
        anomalies = anomalies.sort([*group_columns, "start"], nulls_last=True)
        change_points = change_points.sort([*group_columns, "x_before"], nulls_last=True)

    group_stats = cells.group_by("_curve").agg(
        pl.len().cast(pl.Int64).alias("n_cells"),
        pl.col("n").sum().cast(pl.Int64).alias("n_trials"),
        pl.col("sigma_w").first().alias("sigma_within"),
    )
    tau_frame = pl.DataFrame(
        {
            "_curve": curve_ids[starts].astype(np.int64),
            "tau_between": np.sqrt([t[0] for t in taus]),
            "note": [notes.get(int(c)) for c in curve_ids[starts]],
        },
        schema={"_curve": pl.Int64, "tau_between": pl.Float64, "note": pl.String},
    )
    counts_cp = pl.DataFrame(
        {"_curve": [r[0] for r in cp_rows], "_sig": cp_q < alpha},
        schema={"_curve": pl.Int64, "_sig": pl.Boolean},
    )
    counts_an = pl.DataFrame(
        {"_curve": [cand_rows[k][0] for k in chosen]}, schema={"_curve": pl.Int64}
    )
    group_table = (
        groups.join(group_stats, on="_curve", how="left")
        .join(tau_frame, on="_curve", how="left")
        .join(
            counts_cp.group_by("_curve").agg(
                pl.col("_sig").sum().cast(pl.Int64).alias("n_change_points")
            ),
            on="_curve",
            how="left",
        )
        .join(
            counts_an.group_by("_curve").agg(pl.len().cast(pl.Int64).alias("n_anomalies")),
            on="_curve",
            how="left",
        )
        .with_columns(pl.col("n_change_points", "n_anomalies").fill_null(0))
        .sort("_curve")
        .select(
            [
                *group_columns,
                "n_cells",
                "n_trials",
                "sigma_within",
                "tau_between",
                "n_change_points",
                "n_anomalies",
                "note",
            ]
        )
    )
    return RegimeReport(
        curve=curve,
        change_points=change_points,
        anomalies=anomalies,
        groups=group_table,
        x=x,
        y=y,
        group_columns=group_columns,
        params=params,
    )
