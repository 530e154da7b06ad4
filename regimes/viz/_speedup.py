"""The KV-cache speedup chart: where the cache stops paying off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import polars as pl

from regimes.data.schema import CASE_COLUMNS
from regimes.errors import RegimesInputError
from regimes.viz import _style as style
from regimes.viz._frames import (
    GROUP_FIELD,
    attach_labels,
    frame_attr,
    group_labels,
    interval_part,
    noisy,
    optional_frame,
    require,
)
from regimes.viz._layout import (
    ChartText,
    Panels,
    Strip,
    interval_layers,
    panels_over_strip,
    part,
    value_axis,
    value_scale,
    x_encoding,
)

_Y_TITLE = "speedup, cache off / on (×)"


def speedup_chart(
    speedup_result: Any,
    *,
    x: str | None = None,
    columns: int | None = None,
    log_y: bool | None = None,
    title: str | None = None,
) -> alt.VConcatChart:
    """KV-cache speedup (cache-off latency / cache-on latency) against the budget.

    Per group: the speedup line with its CI band, a rule at 1 (no speedup), the trend
    when the result carries one, and the collapse intervals (significant dips below
    the trend) shaded and labelled ``×ratio [CI]``; an overview strip with an x brush
    and, for two groups or more, a group menu, as in :func:`latency_chart`.

    Parameters
    ----------
    speedup_result : SpeedupResult
        The result of :func:`regimes.cache_speedup`.
    x : str, optional
        The x column. Default: the result's ``x``, else ``budget`` or
        ``total_tokens``, whichever the speedup frame has.
    columns : int, optional
        Panels per row. Default: 2, or 3 from six groups on.
    log_y : bool, optional
        Speedup on a log axis. Default ``None``: logarithmic when a CI reaches
        :data:`~regimes.viz.charts.NOISY_SPREAD` times its speedup.
    title : str, optional
        The chart's title. Default: ``"KV-cache speedup by <x>"``.

    Returns
    -------
    altair.VConcatChart
        The panels over the overview strip.

    Raises
    ------
    RegimesInputError
        When the result has no ``speedup`` frame with an x column, ``speedup``,
        ``ci_low`` and ``ci_high``.

    See Also
    --------
    regimes.cache_speedup : the analysis drawn here.

    Examples
    --------
    >>> import regimes
    >>> trials = regimes.simulate.published_gpt2_medium_cache(trials=3, seed=0)
    >>> sp = regimes.cache_speedup(trials)
    >>> regimes.plot.speedup_chart(sp).to_dict()["title"]["text"]
    'KV-cache speedup by decoding budget'
    """
    speed = frame_attr(speedup_result, "speedup")
    x, group_columns = _speedup_axes(speedup_result, speed, x)
    labels, caption = group_labels(speed, group_columns)
    order = labels[GROUP_FIELD].to_list()
    parts = _speedup_parts(speedup_result, speed, labels, group_columns, x)
    if log_y is None:
        log_y = noisy(parts["curve"], "speedup", ["ci_high"])
    panels = Panels.for_groups(len(order), columns)
    layers: list[alt.Chart] = []
    if "interval" in parts:
        layers += interval_layers(x, "collapse", panels.height, label_at_top=True)
    layers += _speedup_layers(x, parts["curve"].columns, log_y, style.level_text(speedup_result))
    lines = parts["curve"].select(GROUP_FIELD, x, pl.col("speedup").alias("value"))
    strip = Strip(lines, "speedup", log_y=log_y)
    heading = title or f"KV-cache speedup by {style.quantity(x)}"
    text = ChartText(heading, caption, _describe(parts, x))
    return panels_over_strip(layers, parts, strip, x, order, panels, text)


def _speedup_axes(result: Any, speed: pl.DataFrame, x: str | None) -> tuple[str, list[str]]:
    """Return the x column and the group columns of a speedup result."""
    x = (
        x
        or getattr(result, "x", None)
        or next((c for c in ("budget", "total_tokens") if c in speed.columns), None)
    )
    if x is None or x not in speed.columns:
        raise RegimesInputError(f"the speedup frame has no x column; columns: {speed.columns}")
    require(speed, [x, "speedup", "ci_low", "ci_high"], "the speedup frame")
    group_columns = getattr(result, "group_columns", None)
    if group_columns is None:
        group_columns = [
            c for c in CASE_COLUMNS if c in speed.columns and c not in (x, "use_cache")
        ]
    return x, list(group_columns)


def _speedup_parts(
    result: Any, speed: pl.DataFrame, labels: pl.DataFrame, group_columns: list[str], x: str
) -> dict[str, pl.DataFrame]:
    trend = next((c for c in ("baseline", "trend") if c in speed.columns), None)
    columns = [x, "speedup", "ci_low", "ci_high"]
    columns += [c for c in ("off_median", "on_median", "ratio") if c in speed.columns]
    curve = attach_labels(speed, labels, group_columns).select(GROUP_FIELD, *columns)
    if trend:
        curve = curve.with_columns(
            attach_labels(speed, labels, group_columns)[trend].alias("trend")
        )
    parts = {"curve": curve}
    collapses = optional_frame(result, "collapses")
    if collapses is not None:
        parts["interval"] = interval_part(collapses, speed, labels, group_columns, x)
    return parts


def _speedup_layers(x: str, columns: Sequence[str], log_y: bool, level: str) -> list[alt.Chart]:
    """CI band, trend, the speedup line with its points, and the no-speedup rule."""
    scale = value_scale(log_y, zero=not log_y)
    axis = value_axis(log_y)
    title = _Y_TITLE + (", log scale" if log_y else "")
    base = alt.Chart().transform_filter(part("curve"))
    group_tip = alt.Tooltip(f"{GROUP_FIELD}:N", title="group")
    layers = [
        base.transform_calculate(what=f"'{level} CI of the speedup'")
        .mark_area(color=style.MEDIAN_COLOR, opacity=0.2, clip=True)
        .encode(
            x=x_encoding(x, x),
            y=alt.Y("ci_low:Q", scale=scale, title=title, axis=axis),
            y2="ci_high:Q",
            tooltip=[group_tip, alt.Tooltip("what:N", title="band")],
        )
    ]
    if "trend" in columns:
        layers.append(
            base.transform_calculate(what="'smooth trend of the speedup'")
            .mark_line(color=style.TREND_COLOR, strokeDash=[6, 4], clip=True)
            .encode(
                x=x_encoding(x, x),
                y=alt.Y("trend:Q", scale=scale, title=title, axis=axis),
                tooltip=[group_tip, alt.Tooltip("what:N", title="line")],
            )
        )
    tooltip = [group_tip, alt.Tooltip(f"{x}:Q", title=style.axis_title(x))]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".3g") for c in columns if c not in (GROUP_FIELD, x)]
    layers.append(
        base.mark_line(
            color=style.MEDIAN_COLOR, clip=True, point=alt.OverlayMarkDef(size=18, filled=True)
        ).encode(
            x=x_encoding(x, x),
            y=alt.Y("speedup:Q", scale=scale, title=title, axis=axis),
            tooltip=tooltip,
        )
    )
    layers.append(_no_speedup_rule())
    return layers


def _no_speedup_rule() -> alt.Chart:
    # One rule per panel: aggregate the panel's rows away before drawing.
    return (
        alt.Chart()
        .transform_filter(part("curve"))
        .transform_aggregate(rows="count()")
        .transform_calculate(what="'1×: the cache gives no speedup'")
        .mark_rule(color=style.BLACK, strokeWidth=0.8, opacity=0.5)
        .encode(y=alt.datum(1), tooltip=[alt.Tooltip("what:N", title="rule")])
    )


def _describe(parts: dict[str, pl.DataFrame], x: str) -> str:
    curve = parts["curve"]
    low, high = float(curve["speedup"].min()), float(curve["speedup"].max())  # type: ignore[arg-type]
    text = (
        f"KV-cache speedup (cache-off over cache-on latency) against {style.axis_title(x)} "
        f"for {curve[GROUP_FIELD].n_unique()} group(s), from "
        f"×{low:.3g} to ×{high:.3g}, with its CI band"
    )
    intervals = parts.get("interval")
    if intervals is None:
        return text + "; no collapse below the speedup trend."
    found = [
        f"{row[GROUP_FIELD]} at {x} {row['start']}..{row['end']} {row['label']}"
        for row in intervals.iter_rows(named=True)
    ]
    return text + "; collapses shaded: " + "; ".join(found)
