"""The result of :func:`regimes.detect_regimes`: its tables and their text report."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import polars as pl

from regimes._labels import label_columns, text_label
from regimes._result import INTERVAL_LEAD_COLUMNS, AnalysisResult
from regimes._summary import Column, Summary, number

__all__ = ["RegimeResult"]


@dataclass(frozen=True, repr=False)
class RegimeResult(AnalysisResult):
    """Result of :func:`detect_regimes`.

    Attributes
    ----------
    curve : polars.DataFrame
        Per group and ``x``: ``n``, ``n_sessions``, ``median``, ``ci_low``, ``ci_high``
        (t interval of the median), ``baseline`` (smooth trend at ``x``: the
        flank trend inside anomalies, a robust fit of the other cells elsewhere),
        ``ratio`` (median / baseline), ``segment`` and ``anomalous``.
    change_points : polars.DataFrame
        Per group, each segment boundary: ``x_before``, ``x_after``, ``ratio`` (level
        after / before, along the trend) with ``ratio_low``, ``ratio_high``, two-sided
        ``p_value`` (scan-adjusted), ``q_value`` (BH over the call) and ``significant``.
    anomalies : polars.DataFrame
        Significant regimes only: ``start``, ``end`` (inclusive ``x``), ``peak_x``,
        ``ratio`` (mean level over its cells, over the trend of its normal flanks,
        less the cells of regimes that could be reported on their own (docs/method.md,
        section 3); a regime nested in another is measured against the enclosing one,
        unless it is a peak at that one's onset or end: then the two are side by side)
        with ``ratio_low``,
        ``ratio_high`` (the interval named by ``ratio_interval``: ``bootstrap``, the
        selection re-done in each draw, or ``t``, the regime held fixed), the TREAT
        ``p_value`` against ``min_ratio`` (scan-adjusted),
        ``q_value``, ``recovered``, ``kind`` (``spike``: comes back; ``step``: runs to
        the end of the grid; ``edge``: one cell at an end, ``recovered`` null),
        ``n_points`` and ``caveat``: null, or what simulation showed of an anomaly so
        placed (at the first budgets, or next to another; docs/method.md, Known
        limits), as ``summary()`` prints it.
    groups : polars.DataFrame
        Per group: cells, trials, noise components, the trend's degrees of freedom
        (``trend_df``) and where it changes slope, if it does (``slope_change_at``, the
        ``x`` of the hinge, and ``slope_before``, ``slope_after``: the trend's mean
        slope of log ``y`` over log ``x`` on either side; null without a hinge),
        ``drift``, counts of findings and a ``note``.
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
        KV lengths for the first time (:func:`regimes.explain.history.detection_note`),
        computed when first read.
    source : polars.DataFrame or pandas.DataFrame or None
        The trial table the call was given, for ``history_note``.
    """

    _tables: ClassVar[tuple[str, ...]] = ("anomalies", "change_points", "curve", "groups")
    _title: ClassVar[str] = "Regime detection"
    _lead_columns: ClassVar[tuple[str, ...] | None] = INTERVAL_LEAD_COLUMNS

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
    sensitivity: pl.DataFrame = field(default_factory=pl.DataFrame)
    first_trials: pl.DataFrame = field(default_factory=pl.DataFrame)
    source: Any = field(default=None, repr=False, compare=False)

    @cached_property
    def history_note(self) -> str | None:
        """Which anomalies process history explains, or may explain.

        Computed when first read (fitting each anomalous curve's process history costs
        more than the detection itself), from ``source``, the trial table of the call
        (:func:`regimes.explain.history.detection_note`); ``None`` without one.
        """
        if self.source is None:
            return None
        from regimes.explain.history import detection_note

        return detection_note(self, self.source)

    @cached_property
    def _label_columns(self) -> list[str]:
        """The group columns that tell this call's groups apart, found once.

        Counting distinct values per labelled row made ``summary()`` quadratic in the
        number of groups (100,000 groups took longer than their detection).
        """
        return label_columns(self.groups, self.group_columns)

    def _label(self, row: dict[str, Any]) -> str:
        """Label a group by the columns that tell this call's groups apart."""
        return text_label(row, self._label_columns)

    def _header(self) -> list[tuple[str, str]]:
        p = self.params
        n_trials = int(self.groups.get_column("n_trials").sum()) if self.groups.height else 0
        n_cells = int(self.groups.get_column("n_cells").sum()) if self.groups.height else 0
        significant = self.change_points.filter(pl.col("significant")).height
        return [
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
                "Intervals:",
                f"ratio {p.get('ratio_interval', 't')}, level={p.get('level')}, "
                f"BH per {p.get('fdr')}",
            ),
        ]

    def _headlines(self) -> list[str]:
        """Return the command line's headline per anomaly (or that none was found)."""
        from regimes._findings import headlines

        return headlines(self)

    def _empty_text(self) -> str:
        """Return why the notebook view's anomaly table is empty."""
        return f"No anomaly: {self._no_anomaly_text()}."

    def _no_anomaly_text(self) -> str:
        """Why the anomaly table is empty: nothing found, or nothing testable."""
        if self.untested.height and self.untested.height == self.groups.height:
            reasons = "; ".join(sorted(set(self.untested.get_column("reason").to_list())))
            return f"not testable here: {reasons}"
        return "none at q < alpha with ratio >= min_ratio"

    def _summary(self) -> Summary:
        """Return the call, the groups, the anomalies and change points, notes, the untested."""
        out = Summary().add_title(self._title).add_pairs(self._header())
        grouped = ", ".join(self.group_columns) or "nothing (one curve)"
        out.add_pairs([("Grouped by:", grouped)], columns=1)
        out.add_heading("Anomalies", above="=")
        anomalies = self.anomalies.iter_rows(named=True)
        out.add_table(anomalies, self._columns("interval"), empty=self._no_anomaly_text())
        out.add_heading("Change points")
        points = self.change_points.iter_rows(named=True)
        out.add_table(points, self._columns("between"), empty="none")
        for row in self.anomalies.filter(pl.col("caveat").is_not_null()).iter_rows(named=True):
            where = f"{row['start']}..{row['end']} ({self._label(row)})"
            out.add_wrapped(f"Note: {where} {row['caveat']}.")
        out.add_rule("=")
        out.add_untested(self.untested, head=None, indent="Not testable here: ", label=self._label)
        if self.history_note:
            out.add_wrapped(f"History: {self.history_note}")
        return out

    def _columns(self, where: str) -> list[Column]:
        """Return the columns of the anomaly (``interval``) or change point table."""
        locate, last, describe = _WHERE[where]
        return [
            Column("group", self._label, width=34, align="<", clip=33),
            Column(where, locate, width=16),
            Column("ratio", number("ratio", ".3g"), width=8),
            Column("[CI]", _ci, width=18),
            Column("p", number("p_value", ".2g"), width=9),
            Column("q", number("q_value", ".2g"), width=9),
            Column(last, describe, align="<", gap=2),
        ]

    def __str__(self) -> str:
        return self.summary()


def _ci(row: dict[str, Any]) -> str:
    return f"[{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"


def _interval(row: dict[str, Any]) -> str:
    return f"{row['start']}..{row['end']}"


def _kind(row: dict[str, Any]) -> str:
    return f"{row['kind']}{'' if row['recovered'] else ' (no recovery)'}"


def _between(row: dict[str, Any]) -> str:
    return f"{row['x_before']}|{row['x_after']}"


def _star(row: dict[str, Any]) -> str:
    return "*" if row["significant"] else ""


_WHERE = {"interval": (_interval, "kind", _kind), "between": (_between, "sig", _star)}
"""Per table of the summary: where a row lies, the last column's heading and its text."""
