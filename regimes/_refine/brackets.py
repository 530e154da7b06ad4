"""Boundaries to refine, read from a detection (and speedup) result, with their flank levels.

Every significant boundary of the coarse grid becomes a :class:`Boundary`: the onset and
the recovery of each anomaly of :func:`regimes.detect_regimes`, each significant change
point that is not one of those, and the onset and recovery of each collapse of
:func:`regimes.cache_speedup`. Its bracket is the pair of grid budgets that the
detection's bootstrap bounds put on either side of it: ``low`` is on the boundary's left
side (the grid budget before ``start_low`` for an onset, ``end_low`` for a recovery,
the one before ``after_low`` for a change), ``high`` on its right side (``start_high``,
the grid budget after ``end_high``, ``after_high``). Where the bounds are one budget (a
sharp boundary) this is the one grid step the point estimate names; grid budgets inside a
wider bracket are probes already measured, decided like any other
(:mod:`regimes._refine.design`). A speedup collapse has no bounds: its bracket is the one
grid step.

A probe in the bracket is decided between two levels on the log scale, each a straight
line in ``log budget``:

* the normal level: the detection's smooth trend (``baseline``; inside an anomaly the
  trend of its flanks) through the two bracket budgets;
* the anomalous level: the normal level times the mean ratio over trend of the (at most
  three) anomalous grid budgets nearest the boundary: the anomaly's level next to the
  boundary, not its average, which a ramped plateau would misstate;
* for a change point, the mean level of each side's (at most three) nearest grid
  budgets in its own segment, carried along the trend's local slope: a curve with
  change points but no anomaly has no trend that follows its segments.

The levels are estimates; their variance (from the grid cells they rest on) is carried
into every probe's test (:class:`Boundary` ``line_var``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from regimes._refine.sprt import Noise

__all__ = ["SIDE_CELLS", "Boundary", "Component", "Line", "boundaries_from", "curve_noise"]


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
    """A boundary bracketed by two grid budgets, and the levels either side."""

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
    """Variance of the levels themselves (estimated from the grid cells next to the
    boundary), the larger of the two sides'."""

    def levels(self, budget: int) -> tuple[float, float]:
        """``(mu_left, mu_right)`` at ``budget``."""
        return self.left.at(budget), self.right.at(budget)

    def step(self) -> float:
        """Return the log step between the two levels in the middle of the bracket."""
        left, right = self.levels(int(round(0.5 * (self.low + self.high))))
        return right - left


def curve_noise(group_columns: list[str], groups: pl.DataFrame) -> dict[tuple[Any, ...], Noise]:
    """Return the noise of every curve read from the detection's ``groups`` table.

    The within-session and cell scales; the between-session scale of fresh processes
    is left at 0 here: it is estimated from every cell measured in several sessions,
    probes included, as they accumulate (:meth:`regimes._refine.design.Evidence.noise`).
    """
    out: dict[tuple[Any, ...], Noise] = {}
    for row in groups.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        out[key] = Noise(
            sigma_w=_finite(row.get("sigma_within")),
            sigma_s=0.0,
            tau=_finite(row.get("tau_between")),
        )
    return out


def _finite(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else 0.0


SIDE_CELLS = 3
"""Most grid cells that set a side's level next to a boundary (the nearest ones)."""


class _Found(NamedTuple):
    """A bracketed boundary of one curve, before it is tied to its components."""

    kind: str
    low: int
    high: int
    left: Line
    right: Line
    states: tuple[str, str]
    line_var: float


@dataclass(frozen=True)
class _CurveCells:
    """One curve's grid cells.

    Budgets, log trend, log ratio over it, level variance, segment, and whether the
    detection flagged each cell anomalous.
    """

    budgets: np.ndarray
    log_trend: np.ndarray
    log_ratio: np.ndarray
    var: np.ndarray
    segment: np.ndarray
    flagged: np.ndarray

    def index(self, budget: int) -> int:
        return int(np.searchsorted(self.budgets, budget))

    def local_slope(self, low: int) -> float:
        """Return the trend's slope in log-log near the boundary between ``low`` and ``low + 1``.

        The median of the slopes between consecutive cells within :data:`SIDE_CELLS` of
        the boundary on either side, the pair across the boundary left out: a detection's
        trend may bend where an anomaly starts (it is fitted to the normal cells and
        bridges the anomalous ones), and a side level carried along that bend would
        swallow the step it is meant to measure. The pair across the boundary is used
        only when it is the only one.
        """
        u = np.log(self.budgets.astype(float))
        first, last = max(0, low - SIDE_CELLS), min(u.size - 1, low + 1 + SIDE_CELLS)
        pairs = [k for k in range(first, last) if k != low]
        if not pairs:
            pairs = [low]
        slopes = [(self.log_trend[k + 1] - self.log_trend[k]) / (u[k + 1] - u[k]) for k in pairs]
        return float(np.median(slopes))

    def side_line(self, cells: list[int], anchor: int, slope: float) -> tuple[Line, float]:
        """Return the mean level of ``cells`` carried along ``slope`` to cell ``anchor``."""
        u = np.log(self.budgets.astype(float))
        level = self.log_trend[cells] + self.log_ratio[cells] + slope * (u[anchor] - u[cells])
        line = Line(float(self.budgets[anchor]), float(level.mean()), slope)
        return line, float(self.var[cells].mean() / len(cells))


def _cells_by_curve(
    table: pl.DataFrame, columns: list[str], trend: str, value: str, variance: Any
) -> dict[tuple[Any, ...], _CurveCells]:
    """Per curve of ``table`` (a detection ``curve`` or a ``speedup`` table): its cells.

    ``variance(key, part)`` gives the level variance of each of the curve's cells.
    """
    out = {}
    for part in table.partition_by(columns, maintain_order=True) if columns else [table]:
        part = part.sort("budget")
        key = tuple(part.get_column(c)[0] for c in columns)
        log_trend = np.log(part.get_column(trend).to_numpy())
        segment = (
            part.get_column("segment").to_numpy()
            if "segment" in part.columns
            else np.zeros(part.height, dtype=np.int64)
        )
        flagged = (
            part.get_column("anomalous").to_numpy()
            if "anomalous" in part.columns
            else np.zeros(part.height, dtype=bool)
        )
        out[key] = _CurveCells(
            part.get_column("budget").to_numpy(),
            log_trend,
            np.log(part.get_column(value).to_numpy()) - log_trend,
            variance(key, part),
            segment,
            flagged,
        )
    return out


def _interval_boundaries(
    row: dict[str, Any], cells: _CurveCells, states: tuple[str, str]
) -> tuple[list[_Found], list[str]]:
    """Bracket the onset and recovery of one anomalous interval.

    The onset's bracket runs from the grid budget before ``start_low`` to
    ``start_high``, the recovery's from ``end_low`` to the grid budget after
    ``end_high`` (:func:`_bounds`): every budget the detection's bootstrap could not
    place on one side is inside it, and the bisection decides it as a probe. Each
    side's level is the mean of its (at most :data:`SIDE_CELLS`) cells nearest the
    bracket, carried along the trend's local slope: inside the interval, and outside
    it up to the next flagged cell. Also return the reasons for the boundaries that
    have no bracket (at an end of the grid).
    """
    normal, odd = states
    found, missing = [], []
    i, j = cells.index(row["start"]), cells.index(row["end"])
    (first, onset), (recovery, last) = _bounds(row, cells, i, j)
    if i == 0:
        missing.append(f"the {odd} interval starting at {row['start']} starts the grid")
    else:
        outside = _unflagged(cells, range(first, max(-1, first - SIDE_CELLS), -1))
        inside = list(range(onset, max(onset + 1, min(onset + SIDE_CELLS, j + 1))))
        found.append(_sides(cells, "onset", (first, onset), outside, inside, states))
    if row["recovered"] and j + 1 < cells.budgets.size:
        inside = list(range(min(recovery, max(i, recovery - SIDE_CELLS + 1)), recovery + 1))
        outside = _unflagged(cells, range(last, min(cells.budgets.size, last + SIDE_CELLS)))
        found.append(_sides(cells, "recovery", (recovery, last), inside, outside, (odd, normal)))
    return found, missing


def _bounds(
    row: dict[str, Any], cells: _CurveCells, i: int, j: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Cell indices of the onset's and the recovery's brackets, ``(left, right)`` each.

    The detection bounds the first anomalous budget by ``start_low..start_high`` and
    the last by ``end_low..end_high``; the bracket widens each to the neighbouring grid
    budget on its normal side, so that its left end is on the boundary's left side and
    its right end on its right side, as the bisection needs. Without bounds (a speedup
    collapse) or with bounds that do not hold the interval's own start or end, the
    bracket is the one grid step around it. The bracket never leaves the grid.
    """
    last_cell = cells.budgets.size - 1
    low_start = cells.index(_bound(row, "start_low", i, cells))
    high_start = cells.index(_bound(row, "start_high", i, cells))
    low_end = cells.index(_bound(row, "end_low", j, cells))
    high_end = cells.index(_bound(row, "end_high", j, cells))
    if not low_start <= i <= high_start:
        low_start = high_start = i
    if not low_end <= j <= high_end:
        low_end = high_end = j
    onset = (max(0, low_start - 1), high_start)
    recovery = (low_end, min(last_cell, high_end + 1))
    return onset, recovery


def _bound(row: dict[str, Any], name: str, default: int, cells: _CurveCells) -> int:
    """Return the budget ``row[name]``, or the budget of cell ``default`` when it has none."""
    value = row.get(name)
    return int(cells.budgets[default]) if value is None else int(value)


def _unflagged(cells: _CurveCells, indices: range) -> list[int]:
    """Return the leading cells of ``indices`` up to the first one flagged anomalous."""
    out = []
    for k in indices:
        if cells.flagged[k]:
            break
        out.append(k)
    return out


def _sides(
    cells: _CurveCells,
    kind: str,
    bracket: tuple[int, int],
    left: list[int],
    right: list[int],
    states: tuple[str, str],
) -> _Found:
    """Bracket a boundary between cells ``bracket`` from each side's cells.

    The left level is anchored at the bracket's left cell, the right level at its
    right cell; the trend's slope is read next to the left cell.
    """
    low, high = bracket
    slope = cells.local_slope(low)
    left_line, left_var = cells.side_line(left, low, slope)
    right_line, right_var = cells.side_line(right, high, slope)
    return _Found(
        kind,
        int(cells.budgets[low]),
        int(cells.budgets[high]),
        left_line,
        right_line,
        states,
        max(left_var, right_var),
    )


def _change_boundary(cells: _CurveCells, i: int, after: tuple[int, int]) -> _Found:
    """Bracket a change between cells ``i - 1`` and ``i``.

    ``after``: the cells of ``after_low`` and ``after_high``, the detection's bounds on
    the first budget after the change; the bracket runs from the cell before the first
    to the second. Each side's level is the mean of its segment's (at most
    :data:`SIDE_CELLS`) cells nearest the bracket, carried along the trend's local
    slope. Bounds that do not hold ``i``, or leave a side no cell of its segment, give
    the one grid step around it.
    """
    same = cells.segment

    def sides(first: int, last: int) -> tuple[list[int], list[int]]:
        left = range(first - 1, max(-1, first - 1 - SIDE_CELLS), -1)
        right = range(last, min(same.size, last + SIDE_CELLS))
        return [k for k in left if same[k] == same[i - 1]], [k for k in right if same[k] == same[i]]

    first, last = (max(1, after[0]), after[1]) if after[0] <= i <= after[1] else (i, i)
    left, right = sides(first, last)
    if not left or not right:
        first, last = i, i
        left, right = sides(i, i)
    return _sides(cells, "change", (first - 1, last), left, right, ("before", "after"))


def boundaries_from(
    report: Any, speedup: Any, noise: dict[tuple[Any, ...], Noise]
) -> tuple[list[Boundary], list[dict[str, Any]]]:
    """Find every boundary of ``report`` (and of ``speedup`` when given).

    Also return the reasons for the ones that cannot be bracketed (rows with the group
    columns and ``reason``).
    """
    columns = list(report.group_columns)

    def variance(key: tuple[Any, ...], part: pl.DataFrame) -> np.ndarray:
        counts = zip(part.get_column("n"), part.get_column("n_sessions"), strict=True)
        return np.asarray([noise[key].level_variance(int(n), int(k)) for n, k in counts])

    cells = _cells_by_curve(report.curve, columns, "baseline", "median", variance)
    boundaries: list[Boundary] = []
    untested: list[dict[str, Any]] = []
    taken: set[tuple[tuple[Any, ...], int, int]] = set()
    for row in report.anomalies.iter_rows(named=True):
        key = tuple(row[c] for c in columns)
        found, missing = _interval_boundaries(row, cells[key], ("normal", "anomalous"))
        group = {c: row[c] for c in columns}
        untested += [group | {"reason": reason} for reason in missing]
        comps = (Component(key, 1.0, noise[key]),)
        boundaries += [_boundary("latency", group, f, comps) for f in found]
        taken.update(_grid_steps(cells[key], key, row))
    for row in report.change_points.filter(pl.col("significant")).iter_rows(named=True):
        key = tuple(row[c] for c in columns)
        if (key, row["x_before"], row["x_after"]) not in taken:
            c = cells[key]
            after = (
                c.index(_bound(row, "after_low", c.index(row["x_after"]), c)),
                c.index(_bound(row, "after_high", c.index(row["x_after"]), c)),
            )
            found_change = _change_boundary(c, c.index(row["x_after"]), after)
            group = {c: row[c] for c in columns}
            comps = (Component(key, 1.0, noise[key]),)
            boundaries.append(_boundary("latency", group, found_change, comps))
    if speedup is not None:
        more, reasons = _speedup_boundaries(speedup, columns, noise)
        boundaries += more
        untested += reasons
    return boundaries, untested


def _grid_steps(
    cells: _CurveCells, key: tuple[Any, ...], row: dict[str, Any]
) -> list[tuple[tuple[Any, ...], int, int]]:
    """Return the grid steps of an anomaly's onset and recovery, as change points name them.

    A change point at one of them is that boundary, already bracketed (from the
    anomaly's bounds, which may be wider than the step).
    """
    i, j = cells.index(row["start"]), cells.index(row["end"])
    b = cells.budgets
    steps = [(key, int(b[i - 1]), int(b[i]))] if i > 0 else []
    recovers = bool(row["recovered"]) and j + 1 < b.size
    return steps + ([(key, int(b[j]), int(b[j + 1]))] if recovers else [])


def _boundary(
    source: str, group: dict[str, Any], found: _Found, components: tuple[Component, ...]
) -> Boundary:
    return Boundary(
        source, group, found.kind, found.low, found.high, components, found.left,
        found.right, found.states[0], found.states[1], found.line_var,
    )  # fmt: skip


def _speedup_boundaries(
    speedup: Any, group_columns: list[str], noise: dict[tuple[Any, ...], Noise]
) -> tuple[list[Boundary], list[dict[str, Any]]]:
    """Find the onset and recovery of each speedup collapse.

    The statistic is cache-off level minus cache-on level, so its components are the
    two curves with signs +1 and -1.
    """
    columns = list(speedup.group_columns)

    def curves(key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        group = dict(zip(columns, key, strict=True))
        return [
            tuple((cache if c == "use_cache" else group[c]) for c in group_columns)
            for cache in (False, True)
        ]

    def variance(key: tuple[Any, ...], part: pl.DataFrame) -> np.ndarray:
        off, on = curves(key)
        if off not in noise or on not in noise:
            return np.full(part.height, np.nan)
        counts = zip(part.get_column("off_n"), part.get_column("on_n"), strict=True)
        return np.asarray(
            [noise[off].level_variance(a, 1) + noise[on].level_variance(b, 1) for a, b in counts]
        )

    cells = _cells_by_curve(speedup.speedup, columns, "trend", "speedup", variance)
    boundaries: list[Boundary] = []
    untested: list[dict[str, Any]] = []
    for row in speedup.collapses.iter_rows(named=True):
        key = tuple(row[c] for c in columns)
        group = {c: row[c] for c in columns}
        off, on = curves(key)
        if off not in noise or on not in noise:
            untested.append(group | {"reason": "no detection of one cache setting's curve"})
            continue
        found, missing = _interval_boundaries(row, cells[key], ("normal", "collapsed"))
        untested += [group | {"reason": reason} for reason in missing]
        comps = (Component(off, 1.0, noise[off]), Component(on, -1.0, noise[on]))
        boundaries += [_boundary("speedup", group, f, comps) for f in found]
    return boundaries, untested
