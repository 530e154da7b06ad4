"""Collapses of the speedup: every supported interval scanned downwards, chosen, tested.

Private to :func:`regimes.cache_speedup` (:mod:`regimes.speedup` says the statistics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from regimes._stats.anomaly_table import Interval, anomaly_frame
from regimes._stats.between_cell import curve_taus
from regimes._stats.candidates import choose_intervals
from regimes._stats.contrasts import ContrastResults
from regimes._stats.curves import Curve, curve_from_levels
from regimes._stats.fixed_intervals import scan_intervals, supported_intervals
from regimes._stats.multitest import benjamini_hochberg
from regimes._stats.trends import level_trend

__all__ = ["MIN_CELLS", "SpeedupCurve", "find_collapses", "scan_curves"]


MIN_CELLS = 3
"""Fewest ``x`` measured both ways that a group needs for a trend."""


class Scan(NamedTuple):
    """Every supported interval of one log-speedup curve, tested downwards."""

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    peak: np.ndarray
    p_value: np.ndarray
    estimate: np.ndarray
    se: np.ndarray
    ratio: np.ndarray
    ratio_low: np.ndarray
    ratio_high: np.ndarray
    trend: list[np.ndarray]


class SpeedupCurve(NamedTuple):
    """One group's log-speedup curve with its whole-curve ``(tau2, df)`` and scan.

    (``None`` when it could not be tested, ``reason`` saying why).
    """

    key: dict[str, Any]
    cells: pl.DataFrame
    curve: Curve
    tau: tuple[float, float]
    scan: Scan | None
    reason: str | None


def _untestable(n_cells: int, x: str) -> str | None:
    """Why a speedup curve of ``n_cells`` cannot be scanned for collapses, or ``None``."""
    if n_cells < MIN_CELLS:
        return (
            f"only {n_cells} {x} value(s) measured both with and without the cache; "
            f"a trend needs at least {MIN_CELLS}"
        )
    if not supported_intervals(n_cells):
        return (
            f"{n_cells} {x} values measured both ways: no interval has the flank cells a "
            "trend needs (2 on each side, 3 beside an interval at an end of the grid)"
        )
    return None


def scan_curves(
    levels: pl.DataFrame, group_columns: list[str], x: str, level: float, threshold: float
) -> list[SpeedupCurve]:
    """Each group's log-speedup curve, scanned downwards where it can be.

    Each interior interval is tested in the coordinate (``log x`` or ``x``) whose trend
    fits the cells around it best; see :func:`regimes._stats.fixed_intervals.scan_intervals`.
    """
    parts = levels.partition_by(group_columns, maintain_order=True) if group_columns else [levels]
    arrays = [curve_from_levels(part) for part in parts]
    taus = curve_taus(arrays)
    linear = [curve._replace(u=curve.x.astype(float)) for curve in arrays]
    linear_taus = curve_taus(linear)
    out = []
    for part, curve, tau, other, other_tau in zip(
        parts, arrays, taus, linear, linear_taus, strict=True
    ):
        reason = _untestable(curve.x.size, x)
        scan = None if reason else _scan_down(curve, tau, level, threshold, [(other, other_tau)])
        key = {c: part.get_column(c)[0] for c in group_columns}
        out.append(SpeedupCurve(key, part, curve, tau, scan, reason))
    return out


def _scan_down(
    curve: Curve,
    prior_tau: tuple[float, float],
    level: float,
    threshold: float,
    alternatives: Sequence[tuple[Curve, tuple[float, float]]] = (),
) -> Scan:
    """Scan every interval of one curve with enough flank support downwards.

    (:func:`regimes._stats.fixed_intervals.flank_support`), tested downwards in the
    trend coordinate that fits its flank best.
    """
    intervals = supported_intervals(curve.x.size)
    tests = scan_intervals(
        curve,
        intervals,
        prior_tau,
        direction="down",
        alternatives=alternatives,
        threshold=threshold,
    )
    out = {
        name: np.concatenate([getattr(k, name) for k in tests])
        for name in ("start", "end", "kind", "peak", "p_value", "estimate", "se", "df")
    }
    joint = ContrastResults(out["estimate"], out["se"], out["df"], out["p_value"])
    ratio, low, high = joint.ratio_interval(level)
    return Scan(
        start=out["start"],
        end=out["end"],
        kind=out["kind"],
        peak=out["peak"],
        p_value=out["p_value"],
        estimate=out["estimate"],
        se=out["se"],
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        trend=[k.trend[0] for k in tests],
    )


def _choose(scan: Scan, alpha: float, min_ratio: float) -> list[int]:
    """Choose collapses greedily, without overlap, largest ``|z|`` first.

    Among the candidates with ``p < alpha`` and a large enough dip.

    ``|z|`` of the interval-against-trend contrast is the matched-filter scan statistic:
    adding a normal cell to a dip, or dropping one of its cells, lowers it in
    expectation, so the largest picks the dip's boundaries. Ordering by p-value would
    not: p is the largest of the gate tests' p-values, which differ in kind between
    intervals inside the grid and intervals touching its ends.
    """
    eligible = (scan.p_value < alpha) & (scan.ratio <= 1.0 / min_ratio)
    z = np.abs(scan.estimate / np.where(scan.se > 0, scan.se, np.inf))
    return [int(k) for k in choose_intervals(scan.start, scan.end, eligible, (-z,))]


def find_collapses(
    curves: list[SpeedupCurve],
    group_columns: list[str],
    x: str,
    x_dtype: pl.DataType,
    alpha: float,
    min_ratio: float,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Significant collapses of every curve, and the speedup trend at every cell.

    What differs from :func:`regimes.detect_regimes` is made for short grids (6 budgets
    in the published table): every interval with enough flank support is a candidate,
    not only runs of segments (its p-value is adjusted for the scan over all of them,
    so this costs no validity, and a segmentation would need the between-cell variance
    first), and Benjamini-Hochberg runs over each curve's greedy non-overlapping choice,
    not over every overlapping variant of one dip.
    """
    chosen = [_choose(c.scan, alpha, min_ratio) if c.scan is not None else [] for c in curves]
    q_all = benjamini_hochberg(
        np.asarray(
            [
                c.scan.p_value[k]
                for c, ks in zip(curves, chosen, strict=True)
                if c.scan is not None
                for k in ks
            ],
            dtype=float,
        )
    )
    keyed, trends, offset = [], [], 0
    for c, picked in zip(curves, chosen, strict=True):
        q = dict(zip(picked, q_all[offset : offset + len(picked)], strict=True))
        offset += len(picked)
        found = [k for k in picked if q[k] < alpha]
        trend = _curve_trend(c, found)
        for k in found:
            keyed.append(([c.key[g] for g in group_columns], _interval(c, k, q[k]), c.curve.x))
        trends.append(
            c.cells.select([*group_columns, "_x"]).with_columns(pl.Series("trend", np.exp(trend)))
        )
    trend_frame = pl.concat(trends).with_columns(pl.col("_x").cast(x_dtype).alias(x)).drop("_x")
    schema = {g: curves[0].cells.schema[g] for g in group_columns} if curves else {}
    return trend_frame, anomaly_frame(keyed, schema, x_dtype)


def _interval(c: SpeedupCurve, k: int, q: float) -> Interval:
    """Report the ``k``-th scanned interval of a curve as a collapse."""
    scan = c.scan
    assert scan is not None
    s, e = int(scan.start[k]), int(scan.end[k])
    return Interval(
        start=s,
        end=e,
        peak=int(scan.peak[k]),
        ratio=scan.ratio[k],
        ratio_low=scan.ratio_low[k],
        ratio_high=scan.ratio_high[k],
        p_value=scan.p_value[k],
        q_value=q,
        recovered=e + 1 < c.curve.x.size,
        kind=str(scan.kind[k]),
    )


def _curve_trend(c: SpeedupCurve, found: list[int]) -> np.ndarray:
    """Fit the log-speedup trend of one curve.

    A robust fit with a free level at each collapse's boundaries, its constant from the cells
    outside collapses, and each
    collapse's own flank trend inside it.
    """
    curve, scan = c.curve, c.scan
    xs, lev = curve.x, curve.level
    starts = [int(scan.start[k]) for k in found] if scan is not None else []
    ends = [int(scan.end[k]) for k in found] if scan is not None else []
    breaks = sorted(
        {b for s, e in zip(starts, ends, strict=True) for b in (s, e + 1) if 0 < b < xs.size}
    )
    trend = (
        level_trend(curve.u, lev, curve.var + c.tau[0], breaks).values
        if xs.size >= MIN_CELLS
        else np.full(xs.size, np.nan)
    )
    normal = np.ones(xs.size, dtype=bool)
    for s, e in zip(starts, ends, strict=True):
        normal[s : e + 1] = False
    trend = trend + float(np.median((lev - trend)[normal]))
    for k, s, e in zip(found, starts, ends, strict=True):
        trend[s : e + 1] = scan.trend[k]  # type: ignore[union-attr]
    return trend
