"""The charts of a report, each with its heading and a sentence on how to read it.

Each draws what a :class:`regimes.analysis.RunAnalysis` holds; none runs an analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl

from regimes import _findings
from regimes.analysis import is_instrumented
from regimes.viz import _style as style
from regimes.viz import charts as plot
from regimes.viz._frames import GROUP_FIELD, group_labels, report_axes


@dataclass(frozen=True)
class ChartSection:
    """A chart in the report with its heading and a sentence on how to read it."""

    key: str
    title: str
    caption: str
    chart: alt.TopLevelMixin


def comparison_section(comparison: Any) -> ChartSection:
    """Draw the run against the base run, both runs' medians and regimes."""
    caption = (
        "The base run in grey, this run in blue: medians with their CI bands, each run's "
        "regimes shaded in its colour, and each regime's status written at its foot with "
        "its ratio over trend, new over base. The strip is this run's level over the base's."
    )
    chart = plot.comparison_chart(comparison)
    return ChartSection("comparison", "Against the base run", caption, chart)


def chart_sections(analysis: Any, limits: tuple[int, int], notes: list[str]) -> list[ChartSection]:
    """Every chart the analysis supports, in page order.

    ``limits``: the most latency panels and the fewest groups for the heatmap. Budgets
    the run probed off its grid are marked in the latency chart; a comparison with a
    base run comes second when some curve of this run matches one of the base's.
    """
    regimes, speedup, trials = analysis.detection, analysis.speedup, analysis.trials
    probes = analysis.probes
    x, y, group_columns = report_axes(regimes)
    max_panels, heatmap_min_groups = limits
    labels, _ = group_labels(regimes.curve, group_columns)
    charts = [_latency_section(regimes, trials, labels, max_panels, notes, probes)]
    comparison = analysis.comparison
    if comparison is not None and comparison.shift.height:
        charts.append(comparison_section(comparison))
    if labels.height >= heatmap_min_groups:
        caption = (
            f"Colour is the median {style.quantity(y)} over its smooth trend (log "
            "scale; orange slower, blue faster); anomalous intervals are outlined."
        )
        overview = plot.overview_heatmap(regimes)
        charts.append(ChartSection("heatmap", "Every group against its trend", caption, overview))
    if speedup is not None:
        caption = (
            "Cache-off over cache-on latency with its CI; shaded: significant collapses below "
            "the speedup trend, labelled with their ratio and CI; the grey rule is 1× (no gain)."
        )
        chart = plot.speedup_chart(speedup, x=x)
        charts.append(ChartSection("speedup", "KV-cache speedup", caption, chart))
    if is_instrumented(trials):
        caption = (
            "Median prefill and decode time stacked per budget; the tick is the median "
            "end-to-end latency."
        )
        chart = plot.phase_chart(trials, x=x, by=group_columns)
        charts.append(ChartSection("phases", "Prefill and decode", caption, chart))
    return charts


def _latency_section(
    regimes: Any,
    trials: pl.DataFrame,
    labels: pl.DataFrame,
    max_panels: int,
    notes: list[str],
    probes: Sequence[int],
) -> ChartSection:
    x, y, group_columns = report_axes(regimes)
    order = labels[GROUP_FIELD].to_list()
    shown: list[str] | None = None
    if len(order) > max_panels:
        flagged = _findings.labelled(regimes.anomalies, group_columns, labels)
        strongest = (
            flagged.group_by(GROUP_FIELD)
            .agg(pl.col("ratio").log().abs().max().alias("s"))
            .sort("s", descending=True)[GROUP_FIELD]
            .to_list()
        )
        shown = (strongest + [g for g in order if g not in strongest])[:max_panels]
        notes.append(
            f"The latency chart shows {max_panels} of {len(order)} groups (those with the "
            "strongest anomalies first); the heatmap shows them all."
        )
    caption = (
        "Faint points: trials. Line and band: median and its CI. Dashed: the "
        "smooth trend. Shaded: significant anomalies, labelled with their ratio over the "
        "trend and its CI. Orange rules: change points. Drag across the strip below the "
        "panels to zoom into a boundary; the menu under the chart shows one group."
    )
    if probes:
        caption += " Diamonds: budgets probed off the grid to refine a boundary."
    title = f"{style.quantity(y).capitalize()} by {style.quantity(x)}"
    chart = plot.latency_chart(regimes, trials, groups=shown, probes=probes)
    return ChartSection("latency", title, caption, chart)


@dataclass(frozen=True)
class Refinement:
    """The boundary refinement a run holds: the result read back and its chart."""

    result: Any
    chart: alt.TopLevelMixin
    caption: str


def refinement_section(result: Any) -> Refinement | None:
    """Draw the boundary refinement read back from a run's probes (``None``: none)."""
    if result is None:
        return None
    caption = (
        "Each refined curve: faint points are trials, black points the grid budgets' "
        "medians, coloured shapes the probes' medians by decision. The light band is a "
        "boundary's grid bracket, the dark one (between two rules) its refined bracket, "
        "labelled kind low|high. Drag across the strip to zoom into a bracket."
    )
    return Refinement(result, plot.refine_chart(result), caption)
