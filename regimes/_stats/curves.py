"""Curves: the trials of one group along ``x``, indexed once for every analysis.

A *curve* is one group of case columns (a model on a backend with the cache on, say)
measured along ``x``; a *cell* is one ``x`` of one curve. The analyses number their
curves the same way (:func:`index_curves`: groups sorted by their values, nulls last),
give each trial its curve id ``_curve`` and a float ``_x``, and after reducing trials
to cells keep each curve's cells contiguous and sorted by ``x`` (:func:`curve_slices`).
One curve's cells on the log scale travel as a :class:`Curve` (before its between-cell
variance is known) or a :class:`CurveEstimates` (with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from regimes._stats.trends import trend_coordinate

__all__ = [
    "Curve",
    "CurveEstimates",
    "CurveIndex",
    "curve_from_levels",
    "curve_slices",
    "index_curves",
]


@dataclass(frozen=True)
class CurveIndex:
    """Trials with their curve id, and the table of curves.

    ``frame``: the trials with ``_curve`` (Int64) and ``_x`` (``x`` as Float64);
    ``groups``: one row per curve, ``_curve`` then ``group_columns``.
    """

    frame: pl.DataFrame
    groups: pl.DataFrame
    group_columns: list[str]


def index_curves(frame: pl.DataFrame, group_columns: Sequence[str], x: str) -> CurveIndex:
    """Index the curves of ``frame``: give every trial its curve id.

    Groups are sorted by value, nulls last (one curve 0 without group columns); attach ``_curve``
    and ``_x`` to every trial.
    """
    group_columns = list(group_columns)
    if group_columns:
        groups = (
            frame.select(group_columns)
            .unique()
            .sort(group_columns, nulls_last=True)
            .with_row_index("_curve")
            .with_columns(pl.col("_curve").cast(pl.Int64))
        )
        frame = frame.join(groups, on=group_columns, how="left", nulls_equal=True)
    else:
        groups = pl.DataFrame({"_curve": [0]}, schema={"_curve": pl.Int64})
        frame = frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("_curve"))
    frame = frame.with_columns(pl.col(x).cast(pl.Float64).alias("_x"))
    return CurveIndex(frame=frame, groups=groups, group_columns=group_columns)


def curve_slices(curve_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(starts, stops)`` of each curve's run in curve ids sorted by curve."""
    bounds = np.flatnonzero(np.diff(curve_ids)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [curve_ids.size]])
    return starts, stops


class Curve(NamedTuple):
    """One curve's cells in increasing x, on the log scale.

    Positions, trend coordinate, log levels with their sampling variances and df (from
    :func:`regimes._stats.levels.cell_levels`).
    """

    x: np.ndarray
    u: np.ndarray
    level: np.ndarray
    var: np.ndarray
    df: np.ndarray


def curve_from_levels(cells: pl.DataFrame, x: str = "_x") -> Curve:
    """Build a :class:`Curve` from one curve's rows of ``cell_levels`` output.

    The trend coordinate is :func:`regimes._stats.trends.trend_coordinate` of the
    curve's own ``x``.
    """
    cells = cells.sort(x)
    xs = cells.get_column(x).to_numpy()
    return Curve(
        xs, trend_coordinate(xs), *(cells.get_column(c).to_numpy() for c in ("level", "var", "df"))
    )


@dataclass(frozen=True)
class CurveEstimates:
    """One curve's cells on the log scale, in increasing ``x`` (``u`` = trend coordinate).

    ``tau2`` (df ``tau2_df``) is the curve's between-cell variance.
    """

    u: np.ndarray
    level: np.ndarray
    var: np.ndarray
    df: np.ndarray
    tau2: float
    tau2_df: float

    @property
    def total_var(self) -> np.ndarray:
        """Sampling plus between-cell variance of each cell."""
        return self.var + self.tau2
