"""The latency chart of a regime detection: the library's main chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl

from regimes.viz import _style as style
from regimes.viz._frames import (
    GROUP_FIELD,
    attach_labels,
    frame_attr,
    group_labels,
    interval_part,
    noisy,
    optional_frame,
    report_axes,
    require,
    result_trials,
    select_groups,
)
from regimes.viz._layout import (
    ChartText,
    Panels,
    Strip,
    interval_labels,
    interval_shade,
    panels_over_strip,
    part,
    value_axis,
    value_scale,
    x_encoding,
)

_CURVE_EXTRAS = ("baseline", "ratio", "n")


@dataclass(frozen=True)
class _YAxis:
    """The value axis every layer shares."""

    log: bool
    title: str

    def encode(self, field: str) -> alt.Y:
        return alt.Y(
            f"{field}:Q", scale=value_scale(self.log), title=self.title, axis=value_axis(self.log)
        )


def latency_chart(
    report: Any,
    df: Any = None,
    *,
    log_y: bool | None = None,
    groups: Sequence[str] | None = None,
    columns: int | None = None,
    title: str | None = None,
    probes: Sequence[int] | None = None,
) -> alt.VConcatChart:
    """Latency against the budget, one panel per group, as the detection saw it.

    Layers, bottom to top: the anomalous intervals shaded and labelled ``×ratio [CI]``
    (the interval's level over the trend set by its flanks, with its CI);
    every measured trial as a faint point; the CI band of the median; the smooth trend
    (``baseline``, dashed); the median line; change points as vertical rules at the
    midpoint between ``x_before`` and ``x_after`` (the significant ones); at the top of
    the panel, a bracket at each interval's onset and end, from ``start_low`` to
    ``start_high`` and from ``end_low`` to ``end_high`` (the grid budgets the
    detection's bootstrap bounds each boundary by; one tick where it is sharp). Every mark
    has a tooltip. Under the panels, an overview strip of each group's median over its
    trend carries a brush: dragging across it zooms every panel to that x range. With
    two groups or more a drop-down shows one group at a time.

    Parameters
    ----------
    report : RegimeResult
        The result of :func:`regimes.detect_regimes`.
    df : polars.DataFrame or pandas.DataFrame, optional
        The trial table, for the trial points (warm-ups dropped). Default ``None``:
        the result's own ``trials`` when it keeps them, else no trial points.
    log_y : bool, optional
        Latency on a log axis, where a constant ratio is a constant gap. Default
        ``None``: logarithmic when the CI or a trial reaches
        :data:`~regimes.viz.charts.NOISY_SPREAD` times its cell's median, else linear.
    groups : sequence of str, optional
        Draw only these group labels (see :func:`group_labels`). Default: all.
    columns : int, optional
        Panels per row. Default: 2, or 3 from six groups on (smaller panels).
    title : str, optional
        The chart's title. Default: ``"<quantity> by <x>"``.
    probes : sequence of int, optional
        Budgets measured as refinement probes, off the run's grid (see
        :func:`regimes.refine_boundaries`): their medians are drawn as diamonds, the
        grid's as circles, with a legend. Used when ``x`` is ``budget``. Default: none.

    Returns
    -------
    altair.VConcatChart
        The panels (each with its own y scale) over the overview strip.

    Raises
    ------
    RegimesInputError
        When the result has no curve with ``median``, ``ci_low``, ``ci_high``, when a
        label in ``groups`` is unknown, or when ``df`` is not a valid trial table.

    See Also
    --------
    regimes.detect_regimes : the analysis drawn here.
    overview_heatmap : every group at a glance, for many groups.

    Examples
    --------
    >>> import regimes
    >>> trials = regimes.simulate_sweep(1, anomaly="spike", trials=3, seed=0).trials
    >>> rep = regimes.detect_regimes(trials, n_boot=200)
    >>> chart = regimes.plot.latency_chart(rep, trials)
    >>> chart.to_dict()["vconcat"][0]["spec"]["layer"][0]["mark"]["type"]
    'rect'
    """
    x, y, group_columns = report_axes(report)
    curve = frame_attr(report, "curve")
    require(curve, [x, "median", "ci_low", "ci_high"], "the report's curve")
    labels, caption = group_labels(curve, group_columns)
    labels, order = select_groups(labels, groups)
    trials = result_trials(report, df, x, y, group_columns)
    parts = _latency_parts(report, trials, labels, group_columns, (x, y))
    if probes and x == "budget":
        cell = (
            pl.when(pl.col(x).is_in(list(probes))).then(pl.lit("probe")).otherwise(pl.lit("grid"))
        )
        parts["curve"] = parts["curve"].with_columns(cell.alias("cell"))
    drawn = {name: frame for name, frame in parts.items() if frame.height}
    if log_y is None:
        log_y = _auto_log(drawn, x, y)
    panels = Panels.for_groups(len(order), columns)
    layers = _latency_layers(drawn, x, y, log_y, panels.height, style.level_text(report))
    strip_value = "ratio" if "ratio" in drawn["curve"].columns else "median"
    strip = Strip(
        drawn["curve"].select(GROUP_FIELD, x, pl.col(strip_value).alias("value")),
        "median / trend" if strip_value == "ratio" else "median",
        log_y=True,
    )
    heading = title or f"{style.quantity(y).capitalize()} by {style.quantity(x)}"
    description = _describe(drawn, x, y, order, style.level_text(report))
    text = ChartText(heading, caption, description)
    return panels_over_strip(layers, drawn, strip, x, order, panels, text)


def _latency_parts(
    report: Any,
    trials: pl.DataFrame | None,
    labels: pl.DataFrame,
    group_columns: list[str],
    axes: tuple[str, str],
) -> dict[str, pl.DataFrame]:
    """Build the chart's long table, part by part: curve, interval, change, trial."""
    x, y = axes
    curve = frame_attr(report, "curve")
    columns = [x, "median", "ci_low", "ci_high"] + [c for c in _CURVE_EXTRAS if c in curve.columns]
    parts = {"curve": attach_labels(curve, labels, group_columns).select(GROUP_FIELD, *columns)}
    anomalies = optional_frame(report, "anomalies")
    if anomalies is not None:
        parts["interval"] = interval_part(anomalies, curve, labels, group_columns, x)
        bounds = bounds_part(anomalies, labels, group_columns)
        if bounds is not None:
            parts["bounds"] = bounds
    change = _change_part(report, labels, group_columns)
    if change is not None:
        parts["change"] = change
    if trials is not None:
        parts["trial"] = attach_labels(
            trials.select([*group_columns, x, y]), labels, group_columns
        ).select([GROUP_FIELD, x, y])
    return parts


_BOUND_COLUMNS = ("start_low", "start_high", "end_low", "end_high")


def bounds_part(
    anomalies: pl.DataFrame, labels: pl.DataFrame, group_columns: Sequence[str]
) -> pl.DataFrame | None:
    """Each anomaly's two boundary brackets: ``bound_low`` to ``bound_high`` per row.

    One row for the onset (``start_low..start_high``, the grid budgets that bound the
    first anomalous one) and one for the end (``end_low..end_high``, the last); None
    when the anomalies carry no bounds (a result made before they existed).
    """
    if anomalies.height == 0 or not set(_BOUND_COLUMNS) <= set(anomalies.columns):
        return None
    keys = [c for c in group_columns if c in anomalies.columns]
    named = attach_labels(anomalies, labels, keys)
    sides = [
        named.select(
            GROUP_FIELD,
            "start",
            "end",
            pl.lit(boundary).alias("boundary"),
            pl.col(low).alias("bound_low"),
            pl.col(high).alias("bound_high"),
        )
        for boundary, low, high in (
            ("onset", "start_low", "start_high"),
            ("end", "end_low", "end_high"),
        )
    ]
    return pl.concat(sides, how="vertical_relaxed").drop_nulls(["bound_low", "bound_high"])


def _change_part(
    report: Any, labels: pl.DataFrame, group_columns: list[str]
) -> pl.DataFrame | None:
    """Significant change points, each at the midpoint of its two cells."""
    change_points = optional_frame(report, "change_points")
    if change_points is not None and "significant" in change_points.columns:
        change_points = change_points.filter(pl.col("significant"))
    if change_points is None or change_points.height == 0:
        return None
    require(change_points, ["x_before", "x_after", "ratio"], "the report's change_points")
    keys = [c for c in group_columns if c in change_points.columns]
    extra = [c for c in ("q_value", "p_value") if c in change_points.columns]
    return attach_labels(change_points, labels, keys).select(
        GROUP_FIELD,
        ((pl.col("x_before") + pl.col("x_after")) / 2).alias("x_change"),
        "x_before",
        "x_after",
        pl.col("ratio").alias("change_ratio"),
        *extra,
    )


def _auto_log(drawn: dict[str, pl.DataFrame], x: str, y: str) -> bool:
    """Log when a CI or a trial reaches ``NOISY_SPREAD`` times its cell's median."""
    if "trial" not in drawn:
        return noisy(drawn["curve"], "median", ["ci_high"])
    spread = drawn["trial"].group_by(GROUP_FIELD, x).agg(pl.col(y).max().alias("trial_max"))
    cells = drawn["curve"].join(spread, on=[GROUP_FIELD, x], how="left")
    return noisy(cells, "median", ["ci_high", "trial_max"])


def _latency_layers(
    drawn: dict[str, pl.DataFrame], x: str, y: str, log_y: bool, height: int, level: str
) -> list[alt.Chart]:
    """Stack the layers, bottom to top, of the parts that have rows."""
    y_axis = _YAxis(log_y, style.axis_title(y) + (", log scale" if log_y else ""))
    curve_columns = drawn["curve"].columns
    layers: list[alt.Chart] = []
    if "interval" in drawn:
        layers.append(interval_shade(x, "anomaly"))
    if "trial" in drawn:
        layers.append(_trial_layer(x, y, y_axis))
    layers += _curve_layers(x, y, y_axis, level, curve_columns)
    if "change" in drawn:
        layers.append(_change_layer(x, drawn["change"].columns))
    if "interval" in drawn:  # over the change rules at the interval's ends
        layers += interval_labels(x, "anomaly", height, label_at_top=False)
    if "bounds" in drawn:  # on top: a bracket is a few pixels, the curve would hide it
        layers += _bounds_layers(x)
    return layers


def _trial_layer(x: str, y: str, y_axis: _YAxis) -> alt.Chart:
    return (
        alt.Chart()
        .transform_filter(part("trial"))
        .mark_circle(size=12, color=style.TRIAL_COLOR, opacity=0.4, clip=True)
        .encode(
            x=x_encoding(x, x),
            y=y_axis.encode(y),
            tooltip=[
                alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
                alt.Tooltip(f"{x}:Q", title=style.axis_title(x)),
                alt.Tooltip(f"{y}:Q", format=".4g", title=f"trial {style.axis_title(y)}"),
            ],
        )
    )


def _curve_layers(
    x: str, y: str, y_axis: _YAxis, level: str, curve_columns: Sequence[str]
) -> list[alt.Chart]:
    """CI band, median and trend lines (with their legend), and the median's points."""
    base = alt.Chart().transform_filter(part("curve"))
    group_tip = alt.Tooltip(f"{GROUP_FIELD}:N", title="group")
    band = (
        base.transform_calculate(what=f"'{level} CI of the median'")
        .mark_area(color=style.MEDIAN_COLOR, opacity=0.2, clip=True)
        .encode(
            x=x_encoding(x, x),
            y=y_axis.encode("ci_low"),
            y2="ci_high:Q",
            tooltip=[group_tip, alt.Tooltip("what:N", title="band")],
        )
    )
    series: list[Any] = ["median"] + (["baseline"] if "baseline" in curve_columns else [])
    lines = (
        base.transform_fold(series, as_=["series", "value"])
        .mark_line(strokeWidth=1.8, clip=True)
        .encode(
            x=x_encoding(x, x),
            y=y_axis.encode("value"),
            color=alt.Color(
                "series:N",
                title=None,
                scale=alt.Scale(
                    domain=["median", "baseline"], range=[style.MEDIAN_COLOR, style.TREND_COLOR]
                ),
                legend=style.legend(
                    labelExpr="datum.label == 'baseline' ? 'smooth trend' : 'median'"
                ),
            ),
            strokeDash=alt.StrokeDash(
                "series:N",
                scale=alt.Scale(domain=["median", "baseline"], range=[[1, 0], [6, 4]]),
                legend=None,
            ),
            tooltip=[group_tip, alt.Tooltip("series:N", title="line")],
        )
    )
    return [band, lines, _median_points(x, y, y_axis, curve_columns)]


def _median_points(x: str, y: str, y_axis: _YAxis, curve_columns: Sequence[str]) -> alt.Chart:
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip(f"{x}:Q", title=style.axis_title(x)),
        alt.Tooltip("median:Q", format=".4g", title=f"median {style.axis_title(y)}"),
        alt.Tooltip("ci_low:Q", format=".4g", title="CI low"),
        alt.Tooltip("ci_high:Q", format=".4g", title="CI high"),
    ]
    named = {"baseline": "smooth trend", "ratio": "median / trend", "n": "trials"}
    tooltip += [
        alt.Tooltip(f"{c}:Q", format=".4g", title=label)
        for c, label in named.items()
        if c in curve_columns
    ]
    encoding: dict[str, Any] = {}
    if "cell" in curve_columns:  # a refined run: probes off the grid are diamonds
        tooltip.append(alt.Tooltip("cell:N", title="budget measured as"))
        # Shape and size share one legend: a size legend of its own set to None would
        # take the shape's with it.
        legend = style.legend(
            title=None,
            labelExpr="datum.label == 'probe' ? 'refinement probe' : 'grid budget'",
            symbolFillColor=style.MEDIAN_COLOR,
            symbolStrokeColor=style.MEDIAN_COLOR,
        )
        domain = ["grid", "probe"]
        encoding["shape"] = alt.Shape(
            "cell:N", scale=alt.Scale(domain=domain, range=["circle", "diamond"]), legend=legend
        )
        encoding["size"] = alt.Size(
            "cell:N", scale=alt.Scale(domain=domain, range=[18, 45]), legend=legend
        )
    return (
        alt.Chart()
        .transform_filter(part("curve"))
        .mark_point(color=style.MEDIAN_COLOR, size=18, filled=True, clip=True)
        .encode(x=x_encoding(x, x), y=y_axis.encode("median"), tooltip=tooltip, **encoding)
    )


_BOUNDS_Y = 6
"""Pixels from the panel's top at which the boundary brackets are drawn: the interval
labels sit at its foot."""


def _bounds_layers(x: str) -> list[alt.Chart]:
    """Draw a bracket per anomaly boundary: a rule from ``bound_low`` to ``bound_high``.

    Ticks mark its two ends, so a boundary the bootstrap placed on one budget still
    shows, as one tick at it.
    """
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip("boundary:N", title="boundary"),
        alt.Tooltip("bound_low:Q", title=f"{style.axis_title(x)} from"),
        alt.Tooltip("bound_high:Q", title=f"{style.axis_title(x)} to"),
    ]
    base = alt.Chart().transform_filter(part("bounds"))
    rule = base.mark_rule(color=style.ANOMALY_COLOR, strokeWidth=1.5, clip=True).encode(
        x=x_encoding("bound_low", x), x2="bound_high:Q", y=alt.value(_BOUNDS_Y), tooltip=tooltip
    )
    ends = (
        base.transform_fold(["bound_low", "bound_high"], as_=["bound_end", "bound_x"])
        .mark_tick(color=style.ANOMALY_COLOR, thickness=1.5, size=8, orient="vertical", clip=True)
        .encode(x=x_encoding("bound_x", x), y=alt.value(_BOUNDS_Y), tooltip=tooltip)
    )
    return [rule, ends]


def _change_layer(x: str, columns: Sequence[str]) -> alt.Chart:
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip("x_before:Q", title=f"last {x} before"),
        alt.Tooltip("x_after:Q", title=f"first {x} after"),
        alt.Tooltip("change_ratio:Q", format=".3g", title="level after / before"),
    ]
    if "q_value" in columns:
        tooltip.append(alt.Tooltip("q_value:Q", format=".2g", title="q value"))
    return (
        alt.Chart()
        .transform_filter(part("change"))
        .mark_rule(color=style.CHANGE_COLOR, strokeDash=[3, 2], strokeWidth=1.8, clip=True)
        .encode(x=x_encoding("x_change", x), tooltip=tooltip)
    )


def _describe(
    drawn: dict[str, pl.DataFrame], x: str, y: str, order: Sequence[str], level: str
) -> str:
    """Describe what the chart draws and found, for screen readers and the page."""
    text = (
        f"{style.axis_title(y)} against {style.axis_title(x)}, one panel per group "
        f"({len(order)}): the median with its {level} CI band and the smooth "
        "trend (dashed)"
    )
    if "trial" in drawn:
        text += ", every trial as a point"
    intervals = drawn.get("interval")
    if intervals is None:
        return text + "; no anomaly."
    found = [
        f"{row[GROUP_FIELD]} at {x} {row['start']}..{row['end']} {row['label']}"
        for row in intervals.head(5).iter_rows(named=True)
    ]
    more = f" and {intervals.height - 5} more" if intervals.height > 5 else ""
    return text + f"; {intervals.height} anomalous interval(s) shaded: " + "; ".join(found) + more
