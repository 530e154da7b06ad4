"""``cache_speedup``: the KV cache's speedup per budget, and where it collapses.

For a group (the case columns without ``use_cache``) and an ``x`` measured both ways,

.. math::  S(x) = \\frac{\\operatorname{median}(y \\mid \\text{cache off}, x)}
                        {\\operatorname{median}(y \\mid \\text{cache on}, x)}.

**Interval of S.** The two cells are independent measurements, so each is resampled on
its own (sessions first, then trials inside each drawn session:
:mod:`regimes.resample`, the scheme of :mod:`regimes.bootstrap`); the ratio of the two
bootstrap medians is formed per replicate and the percentile interval read off.

**Collapses.** On the log scale the speedup's level is the difference of the two
cells' levels, :math:`L = \\ell_{\\text{off}} - \\ell_{\\text{on}}`, with variance
:math:`v_{\\text{off}} + v_{\\text{on}}` and Welch-Satterthwaite degrees of freedom
(levels and variances from :func:`regimes.intervals.cell_levels`, with session effects
removed and disagreeing sessions inflating a cell's variance). The speedup curve then
goes through the interval tests of :func:`regimes.detect_regimes` with
``direction="down"``: each interval against its flank trend with a scan-adjusted
one-sided p-value, ``min_ratio`` (a collapse keeps at most ``1 / min_ratio`` of the
trend), a greedy choice of non-overlapping intervals and Benjamini-Hochberg across the
call. Every interval with enough flank support is a candidate
(:func:`regimes.flank_test.flank_support`: two cells a side for an interior interval,
three for one that touches an end of the grid and is no longer than its flank), its
trend carries its own uncertainty into the ratio's interval, and the between-cell
variance comes from the cells around the interval's own trend, with its uncertainty
carried even where it is estimated as 0 (:func:`regimes.flank_test.interval_tau`), so
that short grids stay calibrated (see :func:`_find_collapses`). A trend is never drawn
from a single cell, nor extrapolated beyond the cells that support it.

**Trend coordinate.** With the cache on a step costs about the same at every position;
with it off a step reprocesses the whole sequence. Where the fixed and the
per-position costs balance decides the log-speedup's shape: over short budgets it is
close to linear in ``log x`` (the CPU distilgpt2 run), while the published gpt2-medium
table over 128..768 fits a line in ``x`` far better (residual variance 0.003 around it,
0.025 around a line in ``log x``). Neither shape is known in advance, so each interior
interval is tested in the coordinate, ``log x`` or ``x``, whose trend fits the cells
around it best (the smaller between-cell variance;
:func:`regimes.flank_test.scan_intervals`). With ``log x`` only, the published 512
collapse is found in 29 of 40 simulated draws; with the choice, in 38, at unchanged
null rates (``bench/speedup_calibration.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from regimes._stats.changepoints import level_trend
from regimes._stats.flank_test import (
    Curve,
    curve_from_levels,
    scan_intervals,
    supported_intervals,
    whole_curve_taus,
)
from regimes._stats.intervals import ContrastResults, cell_levels, select_non_overlapping
from regimes._stats.resample import cell_replicates
from regimes.data.schema import (
    RegimesInputError,
    RegimesWarning,
    check_fraction,
    check_min_ratio,
    check_n_boot,
)
from regimes.detect import MIN_CELLS, benjamini_hochberg, prepare_trials
from regimes.explain._anomalies import group_label, summary_text

__all__ = ["SpeedupResult", "cache_speedup"]


@dataclass
class SpeedupResult:
    """Result of :func:`cache_speedup`.

    Attributes
    ----------
    speedup : per group and ``x`` measured both ways: ``speedup`` (cache-off median over
        cache-on median) with its bootstrap ``ci_low``, ``ci_high``; ``trend`` (the
        smooth speedup trend: the flank trend inside collapses) and ``ratio``
        (``speedup / trend``); ``off_median``, ``on_median``, ``off_n``, ``on_n``.
    collapses : significant dips of the speedup below its trend: group columns,
        ``start``, ``end`` (inclusive ``x``), ``peak_x``, ``ratio`` (speedup level over
        trend, < 1) with ``ratio_low``, ``ratio_high``, one-sided ``p_value``
        (scan-adjusted), ``q_value`` (BH over the call), ``recovered``, ``kind``,
        ``n_points``.
    """

    speedup: pl.DataFrame
    collapses: pl.DataFrame
    x: str
    y: str
    group_columns: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """Speedup range per group, then one line per collapse."""
        head = (
            f"KV-cache speedup of {self.y} over {self.x} (cache off / cache on), "
            f"{self.speedup.height} {self.x} value(s) in {self._n_groups()} group(s); "
            f"alpha={self.params.get('alpha')}, min_ratio={self.params.get('min_ratio')}"
        )
        ranges = (
            self.speedup.group_by(self.group_columns or pl.lit(0), maintain_order=True).agg(
                pl.col("speedup").min().alias("low"),
                pl.col("speedup").max().alias("high"),
            )
            if self.speedup.height
            else pl.DataFrame()
        )
        lines = [head]
        for row in ranges.iter_rows(named=True):
            lines.append(
                f"  {group_label(row, self.group_columns)}: speedup "
                f"{row['low']:.3g} to {row['high']:.3g}"
            )
        lines.append(
            summary_text(
                "Collapses (speedup below its trend):",
                self.collapses,
                "none at q < alpha with ratio <= 1/min_ratio",
                self._line,
            )
        )
        return "\n".join(lines)

    def _n_groups(self) -> int:
        if not self.group_columns:
            return 1 if self.speedup.height else 0
        return self.speedup.select(self.group_columns).unique().height

    def _line(self, row: dict[str, Any]) -> str:
        at = self.speedup.filter(
            pl.all_horizontal(
                [pl.col(c).eq_missing(row[c]) for c in self.group_columns] or [pl.lit(True)]
            )
            & (pl.col(self.x) == row["peak_x"])
        ).row(0, named=True)
        return (
            f"{group_label(row, self.group_columns)}: {self.x} {row['start']}..{row['end']} "
            f"keeps x{row['ratio']:.3g} [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}] "
            f"of the trend (q={row['q_value']:.2g}); at {row['peak_x']} speedup "
            f"{at['speedup']:.3g} [{at['ci_low']:.3g}, {at['ci_high']:.3g}] against trend "
            f"{at['trend']:.3g}"
        )

    def __repr__(self) -> str:
        return self.summary()


def cache_speedup(
    df: Any,
    x: str = "budget",
    y: str = "latency_s",
    by: str | Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    session: str | None = None,
) -> SpeedupResult:
    """KV-cache speedup per group and ``x`` with bootstrap CIs, and its collapses.

    Parameters are those of :func:`regimes.detect_regimes` (no ``penalty``: every
    interval is tested, see :func:`_find_collapses`); ``by`` defaults to every
    case column present except ``use_cache`` (and ``x``). Only ``x`` values measured both
    with and without the cache enter; groups or ``x`` values measured one way only are
    left out with a :class:`~regimes.RegimesWarning` saying how many.

    Raises :class:`RegimesInputError` when there are no cache-off rows, no cache-on rows,
    or no ``x`` measured both ways in any group.
    """
    check_fraction(alpha=alpha, level=level)
    check_min_ratio(min_ratio)
    check_n_boot(n_boot)
    columns = [str(c) for c in getattr(df, "columns", [])]
    if "use_cache" not in columns:
        raise RegimesInputError(
            "the trial table has no 'use_cache' column; the speedup "
            "compares runs with the KV cache on and off"
        )
    if by is not None:
        by = [by] if isinstance(by, str) else list(by)
        if "use_cache" in by:
            raise RegimesInputError(
                "by= must not contain 'use_cache': the speedup is formed across it"
            )
        by = [*by, "use_cache"]
    frame, with_cache = prepare_trials(df, x, y, by, session)
    if "use_cache" not in with_cache:
        with_cache = [*with_cache, "use_cache"]
    group_columns = [c for c in with_cache if c != "use_cache"]
    frame = _paired_cells(frame, group_columns, x)
    params = dict(
        x=x,
        y=y,
        by=by,
        alpha=alpha,
        min_ratio=min_ratio,
        n_boot=n_boot,
        seed=seed,
        level=level,
        session=session,
    )

    speedup = _speedup_intervals(frame, group_columns, x, y, n_boot, seed, level)
    curves = _speedup_levels(frame, group_columns, x)
    trend, collapses = _find_collapses(
        curves, group_columns, x, frame.schema[x], alpha, min_ratio, level
    )
    speedup = (
        speedup.join(trend, on=[*group_columns, x], how="left", nulls_equal=True)
        .with_columns((pl.col("speedup") / pl.col("trend")).alias("ratio"))
        .select(
            [
                *group_columns,
                x,
                "speedup",
                "ci_low",
                "ci_high",
                "trend",
                "ratio",
                "off_median",
                "on_median",
                "off_n",
                "on_n",
            ]
        )
    )
    return SpeedupResult(
        speedup=speedup, collapses=collapses, x=x, y=y, group_columns=group_columns, params=params
    )


def _paired_cells(frame: pl.DataFrame, group_columns: list[str], x: str) -> pl.DataFrame:
    """Keep the (group, x) cells measured both with and without the cache."""
    if frame.get_column("use_cache").null_count():
        raise RegimesInputError(
            "column 'use_cache' has null values; each trial must say whether the KV cache was on"
        )
    states = set(frame.get_column("use_cache").unique().to_list())
    for state, word in ((False, "off"), (True, "on")):
        if state not in states:
            raise RegimesInputError(
                f"no cache-{word} rows (use_cache={state}): the speedup needs trials with "
                "the KV cache both on and off"
            )
    keys = [*group_columns, x]
    paired = frame.with_columns(pl.col("use_cache").n_unique().over(keys).alias("_ways"))
    kept = paired.filter(pl.col("_ways") == 2).drop("_ways")
    if kept.height == 0:
        raise RegimesInputError(
            f"no {x} value is measured both with and without the cache in any group; the "
            "cache-on and cache-off sweeps do not overlap"
        )
    lost = paired.filter(pl.col("_ways") == 1).select(keys).unique().height
    if lost:
        warnings.warn(
            f"left out {lost} (group, {x}) cell(s) measured with the cache only on or only "
            "off: a speedup needs both",
            RegimesWarning,
            stacklevel=3,
        )
    return kept


def _speedup_intervals(
    frame: pl.DataFrame,
    group_columns: list[str],
    x: str,
    y: str,
    n_boot: int,
    seed: int,
    level: float,
) -> pl.DataFrame:
    """Median ratio per (group, x) and its percentile interval: the off and on cells are
    resampled independently and their bootstrap medians divided replicate by replicate.
    """
    keys = [*group_columns, x, "use_cache"]
    reps = cell_replicates(frame, keys, [y], session="_session", n_boot=n_boot, seed=seed)
    # Cells come sorted by keys, so each (group, x) is an off row followed by an on row.
    off, on = reps.replicates[0::2, :, 0], reps.replicates[1::2, :, 0]
    off_median, on_median = reps.median[0::2, 0], reps.median[1::2, 0]
    low, high = np.quantile(off / on, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=1)
    cells = reps.cells
    return (
        cells.filter(~pl.col("use_cache"))
        .select([*group_columns, x])
        .with_columns(
            pl.Series("speedup", off_median / on_median),
            pl.Series("ci_low", low),
            pl.Series("ci_high", high),
            pl.Series("off_median", off_median),
            pl.Series("on_median", on_median),
            cells.filter(~pl.col("use_cache")).get_column("n").alias("off_n"),
            cells.filter(pl.col("use_cache")).get_column("n").alias("on_n"),
        )
    )


def _speedup_levels(frame: pl.DataFrame, group_columns: list[str], x: str) -> pl.DataFrame:
    """Per (group, x): log-speedup level, variance and Welch df from the two cells."""
    curve_keys = [*group_columns, "use_cache"]
    ids = (
        frame.select(curve_keys)
        .unique()
        .sort(curve_keys)
        .with_row_index("_curve")
        .with_columns(pl.col("_curve").cast(pl.Int64))
    )
    frame = frame.join(ids, on=curve_keys, how="left", nulls_equal=True).with_columns(
        pl.col(x).cast(pl.Float64).alias("_x")
    )
    levels = cell_levels(frame, "_curve", "_x", "_ly", "_session").join(ids, on="_curve")
    off = levels.filter(~pl.col("use_cache"))
    on = levels.filter(pl.col("use_cache"))
    joined = off.join(on, on=[*group_columns, "_x"], suffix="_on", nulls_equal=True)
    v_off, v_on = pl.col("var"), pl.col("var_on")
    welch = (v_off + v_on) ** 2 / (v_off**2 / pl.col("df") + v_on**2 / pl.col("df_on"))
    return joined.select(
        *group_columns,
        "_x",
        (pl.col("level") - pl.col("level_on")).alias("level"),
        (v_off + v_on).alias("var"),
        welch.fill_nan(1.0).clip(1.0, None).alias("df"),
    ).sort([*group_columns, "_x"])


def _find_collapses(
    curves: pl.DataFrame,
    group_columns: list[str],
    x: str,
    x_dtype: pl.DataType,
    alpha: float,
    min_ratio: float,
    level: float,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Test every interval of each log-speedup curve against its flank trend (down).

    The tests are :func:`regimes.intervals.test_intervals` with their scan-adjusted
    p-values, Benjamini-Hochberg, ``min_ratio`` and a greedy choice of non-overlapping
    intervals, as in :func:`regimes.detect_regimes`. What differs is made for short
    grids (6 budgets in the published table):

    * every interval with enough flank support is a candidate, framed by
      :mod:`regimes.flank_test`, not only runs of segments. Its p-value is adjusted for
      the scan over all of them, so this costs no validity, and a segmentation would
      need the between-cell variance first;
    * Benjamini-Hochberg runs over each curve's greedy non-overlapping choice, not over
      every overlapping variant of one dip (see :func:`_choose` for the order).
    """
    parts = curves.partition_by(group_columns, maintain_order=True) if group_columns else [curves]
    arrays = [curve_from_levels(part) for part in parts]
    taus = whole_curve_taus(arrays)
    linear = [curve._replace(u=curve.x.astype(float)) for curve in arrays]
    linear_taus = whole_curve_taus(linear)
    scans = [
        _scan_down(curve, tau, level, [(other, other_tau)]) if curve.x.size >= MIN_CELLS else None
        for curve, tau, other, other_tau in zip(arrays, taus, linear, linear_taus)
    ]
    # Per curve the greedy non-overlapping set first, then BH across the call's chosen
    # intervals: with every interval a candidate, BH over all of them would count the
    # many overlapping variants of one dip as separate hypotheses.
    chosen = [_choose(scan, alpha, min_ratio) if scan is not None else [] for scan in scans]
    q_all = benjamini_hochberg(
        np.asarray([scan["p_value"][k] for scan, ks in zip(scans, chosen) for k in ks], dtype=float)
    )
    rows, trends, offset = [], [], 0
    for part, curve, tau, scan, picked in zip(parts, arrays, taus, scans, chosen):
        key = {c: part.get_column(c)[0] for c in group_columns}
        xs, lev = curve.x, curve.level
        q = dict(zip(picked, q_all[offset : offset + len(picked)]))
        offset += len(picked)
        found = [k for k in picked if q[k] < alpha]
        breaks = sorted(
            {b for k in found for b in (scan["start"][k], scan["end"][k] + 1) if 0 < b < xs.size}
        )
        trend = (
            level_trend(curve.u, lev, curve.var + tau[0], breaks).values
            if xs.size >= MIN_CELLS
            else np.full(xs.size, np.nan)
        )
        normal = np.ones(xs.size, dtype=bool)
        for k in found:
            normal[scan["start"][k] : scan["end"][k] + 1] = False
        trend = trend + float(np.median((lev - trend)[normal]))
        for k in found:
            s, e = int(scan["start"][k]), int(scan["end"][k])
            trend[s : e + 1] = scan["trend"][k]
            rows.append(
                {
                    **key,
                    "start": _cast(xs[s], x_dtype),
                    "end": _cast(xs[e], x_dtype),
                    "peak_x": _cast(xs[int(scan["peak"][k])], x_dtype),
                    "ratio": float(scan["ratio"][k]),
                    "ratio_low": float(scan["ratio_low"][k]),
                    "ratio_high": float(scan["ratio_high"][k]),
                    "p_value": float(scan["p_value"][k]),
                    "q_value": float(q[k]),
                    "recovered": bool(e + 1 < xs.size),
                    "kind": str(scan["kind"][k]),
                    "n_points": e - s + 1,
                }
            )
        trends.append(
            part.select([*group_columns, "_x"]).with_columns(pl.Series("trend", np.exp(trend)))
        )
    trend_frame = pl.concat(trends).with_columns(pl.col("_x").cast(x_dtype).alias(x)).drop("_x")
    schema = {
        **{c: curves.schema[c] for c in group_columns},
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
    }
    return trend_frame, pl.DataFrame(rows, schema=schema, orient="row")


def _scan_down(
    curve: Curve,
    prior_tau: tuple[float, float],
    level: float,
    alternatives: Sequence[tuple[Curve, tuple[float, float]]] = (),
) -> dict[str, np.ndarray] | None:
    """Every interval of one curve with enough flank support
    (:func:`regimes.flank_test.flank_support`), tested downwards in the trend coordinate
    that fits its flank best; ``None`` when none has.
    """
    intervals = supported_intervals(curve.x.size)
    if not intervals:
        return None
    tests = scan_intervals(
        curve, intervals, prior_tau, direction="down", level=level, alternatives=alternatives
    )
    out = {
        name: np.concatenate([getattr(k, name) for k in tests])
        for name in ("start", "end", "kind", "peak", "p_value", "estimate", "se", "df")
    }
    joint = ContrastResults(out["estimate"], out["se"], out["df"], out["p_value"])
    out["ratio"], out["ratio_low"], out["ratio_high"] = joint.ratio_interval(level)
    out["trend"] = [k.trend[0] for k in tests]
    return out


def _choose(scan: dict[str, np.ndarray], alpha: float, min_ratio: float) -> list[int]:
    """Greedy non-overlapping choice among the candidates with ``p < alpha`` and a large
    enough dip, largest ``|z|`` first.

    ``|z|`` of the interval-against-trend contrast is the matched-filter scan statistic:
    adding a normal cell to a dip, or dropping one of its cells, lowers it in
    expectation, so the largest picks the dip's boundaries. Ordering by p-value would
    not: p is the largest of the gate tests' p-values, which differ in kind between
    intervals inside the grid and intervals touching its ends.
    """
    keep = np.flatnonzero((scan["p_value"] < alpha) & (scan["ratio"] <= 1.0 / min_ratio))
    if keep.size == 0:
        return []
    se = scan["se"][keep]
    z = np.abs(scan["estimate"][keep] / np.where(se > 0, se, np.inf))
    rank = np.empty(keep.size, dtype=np.int64)
    rank[np.argsort(-z, kind="stable")] = np.arange(keep.size)
    return [
        int(keep[i]) for i in select_non_overlapping(scan["start"][keep], scan["end"][keep], rank)
    ]


def _cast(value: float, dtype: pl.DataType) -> int | float:
    return int(value) if dtype.is_integer() else float(value)
