"""The chart of a run comparison: both runs' curves, the regimes of each, what changed.

One panel per matched curve: each run's median latency per budget with its confidence
band (base in grey, new in blue), each run's regimes shaded in its colour, and every
regime's status between the runs written at its foot (``vanished ×0.33``). The
overview strip under the panels draws the new run's level over the base's per budget
and carries the x brush, as in the latency chart. It is drawn from a
:class:`regimes.ComparisonResult` alone (the two detections travel with it).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from regimes.viz import _style as style
from regimes.viz._frames import GROUP_FIELD, attach_labels, group_labels, interval_part
from regimes.viz._layout import (
    ChartText,
    Panels,
    Strip,
    panels_over_strip,
    part,
    value_axis,
    value_scale,
    x_encoding,
)

__all__ = ["comparison_chart"]

RUN_COLORS = {"base": style.GREY, "new": style.BLUE}
"""Colour of each run: the base in grey, the new run in blue (Okabe-Ito)."""


def comparison_chart(result: Any, *, columns: int | None = None) -> alt.VConcatChart:
    """Draw both runs of a comparison, their regimes and every regime's status.

    Parameters
    ----------
    result : ComparisonResult
        From :func:`regimes.compare_runs`.
    columns : int, optional
        Panels per row. Default: 2, or 3 from six curves on.

    Returns
    -------
    altair.VConcatChart
        One panel per matched curve (log latency axis) over the overview strip.

    Examples
    --------
    >>> import regimes
    >>> from regimes.viz._compare_chart import comparison_chart
    >>> grid = dict(n_budgets=16, trials=5, sessions=2, intercept_s=0.05, per_token_s=0.005)
    >>> base = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid).trials
    >>> new = regimes.simulate_sweep(seed=2, **grid).trials
    >>> chart = comparison_chart(regimes.compare_runs(base, new, n_boot=200))
    >>> chart.to_dict()["title"]["text"]
    'Latency: base and new run'
    """
    x, group_columns = result.x, list(result.group_columns)
    matched = result.shift.select(group_columns) if group_columns else pl.DataFrame({"_": [0]})
    labels, caption = group_labels(matched, group_columns)
    order = labels[GROUP_FIELD].to_list()
    parts = _run_parts(result, group_columns, labels)
    panels = Panels.for_groups(len(order), columns)
    layers = _layers(x, style.axis_title(result.y), panels.height)
    strip = Strip(_shift_lines(result, group_columns, labels, parts), "new / base", log_y=True)
    statuses = parts["status"]["label"].to_list() if "status" in parts else []
    description = (
        f"{style.axis_title(result.y)} of the base and the new run against "
        f"{style.axis_title(x)}, one panel per matched curve ({len(order)}), with each "
        f"run's regimes shaded; {len(statuses)} regime(s): " + ("; ".join(statuses) or "none")
    )
    text = ChartText(
        f"{style.quantity(result.y).capitalize()}: base and new run", caption, description
    )
    return panels_over_strip(layers, parts, strip, x, order, panels, text)


def _run_parts(
    result: Any, group_columns: list[str], labels: pl.DataFrame
) -> dict[str, pl.DataFrame]:
    """Both runs' curve cells and regimes, and the status of every regime."""
    x = result.x
    curves, regimes = [], []
    for run, report in (("base", result.base_report), ("new", result.new_report)):
        curve = report.curve.select([*group_columns, x, "median", "ci_low", "ci_high"])
        curves.append(
            attach_labels(curve, labels, group_columns).with_columns(pl.lit(run).alias("run"))
        )
        if report.anomalies.height:
            shaded = interval_part(report.anomalies, report.curve, labels, group_columns, x)
            regimes.append(shaded.with_columns(pl.lit(run).alias("run")))
    parts = {"curve": pl.concat(curves, how="diagonal_relaxed").drop(group_columns)}
    if regimes:
        parts["regime"] = pl.concat(regimes, how="diagonal_relaxed")
    if result.changes.height:
        cells = pl.concat(
            [result.base_report.curve, result.new_report.curve], how="diagonal_relaxed"
        )
        parts["status"] = interval_part(
            result.changes.with_columns(_status_label().alias("label")),
            cells.select([*group_columns, x]).unique(),
            labels,
            group_columns,
            x,
        ).with_columns(pl.lit("status").alias("run"))
    return parts


def _status_label() -> pl.Expr:
    """``vanished ×0.33``: a regime's status and its ratio of ratios (new over base)."""
    ratio = pl.col("ratio_of_ratios").round_sig_figs(3).cast(pl.String)
    return pl.concat_str(
        [
            pl.col("status"),
            pl.when(ratio.is_not_null()).then(pl.lit(" ×") + ratio).otherwise(pl.lit("")),
        ]
    )


def _shift_lines(
    result: Any, group_columns: list[str], labels: pl.DataFrame, parts: dict[str, pl.DataFrame]
) -> pl.DataFrame:
    """Return the new run's level over the base's per budget, for the overview strip."""
    x = result.x
    budgets = getattr(result, "budgets", None)
    if isinstance(budgets, pl.DataFrame) and {x, "ratio"} <= set(budgets.columns):
        lines = attach_labels(budgets, labels, group_columns)
        return lines.select(GROUP_FIELD, x, pl.col("ratio").alias("value"))
    wide = parts["curve"].pivot(on="run", index=[GROUP_FIELD, x], values="median")
    return wide.select(GROUP_FIELD, x, (pl.col("new") / pl.col("base")).alias("value"))


def _layers(x: str, y_title: str, height: int) -> list[alt.Chart]:
    run_color = alt.Color(
        "run:N",
        title="run",
        scale=alt.Scale(domain=list(RUN_COLORS), range=list(RUN_COLORS.values())),
        legend=style.legend(symbolOpacity=1, symbolType="stroke", symbolStrokeWidth=3),
    )
    title, scale, axis = f"{y_title}, log scale", value_scale(True), value_axis(True)
    group = alt.Tooltip(f"{GROUP_FIELD}:N", title="group")
    curve = alt.Chart().transform_filter(part("curve"))
    point_tip = [group, alt.Tooltip("run:N"), alt.Tooltip(f"{x}:Q", title=style.axis_title(x))]
    point_tip += [alt.Tooltip(f"{c}:Q", format=".4g") for c in ("median", "ci_low", "ci_high")]
    regime_tip = [group, alt.Tooltip("run:N"), alt.Tooltip("start:Q"), alt.Tooltip("end:Q")]
    regime_tip.append(alt.Tooltip("label:N", title="ratio over trend [CI]"))
    return [
        alt.Chart()
        .transform_filter(part("regime"))
        .mark_rect(opacity=0.14, clip=True)
        .encode(x=x_encoding("x_lo", x), x2="x_hi:Q", color=run_color, tooltip=regime_tip),
        curve.mark_area(opacity=0.18, clip=True).encode(
            x=x_encoding(x, x),
            y=alt.Y("ci_low:Q", title=title, scale=scale, axis=axis),
            y2="ci_high:Q",
            color=run_color,
            tooltip=[group, alt.Tooltip("run:N", title="CI band of the run")],
        ),
        curve.mark_line(point=True, clip=True).encode(
            x=x_encoding(x, x),
            y=alt.Y("median:Q", title=title, scale=scale, axis=axis),
            color=run_color,
            tooltip=point_tip,
        ),
        alt.Chart()
        .transform_filter(part("status"))
        .mark_text(
            fontSize=11,
            fontWeight="bold",
            baseline="bottom",
            color=style.BLACK,
            align=alt.ExprRef(expr="datum.label_align"),
            clip=True,
        )
        .encode(
            x=x_encoding("label_x", x),
            y=alt.value(height - 3),
            text="label:N",
            tooltip=[
                group,
                alt.Tooltip("label:N", title="status"),
                alt.Tooltip("q_value:Q", format=".2g"),
            ],
        ),
    ]
