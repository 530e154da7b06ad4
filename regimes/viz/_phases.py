"""The phase chart: median prefill and decode time stacked per budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import polars as pl

from regimes.data.schema import CASE_COLUMNS, validate_trials
from regimes.errors import RegimesInputError
from regimes.viz import _style as style
from regimes.viz._frames import (
    GROUP_FIELD,
    attach_labels,
    cell_edges,
    group_labels,
    interval_part,
    require,
)
from regimes.viz._layout import (
    ChartText,
    Panels,
    Strip,
    grid_ticks,
    interval_layers,
    panels_over_strip,
    part,
    value_axis,
    value_scale,
    x_encoding,
)


def phase_chart(
    df: Any,
    *,
    x: str = "budget",
    by: Sequence[str] | None = None,
    intervals: pl.DataFrame | None = None,
    columns: int | None = None,
    title: str | None = None,
    log_y: bool | None = None,
) -> alt.VConcatChart:
    """Median prefill and decode time per budget, one panel per group.

    Medians are taken per phase. On a linear axis the two are stacked, so the stack is
    the sum of the phase medians; the black tick is the median end-to-end latency of
    the same trials, which shows what the phases leave out. When a phase is too short
    to see in the stack (the prefill of a long generation), the axis is logarithmic and
    the two phases stand side by side, prefill left, decode right, each from the foot
    of the panel. The x ticks are the budgets the bars stand on. An overview strip of
    the median latency carries an x brush, as in :func:`latency_chart`.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        Instrumented trials (``prefill_s`` and ``decode_s`` measured).
    x : str, default "budget"
        The x column.
    by : sequence of str, optional
        The group columns. Default: the case columns present.
    intervals : polars.DataFrame, optional
        Intervals to shade, with the group columns, ``start``, ``end``, ``label``
        (printed inside) and optionally ``q_value``; :func:`phases_result_chart`
        passes the anomalies it attributes.
    columns : int, optional
        Panels per row. Default: 2, or 3 from six groups on.
    title : str, optional
        The chart's title. Default: ``"Prefill and decode by <x>"``.
    log_y : bool, optional
        Time on a log axis, the phases side by side. Default ``None``: logarithmic when
        the shortest phase median is under :data:`VISIBLE_SHARE` of the longest
        latency median (a few pixels of a stack), else stacked on a linear axis.

    Returns
    -------
    altair.VConcatChart
        The panels over the overview strip.

    Raises
    ------
    RegimesInputError
        When the trials have no phase split (collect with instrumentation on).

    See Also
    --------
    regimes.attribute_phases : the excess over trend split into the two phases.

    Examples
    --------
    >>> import regimes
    >>> run = regimes.load("examples/data/cuda-h200-instrumented")
    >>> chart = regimes.plot.phase_chart(run)
    >>> chart.to_dict()["title"]["text"]
    'Prefill and decode by decoding budget'
    """
    frame = _instrumented(df, x)
    group_columns = (
        list(by) if by is not None else [c for c in CASE_COLUMNS if c in frame.columns and c != x]
    )
    require(frame, group_columns, "the trial table")
    cells = _phase_cells(frame, group_columns, x)
    labels, caption = group_labels(cells, group_columns)
    order = labels[GROUP_FIELD].to_list()
    if log_y is None:
        log_y = _too_short_to_stack(cells)
    parts = {"bar": _bars(cells, x, labels, group_columns, side_by_side=log_y)}
    if intervals is not None and intervals.height:
        parts["interval"] = interval_part(intervals, cells, labels, group_columns, x)
    panels = Panels.for_groups(len(order), columns)
    layers = interval_layers(x, "anomaly", panels.height, False) if "interval" in parts else []
    ticks = grid_ticks(cells.get_column(x).to_list())
    layers += _phase_layers(x, ticks, log_y)
    latency = parts["bar"].filter(pl.col("phase") == "decode")
    latency = latency.select(GROUP_FIELD, x, pl.col("latency_s").alias("value"))
    strip = Strip(latency, "median (s)", log_y=False)
    heading = title or f"Prefill and decode by {style.quantity(x)}"
    how = "side by side on a log axis" if log_y else "stacked"
    description = (
        f"Median prefill and decode time {how} per {style.quantity(x)} for {len(order)} "
        "group(s); a black tick marks the median end-to-end latency."
    )
    text = ChartText(heading, caption, description)
    return panels_over_strip(layers, parts, strip, x, order, panels, text)


def _instrumented(df: Any, x: str) -> pl.DataFrame:
    """Keep the trials with both phases measured, or raise a clear error."""
    frame = validate_trials(df, x=x, y="latency_s")
    missing = [c for c in ("prefill_s", "decode_s") if c not in frame.columns]
    if missing:
        raise RegimesInputError(
            f"phase_chart needs per-phase times; the trial table has no {missing} column "
            "(collect the sweep with instrumentation on)"
        )
    frame = frame.filter(pl.col("prefill_s").is_not_null() & pl.col("decode_s").is_not_null())
    if frame.height == 0:
        raise RegimesInputError(
            "phase_chart needs instrumented trials, but prefill_s / decode_s are empty in "
            "every measured row (collect the sweep with instrumentation on)"
        )
    return frame


def _phase_cells(frame: pl.DataFrame, group_columns: list[str], x: str) -> pl.DataFrame:
    """Per-cell medians of each phase and of the latency, with the cells' edges."""
    cells = frame.group_by([*group_columns, x]).agg(
        pl.col("prefill_s").median(),
        pl.col("decode_s").median(),
        pl.col("latency_s").median(),
        pl.len().alias("n"),
    )
    edges = cell_edges(cells, group_columns, x)
    return cells.join(edges, on=[*group_columns, x], nulls_equal=True)


VISIBLE_SHARE = 0.02
"""A phase median under this share of the longest latency median is a few pixels of a
stacked bar, too short to see: the chart then draws the phases side by side on a log
axis."""


def _too_short_to_stack(cells: pl.DataFrame) -> bool:
    shortest = cells.select(pl.min_horizontal("prefill_s", "decode_s").min()).item()
    longest = cells.get_column("latency_s").max()
    if shortest is None or longest is None or float(longest) <= 0:  # type: ignore[arg-type]
        return False
    return float(shortest) < VISIBLE_SHARE * float(longest)  # type: ignore[arg-type]


def _bars(
    cells: pl.DataFrame,
    x: str,
    labels: pl.DataFrame,
    group_columns: list[str],
    *,
    side_by_side: bool,
) -> pl.DataFrame:
    """Two bars per cell, 80% of the cell wide: decode on prefill, or side by side.

    Side by side (for a log axis), prefill takes the left half and decode the right,
    each from ``y0`` = null, the foot of the panel.
    """
    half = (pl.col("x_right") - pl.col("x_left")) * 0.4
    centre = pl.col(x).cast(pl.Float64)
    prefill = cells.with_columns(
        pl.lit("prefill").alias("phase"),
        pl.lit(0.0).alias("y0"),
        pl.col("prefill_s").alias("y1"),
        pl.col("prefill_s").alias("seconds"),
        (centre - half).alias("x0"),
        (centre if side_by_side else centre + half).alias("x1"),
    )
    decode = cells.with_columns(
        pl.lit("decode").alias("phase"),
        pl.col("prefill_s").alias("y0"),
        (pl.col("prefill_s") + pl.col("decode_s")).alias("y1"),
        pl.col("decode_s").alias("seconds"),
        (centre if side_by_side else centre - half).alias("x0"),
        (centre + half).alias("x1"),
    )
    bars = pl.concat([prefill, decode])
    if side_by_side:
        bars = bars.with_columns(
            pl.lit(None, pl.Float64).alias("y0"), pl.col("seconds").alias("y1")
        )
    return attach_labels(bars, labels, group_columns).select(
        GROUP_FIELD, x, "phase", "x0", "x1", "y0", "y1", "seconds", "latency_s", "n"
    )


def _phase_layers(x: str, ticks: Sequence[float], log_y: bool) -> list[alt.Chart]:
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip(f"{x}:Q", title=style.axis_title(x)),
        alt.Tooltip("phase:N"),
        alt.Tooltip("seconds:Q", format=".4g", title="median of the phase (s)"),
        alt.Tooltip("latency_s:Q", format=".4g", title="median latency (s)"),
        alt.Tooltip("n:Q", title="trials"),
    ]
    scale, axis = value_scale(log_y, zero=not log_y), value_axis(log_y)
    y_title = "median time (s)" + (", log scale" if log_y else "")
    # A side-by-side bar rises from the foot of the panel: its y0 is null, drawn at the
    # bottom of the range.
    foot = alt.value("height") if log_y else "y0:Q"
    bars = (
        alt.Chart()
        .transform_filter(part("bar"))
        .mark_rect(clip=True)
        .encode(
            x=x_encoding("x0", x, values=ticks),
            x2="x1:Q",
            y=alt.Y("y1:Q", title=y_title, scale=scale, axis=axis),
            y2=foot,
            color=alt.Color(
                "phase:N",
                scale=alt.Scale(
                    domain=["prefill", "decode"], range=[style.PREFILL_COLOR, style.DECODE_COLOR]
                ),
                legend=style.legend(title=None),
            ),
            tooltip=tooltip,
        )
    )
    total = (
        alt.Chart()
        .transform_filter(part("bar") + " && datum.phase == 'decode'")
        .mark_tick(color=style.BLACK, thickness=1.5, clip=True)
        .encode(
            x=x_encoding(x, x, values=ticks),
            y=alt.Y("latency_s:Q", title=y_title, scale=scale, axis=axis),
            tooltip=tooltip,
        )
    )
    return [bars, total]
