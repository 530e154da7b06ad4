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


_SHARED_OPTIONS = ("alpha", "min_ratio", "n_boot", "seed", "level", "penalty", "session")
"""Options of ``detect_regimes`` that ``cache_speedup`` takes too (not ``direction``)."""


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
) -> list[ChartSection]:
    """Every chart the data supports, in page order."""
    x, y, group_columns = report_axes(regimes)
    max_panels, heatmap_min_groups = limits
    labels, _ = group_labels(regimes.curve, group_columns)
    charts = [_latency_section(regimes, trials, labels, max_panels, notes)]
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
    regimes: Any, trials: pl.DataFrame, labels: pl.DataFrame, max_panels: int, notes: list[str]
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
    title = f"{style.quantity(y).capitalize()} by {style.quantity(x)}"
    chart = plot.latency_chart(regimes, trials, groups=shown)
    return ChartSection("latency", title, caption, chart)
