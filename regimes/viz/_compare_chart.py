"""The chart of a run comparison: both runs' curves, the regimes of each, what changed.

One panel per matched curve: each run's median latency per budget with its confidence
band (base and new in two colours), each run's regimes shaded in its colour, and every
regime's status between the runs written at its foot (``vanished ×0.33``). It is drawn
from a :class:`regimes.ComparisonResult` alone (the two detections travel with it).

Hook for the HTML report: ``regimes report`` given two runs adds a comparison section
whose chart is ``comparison_chart(regimes.compare_runs(base, new))``.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from regimes.viz.charts import (
    _FACET_HEIGHT,
    GROUP_FIELD,
    _cell_edges,
    _facet,
    _interval_edges,
    _stack_parts,
    group_labels,
)

__all__ = ["comparison_chart"]

RUN_COLORS = {"base": "#7f7f7f", "new": "#1f77b4"}
"""Colour of each run: the base in grey, the new run in blue."""


def _runs_part(result: Any, columns: list[str], labels: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Curve cells and regimes of both runs, labelled with their run and group."""
    x = result.x
    curves, regimes = [], []
    for run, report in (("base", result.base_report), ("new", result.new_report)):
        curve = report.curve.select([*columns, x, "median", "ci_low", "ci_high"])
        curve = (
            curve.join(labels, on=columns, how="inner", nulls_equal=True)
            if columns
            else (curve.with_columns(pl.lit("all").alias(GROUP_FIELD)))
        )
        curves.append(curve.with_columns(pl.lit(run).alias("run")))
        edges = _cell_edges(report.curve, columns, x)
        spans = _interval_edges(
            report.anomalies.select([*columns, "start", "end", "ratio"]), edges, columns, x
        )
        spans = (
            spans.join(labels, on=columns, how="inner", nulls_equal=True)
            if columns
            else (spans.with_columns(pl.lit("all").alias(GROUP_FIELD)))
        )
        regimes.append(spans.with_columns(pl.lit(run).alias("run")))
    return {
        "curve": pl.concat(curves, how="diagonal_relaxed").rename({x: "x"}),
        "regime": pl.concat(regimes, how="diagonal_relaxed"),
    }


def _status_part(result: Any, columns: list[str], labels: pl.DataFrame) -> pl.DataFrame:
    """One label per regime: its status and ratio of ratios, under its interval."""
    changes = result.changes
    ratio = pl.col("ratio_of_ratios").round_sig_figs(3).cast(pl.String)
    text = pl.concat_str(
        [
            pl.col("status"),
            pl.when(ratio.is_not_null()).then(pl.lit(" ×") + ratio).otherwise(pl.lit("")),
        ]
    )
    part = changes.select(
        [
            *columns,
            "status",
            ((pl.col("start") + pl.col("end")) / 2).alias("x_mid"),
            text.alias("label"),
        ]
    )
    if columns:
        return part.join(labels, on=columns, how="inner", nulls_equal=True)
    return part.with_columns(pl.lit("all").alias(GROUP_FIELD))


def comparison_chart(result: Any, *, columns: int = 2) -> alt.FacetChart:
    """Draw both runs of a comparison, their regimes and every regime's status.

    Parameters
    ----------
    result : ComparisonResult
        From :func:`regimes.compare_runs`.
    columns : int, default 2
        Panels per row.

    Returns
    -------
    altair.FacetChart
        One panel per matched curve (log latency axis).

    Examples
    --------
    >>> import regimes
    >>> from regimes.viz._compare_chart import comparison_chart
    >>> grid = dict(n_budgets=16, trials=5, sessions=2, intercept_s=0.05, per_token_s=0.005)
    >>> base = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid).trials
    >>> new = regimes.simulate_sweep(seed=2, **grid).trials
    >>> chart = comparison_chart(regimes.compare_runs(base, new, n_boot=200))
    >>> type(chart).__name__
    'FacetChart'
    """
    group_columns = list(result.group_columns)
    matched = result.shift.select(group_columns) if group_columns else pl.DataFrame({"_": [0]})
    labels, caption = group_labels(matched, group_columns)
    parts = _runs_part(result, group_columns, labels)
    parts["status"] = _status_part(result, group_columns, labels)
    data = _stack_parts(parts)
    run_color = alt.Color(
        "run:N",
        title="run",
        scale=alt.Scale(domain=list(RUN_COLORS), range=list(RUN_COLORS.values())),
    )
    x_axis = alt.X("x:Q", title=result.x, scale=alt.Scale(zero=False, nice=False))
    y_axis = alt.Y(
        "median:Q", title=f"{result.y} (median)", scale=alt.Scale(type="log", nice=False)
    )
    curve = alt.Chart().transform_filter("datum.part == 'curve'")
    layers = [
        alt.Chart()
        .transform_filter("datum.part == 'regime'")
        .mark_rect(opacity=0.12)
        .encode(x=alt.X("x_lo:Q"), x2="x_hi:Q", color=run_color),
        curve.mark_area(opacity=0.2).encode(
            x=x_axis, y=alt.Y("ci_low:Q"), y2="ci_high:Q", color=run_color
        ),
        curve.mark_line(point=True).encode(
            x=x_axis, y=y_axis, color=run_color, tooltip=["run:N", "x:Q", "median:Q"]
        ),
        alt.Chart()
        .transform_filter("datum.part == 'status'")
        .mark_text(fontSize=10, fontWeight="bold", baseline="bottom", color="#333333")
        .encode(
            x=alt.X("x_mid:Q"), y=alt.value(_FACET_HEIGHT - 3), text="label:N", tooltip=["label:N"]
        ),
    ]
    title = f"{result.y}: base and new run" + (f" · {caption}" if caption else "")
    order = labels.get_column(GROUP_FIELD).to_list()
    return _facet(layers, data, order, title, columns, independent_y=True)
