"""The anomaly table: one schema for every analysis that reports intervals.

:func:`regimes.detect_regimes` reports anomalies and :func:`regimes.cache_speedup`
collapses; both are intervals of ``x`` tested against their flank trend, reported in
the same columns after the group columns (:data:`ANOMALY_COLUMNS`), and read back by
the explanation modules.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import polars as pl

__all__ = ["ANOMALY_COLUMNS", "Interval", "anomaly_frame", "anomaly_schema", "x_value"]

ANOMALY_COLUMNS: dict[str, Any] = {
    "start": None,
    "end": None,
    "peak_x": None,
    "ratio": pl.Float64,
    "ratio_low": pl.Float64,
    "ratio_high": pl.Float64,
    "p_value": pl.Float64,
    "q_value": pl.Float64,
    "recovered": pl.Boolean,
    "kind": pl.String,
    "n_points": pl.Int64,
    "caveat": pl.String,
}
"""Columns of an anomaly table after the group columns; ``None`` takes the x dtype."""


class Interval(NamedTuple):
    """One reported interval, positions as cell indices into ``xs`` of its curve."""

    start: int
    end: int
    peak: int
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    q_value: float
    recovered: bool | None
    kind: str
    caveat: str | None = None
    """Where simulation shows the interval short of its level or the ratio biased."""


def anomaly_schema(x_dtype: pl.DataType) -> dict[str, Any]:
    """:data:`ANOMALY_COLUMNS` with the position columns in ``x_dtype``."""
    return {name: x_dtype if dtype is None else dtype for name, dtype in ANOMALY_COLUMNS.items()}


def x_value(value: float, dtype: pl.DataType) -> int | float:
    """Return a position as a Python number of the x column's kind."""
    return int(value) if dtype.is_integer() else float(value)


def _row(interval: Interval, xs: np.ndarray, x_dtype: pl.DataType) -> list[Any]:
    return [
        x_value(xs[interval.start], x_dtype),
        x_value(xs[interval.end], x_dtype),
        x_value(xs[interval.peak], x_dtype),
        float(interval.ratio),
        float(interval.ratio_low),
        float(interval.ratio_high),
        float(interval.p_value),
        float(interval.q_value),
        None if interval.recovered is None else bool(interval.recovered),
        str(interval.kind),
        int(interval.end - interval.start + 1),
        interval.caveat,
    ]


def anomaly_frame(
    keyed: list[tuple[list[Any], Interval, np.ndarray]],
    group_schema: dict[str, Any],
    x_dtype: pl.DataType,
) -> pl.DataFrame:
    """Build the anomaly table of ``(group values, interval, xs of its curve)`` triples."""
    rows = [[*key, *_row(interval, xs, x_dtype)] for key, interval, xs in keyed]
    return pl.DataFrame(rows, schema={**group_schema, **anomaly_schema(x_dtype)}, orient="row")
