"""Charts of latency regimes: Altair objects built from polars frames.

Every function returns an Altair chart, so a notebook renders it and :func:`save`
writes it to HTML, PNG or SVG offline (through vl-convert, no browser, no network).

Data travels inline in the Vega-Lite spec, as CSV text with explicit column types.
Each chart draws only what it shows: the frames are reduced in polars first (medians
per cell, heatmap cells binned along x), so a spec stays small, and Altair's row limit
for DataFrames never applies because Altair is never handed a DataFrame.

Layered charts are faceted over groups. Vega-Lite cannot facet layers that carry
their own data, so the layers of one chart share one long table with a ``part``
column, and each layer filters its part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from regimes.data.schema import CASE_COLUMNS, RegimesInputError, validate_trials

__all__ = [
    "GROUP_FIELD",
    "group_labels",
    "latency_chart",
    "overview_heatmap",
    "phase_chart",
    "report_axes",
    "save",
    "speedup_chart",
    "vegalite_version",
]

GROUP_FIELD = "group"
"""Name of the label column that identifies a group in every chart's data."""

_SIG_FIGS = 6
_MEDIAN_COLOR = "#1f77b4"
_TREND_COLOR = "#7f7f7f"
_ANOMALY_COLOR = "#d62728"
_CHANGE_COLOR = "#ff7f0e"
_FACET_WIDTH = 380
_FACET_HEIGHT = 200


# --------------------------------------------------------------------------- helpers


def vegalite_version() -> str | None:
    """The Vega-Lite version Altair writes, as vl-convert names it (``"6.4"``).

    ``None`` when the installed vl-convert does not ship that version, in which case
    vl-convert uses its newest one.
    """
    import vl_convert as vlc

    wanted = alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0]
    return wanted if wanted in vlc.get_vegalite_versions() else None


def report_axes(report: Any) -> tuple[str, str, list[str]]:
    """``(x, y, group_columns)`` of a regime report.

    Read from the report's ``x``, ``y`` and ``group_columns`` attributes; when a
    report lacks them, ``x`` is the first of ``budget`` / ``total_tokens`` in its
    curve, ``y`` defaults to ``latency_s`` and the groups are the case columns
    present in the curve.
    """
    curve = _frame_attr(report, "curve")
    x = getattr(report, "x", None) or next(
        (c for c in ("budget", "total_tokens") if c in curve.columns), None
    )
    if x is None or x not in curve.columns:
        raise RegimesInputError(
            f"the report's curve has no x column (looked for {x!r}); columns: {curve.columns}"
        )
    y = getattr(report, "y", None) or "latency_s"
    groups = getattr(report, "group_columns", None)
    if groups is None:
        groups = [c for c in CASE_COLUMNS if c in curve.columns and c != x]
    return x, str(y), list(groups)


def _frame_attr(obj: Any, name: str) -> pl.DataFrame:
    frame = getattr(obj, name, None)
    if not isinstance(frame, pl.DataFrame):
        raise RegimesInputError(
            f"expected a result with a polars DataFrame attribute {name!r}, "
            f"got {type(obj).__name__}"
        )
    return frame


def _require(frame: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RegimesInputError(f"{what} lacks column(s) {missing}; it has {frame.columns}")


def _format_value(column: str) -> pl.Expr:
    """A human label for one group key value (``cache on``, ``prompt 65``)."""
    col = pl.col(column)
    if column == "use_cache":
        expr = pl.when(col).then(pl.lit("cache on")).otherwise(pl.lit("cache off"))
    elif column == "prompt_tokens":
        expr = pl.lit("prompt ") + col.cast(pl.String)
    else:
        expr = col.cast(pl.String)
    return expr.fill_null(f"{column}=?").alias(column)


def group_labels(keys: pl.DataFrame, group_columns: Sequence[str]) -> tuple[pl.DataFrame, str]:
    """Label each distinct group and describe what all groups share.

    Returns the distinct key rows (sorted) with a ``group`` label column built from the
    columns that vary between groups, and a caption naming the constant ones. With a
    single group every key goes into its label, so a facet is never titled by nothing.
    """
    group_columns = list(group_columns)
    if not group_columns:
        return pl.DataFrame({GROUP_FIELD: ["all"]}), ""
    distinct = keys.select(group_columns).unique().sort(group_columns, nulls_last=True)
    varying = [c for c in group_columns if distinct[c].n_unique() > 1]
    constant = [c for c in group_columns if c not in varying]
    label_columns = varying or group_columns
    labelled = distinct.with_columns(
        pl.concat_str([_format_value(c) for c in label_columns], separator=" · ").alias(GROUP_FIELD)
    )
    caption = ""
    if varying and constant:
        caption = " · ".join(
            str(v) for v in distinct.select([_format_value(c) for c in constant]).row(0)
        )
    return labelled, caption


def _attach_labels(
    frame: pl.DataFrame, labels: pl.DataFrame, group_columns: Sequence[str]
) -> pl.DataFrame:
    if not group_columns:
        return frame.with_columns(pl.lit("all").alias(GROUP_FIELD))
    return frame.join(labels, on=list(group_columns), how="inner", nulls_equal=True)


def _records(frame: pl.DataFrame) -> alt.InlineData:
    """The frame as inline CSV text with explicit column types.

    CSV instead of a list of records: the spec stays a fraction of the size (no key
    repeated per row), and Altair passes one string through its validation instead
    of walking every record, which is what made large charts slow to build. Floats
    are rounded to six significant digits; NaN and null become empty fields, which
    Vega parses as null.
    """
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    tidy = frame.with_columns([pl.col(c).fill_nan(None).round_sig_figs(_SIG_FIGS) for c in floats])
    parse: dict[str, str] = {}
    casts = []
    for name, dtype in tidy.schema.items():
        if dtype.is_numeric():
            parse[name] = "number"
        elif dtype == pl.Boolean:
            parse[name] = "boolean"
        elif dtype != pl.String:
            casts.append(pl.col(name).cast(pl.String))
    text = tidy.with_columns(casts).write_csv(null_value="")
    return alt.InlineData(values=text, format=alt.CsvDataFormat(type="csv", parse=parse))


def _cell_edges(curve: pl.DataFrame, group_columns: Sequence[str], x: str) -> pl.DataFrame:
    """Left and right edges of each x cell: half way to the neighbouring x values.

    A single-budget interval then has the width of one grid step instead of zero,
    whatever the spacing of the grid.
    """
    keys = list(group_columns)
    cells = curve.select([*keys, x]).unique().sort([*keys, x], nulls_last=True)
    over = keys or None
    prev_x = pl.col(x).shift(1).over(over) if over else pl.col(x).shift(1)
    next_x = pl.col(x).shift(-1).over(over) if over else pl.col(x).shift(-1)
    xf = pl.col(x).cast(pl.Float64)
    left = (xf + prev_x) / 2
    right = (xf + next_x) / 2
    # An edge cell mirrors its inner half step; a lone cell gets a width of one.
    return (
        cells.with_columns(left.alias("_left"), right.alias("_right"))
        .with_columns(
            pl.col("_left")
            .fill_null(xf - (pl.col("_right") - xf))
            .fill_null(xf - 0.5)
            .alias("x_left"),
            pl.col("_right")
            .fill_null(xf + (xf - pl.col("_left")))
            .fill_null(xf + 0.5)
            .alias("x_right"),
        )
        .drop("_left", "_right")
    )


def _interval_edges(
    intervals: pl.DataFrame, edges: pl.DataFrame, group_columns: Sequence[str], x: str
) -> pl.DataFrame:
    """Add ``x_lo`` / ``x_hi`` drawing edges to intervals given by ``start`` and ``end``."""
    keys = list(group_columns)
    left = edges.select([*keys, pl.col(x).alias("start"), pl.col("x_left").alias("x_lo")])
    right = edges.select([*keys, pl.col(x).alias("end"), pl.col("x_right").alias("x_hi")])
    cast = intervals.with_columns(
        pl.col("start").cast(edges.schema[x]), pl.col("end").cast(edges.schema[x])
    )
    joined = cast.join(left, on=[*keys, "start"], how="left", nulls_equal=True).join(
        right, on=[*keys, "end"], how="left", nulls_equal=True
    )
    return joined.with_columns(
        pl.col("x_lo").fill_null(pl.col("start").cast(pl.Float64)),
        pl.col("x_hi").fill_null(pl.col("end").cast(pl.Float64)),
    )


def _ratio_label(ratio: str, low: str, high: str) -> pl.Expr:
    """``×8.93 [7.10, 10.4]``: a ratio with its confidence interval, three digits."""

    def fmt(column: str) -> pl.Expr:
        return pl.col(column).round_sig_figs(3).cast(pl.String).fill_null("?")

    return pl.concat_str(
        [pl.lit("×"), fmt(ratio), pl.lit(" ["), fmt(low), pl.lit(", "), fmt(high), pl.lit("]")]
    )


def _facet(
    layers: list[alt.Chart],
    data: pl.DataFrame,
    order: list[str],
    title: str,
    columns: int,
    independent_y: bool,
) -> alt.FacetChart:
    chart = (
        alt.layer(*layers, data=_records(data))
        .properties(width=_FACET_WIDTH, height=_FACET_HEIGHT)
        .facet(
            facet=alt.Facet(
                f"{GROUP_FIELD}:N",
                title=None,
                sort=order,
                header=alt.Header(labelFontSize=12, labelFontWeight="bold"),
            ),
            columns=max(1, min(columns, len(order))),
        )
    )
    if independent_y:
        chart = chart.resolve_scale(y="independent")
    return chart.properties(title=title)


def _part(name: str) -> str:
    return f"datum.part == '{name}'"


def _x_axis(x: str) -> alt.X:
    return alt.X(f"{x}:Q", title=x, scale=alt.Scale(zero=False, nice=False))


def _interval_layers(x: str, what: str, label_at_top: bool) -> list[alt.Chart]:
    """Shaded intervals (full height) with their ratio and CI printed inside.

    The label goes where the curve is not: at the foot of the panel for a spike or a
    step up, at the top for a dip (a speedup collapse).
    """
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip("start:Q", title=f"{what} start ({x})"),
        alt.Tooltip("end:Q", title=f"{what} end ({x})"),
        alt.Tooltip("ratio:Q", format=".3g"),
        alt.Tooltip("ratio_low:Q", format=".3g", title="ratio CI low"),
        alt.Tooltip("ratio_high:Q", format=".3g", title="ratio CI high"),
        alt.Tooltip("q_value:Q", format=".2g", title="q value"),
    ]
    base = alt.Chart().transform_filter(_part("interval"))
    shade = base.mark_rect(color=_ANOMALY_COLOR, opacity=0.13).encode(
        x=alt.X("x_lo:Q"), x2="x_hi:Q", tooltip=tooltip
    )
    label = base.mark_text(
        color=_ANOMALY_COLOR,
        fontSize=10,
        fontWeight="bold",
        baseline="top" if label_at_top else "bottom",
    ).encode(
        x=alt.X("x_mid:Q"),
        y=alt.value(3 if label_at_top else _FACET_HEIGHT - 3),
        text="label:N",
        tooltip=tooltip,
    )
    return [shade, label]


def _interval_part(
    intervals: pl.DataFrame,
    curve: pl.DataFrame,
    labels: pl.DataFrame,
    group_columns: Sequence[str],
    x: str,
) -> pl.DataFrame:
    """Intervals with drawing edges, a label position and a ``×ratio [CI]`` label."""
    _require(intervals, ["start", "end", "ratio", "ratio_low", "ratio_high"], "the intervals")
    keys = [c for c in group_columns if c in intervals.columns]
    edges = _cell_edges(curve, keys, x)
    drawn = _interval_edges(intervals, edges, keys, x)
    keep = ["start", "end", "x_lo", "x_hi", "ratio", "ratio_low", "ratio_high"]
    keep += [c for c in ("q_value", "p_value", "peak_x", "kind", "recovered") if c in drawn.columns]
    drawn = _attach_labels(drawn, labels, keys).with_columns(
        ((pl.col("x_lo") + pl.col("x_hi")) / 2).alias("x_mid"),
        _ratio_label("ratio", "ratio_low", "ratio_high").alias("label"),
    )
    return drawn.select([GROUP_FIELD, "x_mid", "label", *keep])


def _stack_parts(parts: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """One long table of a chart's parts, each row tagged with its part's name."""
    return pl.concat(
        [frame.with_columns(pl.lit(name).alias("part")) for name, frame in parts.items()],
        how="diagonal_relaxed",
    )


NOISY_SPREAD = 3.0
"""A panel whose CI or trials reach this many times their cell's median is drawn on a
log axis by default (see :func:`_noisy`)."""


def _noisy(data: pl.DataFrame, center: str, highs: Sequence[str]) -> bool:
    """Whether some value in ``highs`` lies ``NOISY_SPREAD`` times above ``center``.

    On a linear axis such a value (a CI stretched by a few slow trials, a stray trial)
    sets the scale and flattens the curve to the floor of its panel; on a log axis
    the curve keeps its shape and the outlier its place. A spike does not trigger
    this: its trials sit with their own cell's median.
    """
    worst = data.select(
        pl.max_horizontal([(pl.col(h) / pl.col(center)).max() for h in highs])
    ).item()
    return worst is not None and worst >= NOISY_SPREAD


def _value_axis(log_y: bool, zero: bool = False) -> alt.Scale:
    # A nice log domain snaps to whole decades and can squash the data into a third of
    # the panel, so the log axis ends at the data.
    return alt.Scale(type="log", nice=False) if log_y else alt.Scale(zero=zero)


# --------------------------------------------------------------------------- charts


def latency_chart(
    report: Any,
    df: Any = None,
    *,
    log_y: bool | None = None,
    groups: Sequence[str] | None = None,
    columns: int = 2,
    title: str | None = None,
) -> alt.FacetChart:
    """Latency against the budget, one panel per group.

    Layers, bottom to top: the anomalous intervals shaded and labelled ``×ratio [CI]``
    (ratio of the interval's level over the trend set by its flanks, with its
    bootstrap CI); every measured trial as a faint point (when the trial table ``df``
    is given; warm-ups dropped); the CI band of the median; the smooth trend
    (``baseline``, dashed); the median line with tooltips; change points as vertical
    rules at the midpoint between ``x_before`` and ``x_after`` (only the significant
    ones when the frame has a ``significant`` column).

    ``groups`` restricts the panels to those group labels (see :func:`group_labels`);
    ``log_y`` puts latency on a log axis, where a constant ratio is a constant gap;
    by default (``None``) the axis is logarithmic when the CI or a trial reaches
    :data:`NOISY_SPREAD` times its cell's median, linear otherwise. Each panel has
    its own y scale.
    """
    x, y, group_columns = report_axes(report)
    curve = _frame_attr(report, "curve")
    _require(curve, [x, "median", "ci_low", "ci_high"], "the report's curve")
    labels, caption = group_labels(curve, group_columns)
    order = labels[GROUP_FIELD].to_list()
    if groups is not None:
        unknown = sorted(set(groups) - set(order))
        if unknown:
            raise RegimesInputError(f"unknown group label(s) {unknown}; known: {order}")
        labels = labels.filter(pl.col(GROUP_FIELD).is_in(list(groups)))
        order = [g for g in order if g in set(groups)]

    curve_cols = [x, "median", "ci_low", "ci_high"] + [
        c for c in ("baseline", "ratio", "n") if c in curve.columns
    ]
    parts = {
        "curve": _attach_labels(curve, labels, group_columns).select([GROUP_FIELD, *curve_cols])
    }
    anomalies = getattr(report, "anomalies", None)
    if isinstance(anomalies, pl.DataFrame) and anomalies.height:
        parts["interval"] = _interval_part(anomalies, curve, labels, group_columns, x)
    change_points = getattr(report, "change_points", None)
    if isinstance(change_points, pl.DataFrame) and "significant" in change_points.columns:
        change_points = change_points.filter(pl.col("significant"))
    if isinstance(change_points, pl.DataFrame) and change_points.height:
        _require(change_points, ["x_before", "x_after", "ratio"], "the report's change_points")
        keys = [c for c in group_columns if c in change_points.columns]
        extra = [c for c in ("q_value", "p_value") if c in change_points.columns]
        parts["change"] = _attach_labels(change_points, labels, keys).select(
            GROUP_FIELD,
            ((pl.col("x_before") + pl.col("x_after")) / 2).alias("x_change"),
            "x_before",
            "x_after",
            pl.col("ratio").alias("change_ratio"),
            *extra,
        )
    if df is not None:
        trials = validate_trials(df, x=x, y=y, required=[*group_columns, x, y])
        parts["trial"] = _attach_labels(
            trials.select([*group_columns, x, y]), labels, group_columns
        ).select([GROUP_FIELD, x, y])
    # Parts left empty by the group selection draw nothing: their layers are left out.
    drawn = {name: frame for name, frame in parts.items() if frame.height}
    data = _stack_parts(drawn)

    if log_y is None:
        highs = ["ci_high"]
        if "trial" in drawn:
            highs.append("trial_max")
            spread = drawn["trial"].group_by(GROUP_FIELD, x).agg(pl.col(y).max().alias("trial_max"))
            cells = drawn["curve"].join(spread, on=[GROUP_FIELD, x], how="left")
        else:
            cells = drawn["curve"]
        log_y = _noisy(cells, "median", highs)
    y_scale = _value_axis(log_y)
    y_title = f"{y} (median, CI{', log scale' if log_y else ''})"
    layers: list[alt.Chart] = []
    if "interval" in drawn:
        layers += _interval_layers(x, "anomaly", label_at_top=False)
    if "trial" in drawn:
        layers.append(
            alt.Chart()
            .transform_filter(_part("trial"))
            .mark_circle(size=9, color=_TREND_COLOR, opacity=0.35)
            .encode(
                x=_x_axis(x),
                y=alt.Y(f"{y}:Q", scale=y_scale, title=y_title),
                tooltip=[alt.Tooltip(f"{x}:Q"), alt.Tooltip(f"{y}:Q", format=".4g", title="trial")],
            )
        )
    curve_base = alt.Chart().transform_filter(_part("curve"))
    layers.append(
        curve_base.mark_area(color=_MEDIAN_COLOR, opacity=0.22).encode(
            x=_x_axis(x), y=alt.Y("ci_low:Q", scale=y_scale, title=y_title), y2="ci_high:Q"
        )
    )
    line_fields = ["median"] + (["baseline"] if "baseline" in curve.columns else [])
    layers.append(
        curve_base.transform_fold(line_fields, as_=["series", "value"])
        .mark_line(strokeWidth=1.6)
        .encode(
            x=_x_axis(x),
            y=alt.Y("value:Q", scale=y_scale, title=y_title),
            color=alt.Color(
                "series:N",
                title=None,
                scale=alt.Scale(domain=["median", "baseline"], range=[_MEDIAN_COLOR, _TREND_COLOR]),
                legend=alt.Legend(
                    orient="top", labelExpr="datum.label == 'baseline' ? 'smooth trend' : 'median'"
                ),
            ),
            strokeDash=alt.StrokeDash(
                "series:N",
                scale=alt.Scale(domain=["median", "baseline"], range=[[1, 0], [5, 4]]),
                legend=None,
            ),
        )
    )
    tooltip = [alt.Tooltip(f"{GROUP_FIELD}:N", title="group"), alt.Tooltip(f"{x}:Q")]
    tooltip += [
        alt.Tooltip(f"{c}:Q", format=".4g")
        for c in ("median", "ci_low", "ci_high", "baseline", "ratio")
        if c in curve.columns
    ]
    if "n" in curve.columns:
        tooltip.append(alt.Tooltip("n:Q", title="trials"))
    layers.append(
        curve_base.mark_point(color=_MEDIAN_COLOR, size=14, filled=True).encode(
            x=_x_axis(x), y=alt.Y("median:Q", scale=y_scale, title=y_title), tooltip=tooltip
        )
    )
    if "change" in drawn:
        layers.append(
            alt.Chart()
            .transform_filter(_part("change"))
            .mark_rule(color=_CHANGE_COLOR, strokeDash=[3, 2], strokeWidth=1.5)
            .encode(
                x=alt.X("x_change:Q"),
                tooltip=[
                    alt.Tooltip("x_before:Q", title=f"last {x} before"),
                    alt.Tooltip("x_after:Q", title=f"first {x} after"),
                    alt.Tooltip("change_ratio:Q", format=".3g", title="level after / before"),
                    *[
                        alt.Tooltip(f"{c}:Q", format=".2g")
                        for c in ("q_value",)
                        if c in change_points.columns
                    ],
                ],
            )
        )
    heading = title or f"{y} by {x}" + (f" ({caption})" if caption else "")
    return _facet(layers, data, order, heading, columns, independent_y=True)


def speedup_chart(
    speedup_result: Any,
    *,
    x: str | None = None,
    columns: int = 2,
    log_y: bool | None = None,
    title: str | None = None,
) -> alt.FacetChart:
    """KV-cache speedup (cache-off latency / cache-on latency) against the budget.

    Per group: the speedup line with its CI band, a rule at 1 (no speedup), the trend
    if the result carries one, and the collapse intervals (significant dips below
    the trend) shaded and labelled with their ratio and CI. ``log_y`` as in
    :func:`latency_chart` (by default log when a CI reaches :data:`NOISY_SPREAD` times
    its speedup).
    """
    speed = _frame_attr(speedup_result, "speedup")
    x = (
        x
        or getattr(speedup_result, "x", None)
        or next((c for c in ("budget", "total_tokens") if c in speed.columns), None)
    )
    if x is None or x not in speed.columns:
        raise RegimesInputError(f"the speedup frame has no x column; columns: {speed.columns}")
    _require(speed, [x, "speedup", "ci_low", "ci_high"], "the speedup frame")
    group_columns = getattr(speedup_result, "group_columns", None)
    if group_columns is None:
        group_columns = [
            c for c in CASE_COLUMNS if c in speed.columns and c not in (x, "use_cache")
        ]
    group_columns = list(group_columns)
    labels, caption = group_labels(speed, group_columns)
    order = labels[GROUP_FIELD].to_list()
    trend = next((c for c in ("baseline", "trend") if c in speed.columns), None)
    cols = [x, "speedup", "ci_low", "ci_high"] + ([trend] if trend else [])
    cols += [c for c in ("off_median", "on_median", "ratio") if c in speed.columns]
    parts = {"curve": _attach_labels(speed, labels, group_columns).select([GROUP_FIELD, *cols])}
    collapses = getattr(speedup_result, "collapses", None)
    if isinstance(collapses, pl.DataFrame) and collapses.height:
        parts["interval"] = _interval_part(collapses, speed, labels, group_columns, x)
    data = _stack_parts(parts)

    if log_y is None:
        log_y = _noisy(parts["curve"], "speedup", ["ci_high"])
    y_scale = _value_axis(log_y, zero=not log_y)
    y_title = f"speedup, cache off / on (CI{', log scale' if log_y else ''})"
    base = alt.Chart().transform_filter(_part("curve"))
    layers: list[alt.Chart] = []
    if "interval" in parts:
        layers += _interval_layers(x, "collapse", label_at_top=True)
    layers.append(
        base.mark_area(color=_MEDIAN_COLOR, opacity=0.22).encode(
            x=_x_axis(x), y=alt.Y("ci_low:Q", scale=y_scale, title=y_title), y2="ci_high:Q"
        )
    )
    if trend:
        layers.append(
            base.mark_line(color=_TREND_COLOR, strokeDash=[5, 4]).encode(
                x=_x_axis(x), y=alt.Y(f"{trend}:Q", scale=y_scale, title=y_title)
            )
        )
    tooltip = [alt.Tooltip(f"{GROUP_FIELD}:N", title="group"), alt.Tooltip(f"{x}:Q")]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".3g") for c in cols[1:]]
    layers.append(
        base.mark_line(color=_MEDIAN_COLOR, point=alt.OverlayMarkDef(size=14, filled=True)).encode(
            x=_x_axis(x), y=alt.Y("speedup:Q", scale=y_scale, title=y_title), tooltip=tooltip
        )
    )
    layers.append(
        # One rule per panel: aggregate the panel's rows away before drawing.
        base.transform_aggregate(rows="count()")
        .mark_rule(color="black", strokeWidth=0.8, opacity=0.5)
        .encode(y=alt.datum(1))
    )
    heading = title or f"KV-cache speedup by {x}" + (f" ({caption})" if caption else "")
    return _facet(layers, data, order, heading, columns, independent_y=True)


def phase_chart(
    df: Any,
    *,
    x: str = "budget",
    by: Sequence[str] | None = None,
    columns: int = 2,
    title: str | None = None,
) -> alt.FacetChart:
    """Median prefill and decode time stacked per budget, one panel per group.

    Needs instrumented trials (``prefill_s`` and ``decode_s`` measured). Medians are
    taken per phase, so the stack is the sum of the phase medians; the black tick is
    the median end-to-end latency of the same trials, which shows what the phases
    leave out.
    """
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
    group_columns = (
        list(by) if by is not None else [c for c in CASE_COLUMNS if c in frame.columns and c != x]
    )
    _require(frame, group_columns, "the trial table")
    cells = frame.group_by([*group_columns, x]).agg(
        pl.col("prefill_s").median(),
        pl.col("decode_s").median(),
        pl.col("latency_s").median(),
        pl.len().alias("n"),
    )
    edges = _cell_edges(cells, group_columns, x)
    cells = cells.join(edges, on=[*group_columns, x], nulls_equal=True)
    # The bars take 80% of a cell, so neighbouring budgets stay apart.
    half = (pl.col("x_right") - pl.col("x_left")) * 0.4
    stacked = pl.concat(
        [
            cells.with_columns(
                pl.lit("prefill").alias("phase"),
                pl.lit(0.0).alias("y0"),
                pl.col("prefill_s").alias("y1"),
                pl.col("prefill_s").alias("seconds"),
            ),
            cells.with_columns(
                pl.lit("decode").alias("phase"),
                pl.col("prefill_s").alias("y0"),
                (pl.col("prefill_s") + pl.col("decode_s")).alias("y1"),
                pl.col("decode_s").alias("seconds"),
            ),
        ]
    ).with_columns(
        (pl.col(x).cast(pl.Float64) - half).alias("x0"),
        (pl.col(x).cast(pl.Float64) + half).alias("x1"),
    )
    labels, caption = group_labels(cells, group_columns)
    order = labels[GROUP_FIELD].to_list()
    data = _attach_labels(stacked, labels, group_columns).select(
        GROUP_FIELD, x, "phase", "x0", "x1", "y0", "y1", "seconds", "latency_s", "n"
    )
    tooltip = [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip(f"{x}:Q"),
        alt.Tooltip("phase:N"),
        alt.Tooltip("seconds:Q", format=".4g", title="median s"),
        alt.Tooltip("latency_s:Q", format=".4g", title="median latency_s"),
        alt.Tooltip("n:Q", title="trials"),
    ]
    bars = (
        alt.Chart()
        .mark_rect()
        .encode(
            x=alt.X("x0:Q", title=x, scale=alt.Scale(zero=False, nice=False)),
            x2="x1:Q",
            y=alt.Y("y0:Q", title="median seconds"),
            y2="y1:Q",
            color=alt.Color(
                "phase:N",
                scale=alt.Scale(domain=["prefill", "decode"], range=["#9467bd", "#17becf"]),
                legend=alt.Legend(orient="top", title=None),
            ),
            tooltip=tooltip,
        )
    )
    total = (
        alt.Chart()
        .transform_filter("datum.phase == 'decode'")
        .mark_tick(color="black", thickness=1.5)
        .encode(x=alt.X(f"{x}:Q"), y=alt.Y("latency_s:Q"), tooltip=tooltip)
    )
    heading = title or f"prefill and decode by {x}" + (f" ({caption})" if caption else "")
    return _facet([bars, total], data, order, heading, columns, independent_y=True)


def overview_heatmap(
    report: Any,
    *,
    max_columns: int = 200,
    cell_height: int = 12,
    width: int = 800,
    clip_ratio: float = 32.0,
    title: str | None = None,
) -> alt.LayerChart:
    """Every group against x, coloured by the ratio of the median over the trend.

    Colour is on a log scale diverging around 1 (red slower than trend, blue faster),
    clipped at ``clip_ratio`` either way. Anomalous intervals are outlined in black.

    When there are more than ``max_columns`` distinct x values, x is cut into
    ``max_columns`` equal-width bins and each (group, bin) cell shows the ratio
    furthest from 1 in log terms, so a one-budget spike survives the binning instead
    of being averaged away. 50 groups x 500 budgets thus draws at most 10,000 cells.
    """
    x, _, group_columns = report_axes(report)
    curve = _frame_attr(report, "curve")
    _require(curve, [x, "ratio"], "the report's curve")
    if max_columns < 1:
        raise RegimesInputError(f"max_columns must be at least 1, got {max_columns}")
    labels, caption = group_labels(curve, group_columns)
    order = labels[GROUP_FIELD].to_list()
    cells = curve.filter(
        pl.col("ratio").is_not_null() & pl.col("ratio").is_finite() & (pl.col("ratio") > 0)
    )
    if cells.height == 0:
        raise RegimesInputError("the report's curve has no finite positive ratio to colour")
    edges = _cell_edges(curve, group_columns, x)
    cells = cells.join(edges, on=[*group_columns, x], nulls_equal=True)
    n_x = cells[x].n_unique()
    if n_x > max_columns:
        lo, hi = float(cells["x_left"].min()), float(cells["x_right"].max())
        width_bin = (hi - lo) / max_columns
        bin_index = ((pl.col(x).cast(pl.Float64) - lo) / width_bin).floor().clip(0, max_columns - 1)
        cells = (
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
    else:
        cells = cells.with_columns(
            pl.col(x).alias("x_first"), pl.col(x).alias("x_last"), pl.lit(1).alias("n_x")
        )
    cells = _attach_labels(cells, labels, group_columns).select(
        GROUP_FIELD, "x_left", "x_right", "x_first", "x_last", "ratio", "n_x"
    )
    top = float(cells.select(pl.col("ratio").log().abs().max()).item())
    bound = min(max(math.exp(top), 1.5), clip_ratio)
    steps = [2.0**k for k in range(-5, 6) if 1 / bound <= 2.0**k <= bound]
    y = alt.Y(f"{GROUP_FIELD}:N", sort=order, title=None, axis=alt.Axis(labelLimit=320))
    x_scale = alt.Scale(zero=False, nice=False)
    heat = (
        alt.Chart(_records(cells))
        .mark_rect()
        .encode(
            x=alt.X("x_left:Q", title=x, scale=x_scale),
            x2="x_right:Q",
            y=y,
            color=alt.Color(
                "ratio:Q",
                title="median / trend",
                scale=alt.Scale(
                    type="log",
                    scheme="redblue",
                    reverse=True,
                    domain=[1 / bound, bound],
                    domainMid=1,
                    clamp=True,
                ),
                legend=alt.Legend(
                    values=steps,
                    format=".3~g",
                    gradientLength=max(120, min(300, cell_height * len(order))),
                ),
            ),
            tooltip=[
                alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
                alt.Tooltip("x_first:Q", title=f"first {x}"),
                alt.Tooltip("x_last:Q", title=f"last {x}"),
                alt.Tooltip("ratio:Q", format=".3g", title="median / trend (most extreme)"),
                alt.Tooltip("n_x:Q", title=f"{x} values in cell"),
            ],
        )
    )
    layers: list[alt.Chart] = [heat]
    anomalies = getattr(report, "anomalies", None)
    if isinstance(anomalies, pl.DataFrame) and anomalies.height:
        outlined = _interval_part(anomalies, curve, labels, group_columns, x)
        layers.append(
            alt.Chart(_records(outlined))
            .mark_rect(filled=False, stroke="black", strokeWidth=1.5)
            .encode(
                x=alt.X("x_lo:Q", scale=x_scale),
                x2="x_hi:Q",
                y=y,
                tooltip=[
                    alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
                    alt.Tooltip("start:Q"),
                    alt.Tooltip("end:Q"),
                    alt.Tooltip("label:N", title="ratio [CI]"),
                ],
            )
        )
    heading = title or f"median / smooth trend by group and {x}" + (
        f" ({caption})" if caption else ""
    )
    return alt.layer(*layers).properties(width=width, height=alt.Step(cell_height), title=heading)


# --------------------------------------------------------------------------- output


def save(chart: alt.TopLevelMixin, path: str | Path, *, scale: float = 2.0) -> Path:
    """Write a chart by the suffix of ``path``: ``.html``, ``.png``, ``.svg`` or ``.json``.

    Everything happens offline: vl-convert renders PNG and SVG without a browser,
    and the HTML inlines the Vega, Vega-Lite and vega-embed libraries, so it opens
    with no network. ``scale`` multiplies the PNG resolution.
    """
    import vl_convert as vlc

    target = Path(path)
    suffix = target.suffix.lower()
    writers = {".html", ".png", ".svg", ".json"}
    if suffix not in writers:
        raise RegimesInputError(
            f"cannot save a chart as {target.name!r}: use one of {sorted(writers)}"
        )
    spec = chart.to_dict()
    version = vegalite_version()
    if suffix == ".png":
        payload: bytes | str = vlc.vegalite_to_png(spec, vl_version=version, scale=scale)
    elif suffix == ".svg":
        payload = vlc.vegalite_to_svg(spec, vl_version=version)
    elif suffix == ".html":
        payload = vlc.vegalite_to_html(spec, vl_version=version, bundle=True)
    else:
        payload = json.dumps(spec, indent=1)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(payload, bytes):
            target.write_bytes(payload)
        else:
            target.write_text(payload, encoding="utf-8")
    except OSError as exc:
        raise RegimesInputError(f"cannot write {str(target)!r}: {exc.strerror}") from None
    return target
