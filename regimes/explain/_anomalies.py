"""A detection report's anomalies, read as the input of the explanation modules.

:func:`regimes.detect_regimes` returns a report whose ``anomalies`` frame holds the group
columns, then ``start``, ``end`` (inclusive bounds on ``x``) and the interval's statistics.
The explanation modules (phases, memory, backends, alignment) all need the same three
facts from it: which columns form a group, which column is ``x``, and which trial rows
fall inside each anomaly. They are read here once, with clear errors when the report is
not one; when no report is given, :func:`regimes.explain._source.anomaly_source` runs
the detection itself with the caller's ``x``, ``y``, ``by`` and bootstrap options.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from regimes.data.schema import RegimesInputError

__all__ = [
    "ANOMALY_FIELDS",
    "AnomalyInput",
    "frame_columns",
    "read_report",
]

ANOMALY_FIELDS: tuple[str, ...] = (
    "start",
    "end",
    "peak_x",
    "ratio",
    "ratio_low",
    "ratio_high",
    "p_value",
    "q_value",
    "recovered",
    "kind",
)
"""Columns of the anomalies frame that describe the interval rather than the group."""


class AnomalyInput:
    """The parts of a detection report the explanation modules use.

    ``anomalies`` gets an ``anomaly`` column: a 0-based index that names each interval in
    every explanation result, so rows of different results can be joined.
    """

    def __init__(self, anomalies: pl.DataFrame, group_columns: list[str], x: str, y: str):
        self.anomalies = anomalies
        self.group_columns = group_columns
        self.x = x
        self.y = y

    def rows_of(self, frame: pl.DataFrame, anomaly: dict[str, Any]) -> pl.DataFrame:
        """Trial rows of ``frame`` in the anomaly's group (all x, inside and outside)."""
        if not self.group_columns:
            return frame
        return frame.filter(
            pl.all_horizontal(
                [
                    pl.col(c).eq_missing(pl.lit(anomaly[c], dtype=frame.schema[c]))
                    for c in self.group_columns
                ]
            )
        )

    def groups(self) -> list[tuple[dict[str, Any], pl.DataFrame]]:
        """Each group that has anomalies, with its anomalies ordered by ``start``."""
        if self.anomalies.height == 0:
            return []
        if not self.group_columns:
            return [({}, self.anomalies.sort("start"))]
        keyed = self.anomalies.partition_by(self.group_columns, maintain_order=True, as_dict=True)
        return [
            (dict(zip(self.group_columns, key, strict=True)), part.sort("start"))
            for key, part in keyed.items()
        ]


def read_report(report: Any, frame_columns: list[str]) -> AnomalyInput:
    """Read ``report.anomalies`` and its group columns and axes.

    Group columns are taken from the report when it names them (``group_columns`` or
    ``by``) and otherwise are the anomaly columns that are not interval fields. They must
    all be columns of the trial table, or no trial row could be matched to an anomaly.
    """
    anomalies = getattr(report, "anomalies", None)
    if not isinstance(anomalies, pl.DataFrame):
        raise RegimesInputError(
            "expected a detection report (the result of regimes.detect_regimes) with an "
            f"'anomalies' polars frame; got {type(report).__name__}"
        )
    missing = [c for c in ("start", "end") if c not in anomalies.columns]
    if missing:
        raise RegimesInputError(
            f"the report's anomalies frame lacks column(s) {missing}; it has {anomalies.columns}"
        )
    x = getattr(report, "x", None) or "budget"
    y = getattr(report, "y", None) or "latency_s"
    named = getattr(report, "group_columns", None)
    if named is None:
        named = getattr(report, "by", None)
    if named is None:
        named = [c for c in anomalies.columns if c not in ANOMALY_FIELDS and c != "anomaly"]
    group_columns = [str(c) for c in named]
    absent = [c for c in group_columns if c not in frame_columns]
    if absent:
        raise RegimesInputError(
            "the report groups by column(s) the trial table lacks: "
            + ", ".join(repr(c) for c in absent)
            + "; pass the same table the report was computed from"
        )
    ordered = (
        anomalies.sort([*group_columns, "start"])
        .with_row_index("anomaly")
        .with_columns(pl.col("anomaly").cast(pl.Int64))
    )
    return AnomalyInput(ordered, group_columns, str(x), str(y))


def frame_columns(df: Any) -> list[str]:
    """Return the column names of a polars or pandas frame (empty for anything else)."""
    return [str(c) for c in getattr(df, "columns", [])]
