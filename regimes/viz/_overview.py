"""The overview heatmap: every group against x, coloured by median over trend."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import altair as alt
import polars as pl

from regimes.errors import RegimesInputError
from regimes.viz import _style as style
from regimes.viz._frames import (
    GROUP_FIELD,
    attach_labels,
    cell_edges,
    frame_attr,
    group_labels,
    inline_data,
    interval_part,
    optional_frame,
    report_axes,
    require,
)
from regimes.viz._layout import interval_tooltip


def overview_heatmap(
    report: Any,
    *,
    max_columns: int = 200,
    cell_height: int = 14,
    width: int = 800,
    clip_ratio: float = 32.0,
    title: str | None = None,
) -> alt.LayerChart:
    """Every group against x, coloured by the ratio of the median over the trend.

    Colour is on a log scale diverging around 1 (orange slower than trend, blue
    faster; a scheme that stays readable with red-green colour blindness), clipped at
    ``clip_ratio`` either way. Anomalous intervals are outlined in black.

    Parameters
    ----------
    report : RegimeResult
        The result of :func:`regimes.detect_regimes`.
    max_columns : int, default 200
        When there are more distinct x values, x is cut into ``max_columns``
        equal-width bins and each (group, bin) cell shows the ratio furthest from 1 in
        log terms, so a one-budget spike survives the binning instead of being
        averaged away. 50 groups x 500 budgets thus draws at most 10,000 cells.
    cell_height : int, default 14
        Pixels per group row.
    width : int, default 800
        Pixels of the x axis.
    clip_ratio : float, default 32.0
        The colour scale ends at this ratio and its inverse.
    title : str, optional
        The chart's title.

    Returns
    -------
    altair.LayerChart
        The heatmap and, when there are anomalies, their outlines.

    Raises
    ------
    RegimesInputError
        When the curve has no finite positive ratio, or ``max_columns`` < 1.

    See Also
    --------
    latency_chart : the panels per group, with trials and CIs.

    Examples
    --------
    >>> import regimes
    >>> trials = regimes.simulate_sweep(8, anomaly="spike", trials=3, seed=0).trials
    >>> rep = regimes.detect_regimes(trials, n_boot=200)
    >>> heat = regimes.plot.overview_heatmap(rep).to_dict()
    >>> heat["layer"][0]["encoding"]["color"]["scale"]["scheme"]
    'blueorange'
    """
    x, _, group_columns = report_axes(report)
    curve = frame_attr(report, "curve")
    require(curve, [x, "ratio"], "the report's curve")
    if max_columns < 1:
        raise RegimesInputError(f"max_columns must be at least 1, got {max_columns}")
    labels, caption = group_labels(curve, group_columns)
    order = labels[GROUP_FIELD].to_list()
    cells = _heat_cells(curve, group_columns, x, max_columns)
    cells = attach_labels(cells, labels, group_columns).select(
        GROUP_FIELD, "x_left", "x_right", "x_first", "x_last", "ratio", "n_x"
    )
    y = alt.Y(f"{GROUP_FIELD}:N", sort=order, title=None, axis=alt.Axis(labelLimit=0))
    layers = [_heat_layer(cells, x, y, clip_ratio, len(order) * cell_height)]
    anomalies = optional_frame(report, "anomalies")
    if anomalies is not None:
        outlined = interval_part(anomalies, curve, labels, group_columns, x)
        layers.append(_outline_layer(outlined, x, y))
    n_found = 0 if anomalies is None else anomalies.height
    description = (
        f"Heatmap of {len(order)} group(s) against {style.axis_title(x)}: colour is the "
        f"median over its smooth trend on a log scale (orange slower, blue faster); "
        f"{n_found} anomalous interval(s) outlined."
    )
    heading = title or f"Median / smooth trend by group and {style.quantity(x)}"
    chart = alt.layer(*layers)
    return cast(
        alt.LayerChart,
        chart.properties(
            width=width,
            height=alt.Step(cell_height),
            title=style.title(heading, caption),
            description=description,
        ),
    )


def _heat_cells(
    curve: pl.DataFrame, group_columns: Sequence[str], x: str, max_columns: int
) -> pl.DataFrame:
    """Return the cells to colour, binned along x beyond ``max_columns`` values."""
    cells = curve.filter(
        pl.col("ratio").is_not_null() & pl.col("ratio").is_finite() & (pl.col("ratio") > 0)
    )
    if cells.height == 0:
        raise RegimesInputError("the report's curve has no finite positive ratio to colour")
    edges = cell_edges(curve, group_columns, x)
    cells = cells.join(edges, on=[*group_columns, x], nulls_equal=True)
    if cells[x].n_unique() > max_columns:
        return _binned(cells, group_columns, x, max_columns)
    return cells.with_columns(
        pl.col(x).alias("x_first"), pl.col(x).alias("x_last"), pl.lit(1).alias("n_x")
    )


def _binned(
    cells: pl.DataFrame, group_columns: Sequence[str], x: str, max_columns: int
) -> pl.DataFrame:
    """Equal-width x bins, each keeping the ratio furthest from 1 in log terms."""
    lo, hi = float(cells["x_left"].min()), float(cells["x_right"].max())  # type: ignore[arg-type]
    width_bin = (hi - lo) / max_columns
    bin_index = ((pl.col(x).cast(pl.Float64) - lo) / width_bin).floor().clip(0, max_columns - 1)
    return (
        cells.with_columns(bin_index.cast(pl.Int64).alias("_bin"))
        .group_by([*group_columns, "_bin"])
        .agg(
            pl.col("ratio").sort_by(pl.col("ratio").log().abs()).last(),
            pl.col(x).min().alias("x_first"),
            pl.col(x).max().alias("x_last"),
            pl.len().alias("n_x"),
        )
        .with_columns(
            (lo + pl.col("_bin") * width_bin).alias("x_left"),
            (lo + (pl.col("_bin") + 1) * width_bin).alias("x_right"),
        )
        .drop("_bin")
    )


def _heat_layer(
    cells: pl.DataFrame, x: str, y: alt.Y, clip_ratio: float, legend_px: int
) -> alt.Chart:
    top = float(cells.select(pl.col("ratio").log().abs().max()).item())
    bound = min(max(math.exp(top), 1.5), clip_ratio)
    steps = [2.0**k for k in range(-5, 6) if 1 / bound <= 2.0**k <= bound]
    color = alt.Color(
        "ratio:Q",
        title="median / trend",
        scale=alt.Scale(
            type="log",
            scheme=style.HEATMAP_SCHEME,
            domain=[1 / bound, bound],
            domainMid=1,
            clamp=True,
        ),
        legend=alt.Legend(
            values=steps, format=".3~g", gradientLength=max(120, min(300, legend_px))
        ),
    )
    return (
        alt.Chart(inline_data(cells))
        .mark_rect()
        .encode(
            x=alt.X("x_left:Q", title=style.axis_title(x), scale=alt.Scale(zero=False, nice=False)),
            x2="x_right:Q",
            y=y,
            color=color,
            tooltip=[
                alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
                alt.Tooltip("x_first:Q", title=f"first {x}"),
                alt.Tooltip("x_last:Q", title=f"last {x}"),
                alt.Tooltip("ratio:Q", format=".3g", title="median / trend (most extreme)"),
                alt.Tooltip("n_x:Q", title=f"{x} values in cell"),
            ],
        )
    )


def _outline_layer(outlined: pl.DataFrame, x: str, y: alt.Y) -> alt.Chart:
    return (
        alt.Chart(inline_data(outlined))
        .mark_rect(filled=False, stroke=style.BLACK, strokeWidth=1.5)
        .encode(
            x=alt.X("x_lo:Q", scale=alt.Scale(zero=False, nice=False)),
            x2="x_hi:Q",
            y=y,
            tooltip=interval_tooltip(x, "anomaly"),
        )
    )
