"""The result of :func:`regimes.detect_regimes`: its tables and their text report."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import polars as pl

from regimes._result import INTERVAL_LEAD_COLUMNS, AnalysisResult

__all__ = ["RegimeReport", "RegimeResult"]

_WIDTH = 96


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
        ``ratio`` (level over the trend of its normal flanks; a regime nested in
        another is measured against the enclosing one) with ``ratio_low``,
        ``ratio_high``, the TREAT ``p_value`` against ``min_ratio`` (scan-adjusted),
        ``q_value``, ``recovered``, ``kind`` (``spike``: comes back; ``step``: runs to
        the end of the grid; ``edge``: one cell at an end, ``recovered`` null),
        ``n_points`` and ``caveat``: null, or what simulation showed of an anomaly so
        placed (at the first budgets, or next to another; docs/method.md, Known
        limits), as ``summary()`` prints it.
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
        varying = [c for c in self.group_columns if self.groups.get_column(c).n_unique() > 1]
        return varying or [c for c in ("model",) if c in self.group_columns]

    def _label(self, row: dict[str, Any]) -> str:
        """Label a group by the columns that tell this call's groups apart."""
        return ", ".join(f"{c}={row[c]}" for c in self._label_columns) or "all rows"

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
            ("Intervals:", f"t, level={p.get('level')}, BH per {p.get('fdr')}"),
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
        for row in self.anomalies.filter(pl.col("caveat").is_not_null()).iter_rows(named=True):
            where = f"{row['start']}..{row['end']} ({self._label(row)})"
            lines += textwrap.wrap(f"Note: {where} {row['caveat']}.", _WIDTH)
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
