"""The charts of a report, each with its heading and a sentence on how to read it.

Also the analyses the charts need beyond the detection: the KV-cache speedup and the
comparison with a base run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl

from regimes.errors import RegimesInputError
from regimes.viz import _findings
from regimes.viz import _style as style
from regimes.viz import charts as plot
from regimes.viz._explanations import is_instrumented
from regimes.viz._frames import GROUP_FIELD, group_labels, report_axes


@dataclass(frozen=True)
class ChartSection:
    """A chart in the report with its heading and a sentence on how to read it."""

    key: str
    title: str
    caption: str
    chart: alt.TopLevelMixin


_SHARED_OPTIONS = ("alpha", "min_ratio", "level", "session")
"""Options of ``detect_regimes`` that ``cache_speedup`` takes too (not ``direction`` nor
``penalty``, nor the bootstrap's ``n_boot`` and ``seed``: the speedup draws nothing)."""


def try_speedup(
    trials: pl.DataFrame,
    axes: tuple[str, str],
    by: Sequence[str] | None,
    detect_options: dict[str, Any],
    notes: list[str],
) -> Any:
    """Return the cache speedup when both cache settings were measured, else ``None``."""
    if "use_cache" not in trials.columns or trials["use_cache"].drop_nulls().n_unique() < 2:
        return None
    from regimes.speedup import cache_speedup

    options = {k: v for k, v in detect_options.items() if k in _SHARED_OPTIONS}
    speedup_by = None if by is None else [c for c in by if c != "use_cache"]
    try:
        return cache_speedup(trials, x=axes[0], y=axes[1], by=speedup_by, **options)
    except RegimesInputError as exc:  # e.g. no budget measured both ways
        notes.append(f"KV-cache speedup not analysed: {exc}")
        return None


_COMPARE_OPTIONS = ("alpha", "min_ratio", "n_boot", "seed", "level")
"""Options of ``detect_regimes`` that ``compare_runs`` takes too."""


def compare(
    base: pl.DataFrame,
    trials: pl.DataFrame,
    axes: tuple[str, str],
    by: Sequence[str] | None,
    detect_options: dict[str, Any],
) -> Any:
    """Compare the run's trials with the base run's, each detected with the same options."""
    from regimes.compare import compare_runs

    options = {k: v for k, v in detect_options.items() if k in _COMPARE_OPTIONS}
    return compare_runs(base, trials, x=axes[0], y=axes[1], by=by, **options)


def comparison_section(comparison: Any) -> ChartSection:
    caption = (
        "The base run in grey, this run in blue: medians with their CI bands, each run's "
        "regimes shaded in its colour, and each regime's status written at its foot with "
        "its ratio over trend, new over base. The strip is this run's level over the base's."
    )
    chart = plot.comparison_chart(comparison)
    return ChartSection("comparison", "Against the base run", caption, chart)


def chart_sections(
    regimes: Any,
    speedup: Any,
    trials: pl.DataFrame,
    limits: tuple[int, int],
    notes: list[str],
    probes: Sequence[int] = (),
) -> list[ChartSection]:
    """Every chart the data supports, in page order.

    ``probes``: budgets measured off the run's grid, marked in the latency chart.
    """
    x, y, group_columns = report_axes(regimes)
    max_panels, heatmap_min_groups = limits
    labels, _ = group_labels(regimes.curve, group_columns)
    charts = [_latency_section(regimes, trials, labels, max_panels, notes, probes)]
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


_REFINE_OPTIONS = ("alpha", "min_ratio", "n_boot", "seed")
"""Options of ``detect_regimes`` that ``refine_boundaries`` takes too."""


def probe_budgets(trials: pl.DataFrame, meta: dict[str, Any]) -> list[int]:
    """Return the budgets measured off the spec's grid (refinement probes), sorted.

    Empty when the run has no spec grid (``meta.json`` ``spec.budgets``) or none off it.
    """
    grid = (meta.get("spec") or {}).get("budgets")
    if not grid or "budget" not in trials.columns:
        return []
    present = trials.get_column("budget").drop_nulls().unique().to_list()
    return sorted(set(present) - set(grid))


def refinement(
    trials: pl.DataFrame,
    meta: dict[str, Any],
    detect_options: dict[str, Any],
    notes: list[str],
) -> Refinement | None:
    """Read back the refinement of a run that holds probes off its grid, else ``None``.

    The brackets come from the probes on disk (:func:`regimes.refine_boundaries` with
    no generation allowed): nothing is measured and no collector is loaded. A run
    without probes costs nothing here.
    """
    if not probe_budgets(trials, meta):
        return None
    from regimes.refine import refine_boundaries

    options = {k: v for k, v in detect_options.items() if k in _REFINE_OPTIONS}
    grid = meta["spec"]["budgets"]
    try:
        result = refine_boundaries(trials, grid=grid, max_generations=0, **options)
    except RegimesInputError as exc:
        notes.append(f"Boundary refinement not shown: {exc}")
        return None
    if result.boundaries.height == 0:
        notes.append(
            "The run holds budgets off its grid, but the grid shows no boundary to refine."
        )
        return None
    caption = (
        "Each refined curve: faint points are trials, black points the grid budgets' "
        "medians, coloured shapes the probes' medians by decision. The light band is a "
        "boundary's grid bracket, the dark one (between two rules) its refined bracket, "
        "labelled kind low|high. Drag across the strip to zoom into a bracket."
    )
    return Refinement(result, plot.refine_chart(result), caption)


def refinement_findings(result: Any) -> list[str]:
    """One sentence per refined boundary: its bracket, where it started, its cost."""
    lines = []
    label_columns = result.params.get("label_columns", [])
    for row in result.boundaries.iter_rows(named=True):
        who = " · ".join(str(row[c]) for c in label_columns if row.get(c) is not None)
        what = "KV-cache speedup" if row["source"] == "speedup" else "latency"
        where = (
            f"lies between budgets {row['low']} and {row['high']}"
            if row["resolved"]
            else f"is still open between budgets {row['low']} and {row['high']} ({row['status']})"
        )
        lines.append(
            f"{who + ': ' if who else ''}the {what} {row['kind']} {where}, refined from the "
            f"grid's {row['grid_low']}–{row['grid_high']} with {row['probes']} probe(s), "
            f"{row['generations']} generation(s)."
        )
    return lines
