"""Boundaries to refine, read from a detection (and speedup) result, with their flank levels.

Every significant boundary of the coarse grid becomes a :class:`Boundary`: the onset and
the recovery of each anomaly of :func:`regimes.detect_regimes`, each significant change
point that is not one of those, and the onset and recovery of each collapse of
:func:`regimes.cache_speedup`. Its bracket is the pair of neighbouring grid budgets that
the detection tells apart: ``low`` is on the boundary's left side (the last normal budget
of an onset, the last anomalous one of a recovery), ``high`` on its right side.

A probe in the bracket is decided between two levels on the log scale, each a straight
line in ``log budget`` (docs/method.md, refinement):

* the normal level: the detection's smooth trend (``baseline``; inside an anomaly the
  trend of its flanks), interpolated between the two bracket budgets;
* the anomalous level: the normal level times the ratio over trend of the anomalous
  bracket budget (the anomaly's level next to the boundary, not its average, which a
  ramped plateau would misstate);
* for a change point, the level before it extended along the trend's local slope, and
  the level after it as that times the change point's ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from regimes._refine.sprt import Noise
from regimes._stats.intervals import median_variance_factor

__all__ = ["Boundary", "Component", "Line", "boundaries_from", "curve_noise"]


@dataclass(frozen=True)
class Line:
    """A level along ``log budget``: ``value`` at ``log(anchor)``, then ``slope``."""

    anchor: float
    value: float
    slope: float

    def at(self, budget: float) -> float:
        """Return the level at ``budget``."""
        return self.value + self.slope * (math.log(budget) - math.log(self.anchor))

    def shifted(self, by: float) -> Line:
        """Return the same line moved up by ``by`` (a log ratio)."""
        return Line(self.anchor, self.value + by, self.slope)


@dataclass(frozen=True)
class Component:
    """One curve of a probe's statistic: its key, its sign and its noise."""

    curve: tuple[Any, ...]
    sign: float
    noise: Noise


@dataclass(frozen=True)
class Boundary:
    """A boundary between two neighbouring grid budgets, and the levels either side."""

    source: str
    group: dict[str, Any]
    kind: str
    low: int
    high: int
    components: tuple[Component, ...]
    left: Line
    right: Line
    left_state: str
    right_state: str
    line_var: float = 0.0
    """Variance of a level line at the bracket (that of its grid anchor cells)."""

    def levels(self, budget: int) -> tuple[float, float]:
        """``(mu_left, mu_right)`` at ``budget``."""
        return self.left.at(budget), self.right.at(budget)

    def step(self) -> float:
        """Return the log step between the two levels in the middle of the bracket."""
        left, right = self.levels(int(round(0.5 * (self.low + self.high))))
        return right - left


def curve_noise(
    frame: pl.DataFrame, group_columns: list[str], groups: pl.DataFrame
) -> dict[tuple[Any, ...], Noise]:
    """Estimate the noise of every curve.

    Within-session and cell scales come from the detection's ``groups`` table, the
    between-session scale of fresh processes from the cells measured in several
    sessions (0 where none is: then the cell scale carries it).

    ``frame`` holds the prepared grid trials (``_ly``, ``_session``, the group columns
    and ``budget``).
    """
    between = _session_variance(frame, group_columns)
    out: dict[tuple[Any, ...], Noise] = {}
    for row in groups.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        sigma_w = _finite(row.get("sigma_within"))
        tau = _finite(row.get("tau_between"))
        pooled, per_session = between.get(key, (0.0, 1.0))
        kappa = float(median_variance_factor(np.asarray([max(int(per_session), 1)]))[0])
        sigma_s2 = max(0.0, pooled - kappa * sigma_w**2 / max(per_session, 1.0))
        out[key] = Noise(sigma_w=sigma_w, sigma_s=math.sqrt(sigma_s2), tau=tau)
    return out


def _finite(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else 0.0


def _session_variance(
    frame: pl.DataFrame, group_columns: list[str]
) -> dict[tuple[Any, ...], tuple[float, float]]:
    """Pool, per curve, the variance of session medians within cells.

    The median of the cells' chi-square-scaled variances, as
    :func:`regimes._stats.intervals.cell_levels` pools it, and the median trials per
    session.
    """
    keys = [*group_columns, "budget"]
    sessions = frame.group_by([*keys, "_session"]).agg(
        pl.col("_ly").median().alias("_m"), pl.len().alias("_n")
    )
    cells = (
        sessions.group_by(keys)
        .agg(
            pl.col("_m").var(ddof=1).alias("_var"),
            pl.len().alias("_k"),
            pl.col("_n").median().alias("_n"),
        )
        .filter(pl.col("_k") > 1)
    )
    out: dict[tuple[Any, ...], tuple[float, float]] = {}
    if cells.height == 0:
        return out
    df = cells.get_column("_k").to_numpy() - 1.0
    cells = cells.with_columns(
        pl.Series("_scaled", cells.get_column("_var").to_numpy() * df / stats.chi2.median(df))
    )
    by_curve = cells.group_by(group_columns or pl.lit(0)).agg(
        pl.col("_scaled").median(), pl.col("_n").median()
    )
    for row in by_curve.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        out[key] = (float(row["_scaled"]), float(row["_n"]))
    return out


@dataclass(frozen=True)
class _CurveCells:
    """One curve's grid: budgets, log trend and log ratio over the trend."""

    budgets: np.ndarray
    log_trend: np.ndarray
    log_ratio: np.ndarray
    n: np.ndarray
    sessions: np.ndarray

    def index(self, budget: int) -> int:
        return int(np.searchsorted(self.budgets, budget))

    def trend_line(self, i: int, j: int) -> Line:
        """Return the trend through grid cells ``i`` and ``j`` (a line in log budget)."""
        du = math.log(self.budgets[j]) - math.log(self.budgets[i])
        slope = (self.log_trend[j] - self.log_trend[i]) / du
        return Line(float(self.budgets[i]), float(self.log_trend[i]), float(slope))


def _cells_by_curve(
    table: pl.DataFrame, group_columns: list[str], trend: str, value: str
) -> dict[tuple[Any, ...], _CurveCells]:
    out = {}
    parts = table.partition_by(group_columns, maintain_order=True) if group_columns else [table]
    for part in parts:
        part = part.sort("budget")
        key = tuple(part.get_column(c)[0] for c in group_columns)
        log_trend = np.log(part.get_column(trend).to_numpy())
        n = part.get_column("n").to_numpy() if "n" in part.columns else np.ones(part.height)
        sessions = (
            part.get_column("n_sessions").to_numpy()
            if "n_sessions" in part.columns
            else np.ones(part.height)
        )
        out[key] = _CurveCells(
            part.get_column("budget").to_numpy(),
            log_trend,
            np.log(part.get_column(value).to_numpy()) - log_trend,
            n,
            sessions,
        )
    return out


def _interval_boundaries(
    row: dict[str, Any], cells: _CurveCells, states: tuple[str, str]
) -> tuple[list[tuple[str, int, int, Line, Line, str, str]], list[str]]:
    """Bracket the onset and recovery of one anomalous interval.

    Also return the reasons for the boundaries that have none (at an end of the grid).
    """
    normal, odd = states
    found, missing = [], []
    i, j = cells.index(row["start"]), cells.index(row["end"])
    if i == 0:
        missing.append(f"the {odd} interval starting at {row['start']} starts the grid")
    else:
        line = cells.trend_line(i - 1, i)
        found.append(
            (
                "onset",
                int(cells.budgets[i - 1]),
                int(cells.budgets[i]),
                line,
                line.shifted(cells.log_ratio[i]),
                normal,
                odd,
            )
        )
    if row["recovered"] and j + 1 < cells.budgets.size:
        line = cells.trend_line(j, j + 1)
        found.append(
            (
                "recovery",
                int(cells.budgets[j]),
                int(cells.budgets[j + 1]),
                line.shifted(cells.log_ratio[j]),
                line,
                odd,
                normal,
            )
        )
    return found, missing


def _change_line(cells: _CurveCells, i: int) -> Line:
    """Return the level before a change between cells ``i - 1`` and ``i``."""
    if i >= 2:
        slope = cells.trend_line(i - 2, i - 1).slope
    elif i + 1 < cells.budgets.size:
        slope = cells.trend_line(i, i + 1).slope
    else:
        slope = 0.0
    return Line(float(cells.budgets[i - 1]), float(cells.log_trend[i - 1]), slope)


def boundaries_from(
    report: Any, speedup: Any, noise: dict[tuple[Any, ...], Noise]
) -> tuple[list[Boundary], list[dict[str, Any]]]:
    """Find every boundary of ``report`` (and of ``speedup`` when given).

    Also return the reasons for the ones that cannot be bracketed (rows with the group
    columns and ``reason``).
    """
    group_columns = list(report.group_columns)
    cells = _cells_by_curve(report.curve, group_columns, "baseline", "median")
    boundaries: list[Boundary] = []
    untested: list[dict[str, Any]] = []
    taken: set[tuple[tuple[Any, ...], int, int]] = set()
    for row in report.anomalies.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        found, missing = _interval_boundaries(row, cells[key], ("normal", "anomalous"))
        group = {c: row[c] for c in group_columns}
        untested += [group | {"reason": reason} for reason in missing]
        for kind, low, high, left, right, ls, rs in found:
            taken.add((key, low, high))
            comps = (Component(key, 1.0, noise[key]),)
            boundaries.append(
                Boundary("latency", group, kind, low, high, comps, left, right, ls, rs)
            )
    changes = report.change_points.filter(pl.col("significant"))
    for row in changes.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        if (key, row["x_before"], row["x_after"]) in taken:
            continue
        curve = cells[key]
        left = _change_line(curve, curve.index(row["x_after"]))
        right = left.shifted(math.log(row["ratio"]))
        comps = (Component(key, 1.0, noise[key]),)
        group = {c: row[c] for c in group_columns}
        low, high = int(row["x_before"]), int(row["x_after"])
        boundaries.append(
            Boundary("latency", group, "change", low, high, comps, left, right, "before", "after")
        )
    if speedup is not None:
        more, reasons = _speedup_boundaries(speedup, group_columns, noise)
        boundaries += more
        untested += reasons
    return [replace(b, line_var=_line_variance(b, cells)) for b in boundaries], untested


def _line_variance(boundary: Boundary, cells: dict[tuple[Any, ...], _CurveCells]) -> float:
    """Return the variance of a level line at the bracket.

    That of its grid anchor cells (the larger of the two), summed over the statistic's
    curves.
    """
    total = 0.0
    for component in boundary.components:
        curve = cells[component.curve]
        total += max(
            component.noise.level_variance(int(curve.n[i]), int(curve.sessions[i]))
            for i in (curve.index(boundary.low), curve.index(boundary.high))
        )
    return total


def _speedup_boundaries(
    speedup: Any, group_columns: list[str], noise: dict[tuple[Any, ...], Noise]
) -> tuple[list[Boundary], list[dict[str, Any]]]:
    """Find the onset and recovery of each speedup collapse.

    The statistic is cache-off level minus cache-on level, so its components are the
    two curves with signs +1 and -1.
    """
    columns = list(speedup.group_columns)
    cells = _cells_by_curve(speedup.speedup, columns, "trend", "speedup")
    boundaries: list[Boundary] = []
    untested: list[dict[str, Any]] = []
    for row in speedup.collapses.iter_rows(named=True):
        key = tuple(row[c] for c in columns)
        group = {c: row[c] for c in columns}
        found, missing = _interval_boundaries(row, cells[key], ("normal", "collapsed"))
        untested += [group | {"reason": reason} for reason in missing]
        curves = [
            tuple((use_cache if c == "use_cache" else group[c]) for c in group_columns)
            for use_cache in (False, True)
        ]
        if any(curve not in noise for curve in curves):
            untested.append(group | {"reason": "no detection of one cache setting's curve"})
            continue
        comps = (Component(curves[0], 1.0, noise[curves[0]]),) + (
            Component(curves[1], -1.0, noise[curves[1]]),
        )
        for kind, low, high, left, right, ls, rs in found:
            boundaries.append(
                Boundary("speedup", group, kind, low, high, comps, left, right, ls, rs)
            )
    return boundaries, untested
