"""The data side of the charts: reading results, labelling groups, inline tables.

Data travels inline in the Vega-Lite spec, as CSV text with explicit column types.
Each chart draws only what it shows: the frames are reduced in polars first (medians
per cell, heatmap cells binned along x), so a spec stays small, and Altair's row limit
for DataFrames never applies because Altair is never handed a DataFrame.

Layered charts are faceted over groups. Vega-Lite cannot facet layers that carry
their own data, so the layers of one chart share one long table with a ``part``
column, and each layer filters its part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import polars as pl

from regimes._labels import (
    GROUP_FIELD,
    frame_attr,
    group_labels,
    optional_frame,
    report_axes,
    sig3,
)
from regimes.data.schema import validate_trials
from regimes.errors import RegimesInputError

__all__ = [
    "GROUP_FIELD",
    "NOISY_SPREAD",
    "attach_labels",
    "cell_edges",
    "frame_attr",
    "group_labels",
    "inline_data",
    "interval_part",
    "noisy",
    "optional_frame",
    "ratio_label",
    "report_axes",
    "require",
    "result_trials",
    "select_groups",
    "sig3",
    "stack_parts",
]

NOISY_SPREAD = 3.0
"""A panel whose CI or trials reach this many times their cell's median is drawn on a
log axis by default (see :func:`noisy`)."""

_SIG_FIGS = 6


def require(frame: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise a clear error when ``frame`` lacks some of ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RegimesInputError(f"{what} lacks column(s) {missing}; it has {frame.columns}")


def result_trials(result: Any, df: Any, x: str, y: str, group_columns: Sequence[str]) -> Any:
    """Return the trials to draw: ``df`` when given, else the result's ``trials``.

    Warm-ups are dropped by validation. ``None`` when neither is there.
    """
    source = df if df is not None else getattr(result, "trials", None)
    if source is None:
        return None
    return validate_trials(source, x=x, y=y, required=[*group_columns, x, y])


def attach_labels(
    frame: pl.DataFrame, labels: pl.DataFrame, group_columns: Sequence[str]
) -> pl.DataFrame:
    """``frame`` with the ``group`` label of each row; rows of unlabelled groups go."""
    if not group_columns:
        return frame.with_columns(pl.lit("all").alias(GROUP_FIELD))
    return frame.join(labels, on=list(group_columns), how="inner", nulls_equal=True)


def inline_data(frame: pl.DataFrame) -> alt.InlineData:
    """Encode the frame as inline CSV text with explicit column types.

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


def stack_parts(parts: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """One long table of a chart's parts, each row tagged with its part's name."""
    return pl.concat(
        [frame.with_columns(pl.lit(name).alias("part")) for name, frame in parts.items()],
        how="diagonal_relaxed",
    )


def cell_edges(curve: pl.DataFrame, group_columns: Sequence[str], x: str) -> pl.DataFrame:
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


def ratio_label(ratio: str, low: str, high: str) -> pl.Expr:
    """``×8.93 [7.10, 10.4]``: a ratio with its confidence interval, three digits."""

    def fmt(column: str) -> pl.Expr:
        return pl.col(column).map_elements(sig3, return_dtype=pl.String).fill_null("?")

    return pl.concat_str(
        [pl.lit("×"), fmt(ratio), pl.lit(" ["), fmt(low), pl.lit(", "), fmt(high), pl.lit("]")]
    )


def interval_part(
    intervals: pl.DataFrame,
    curve: pl.DataFrame,
    labels: pl.DataFrame,
    group_columns: Sequence[str],
    x: str,
) -> pl.DataFrame:
    """Intervals with drawing edges, a label position and a label.

    The label is the intervals' own ``label`` column when they have one, else
    ``×ratio [CI]`` from ``ratio``, ``ratio_low`` and ``ratio_high``.
    """
    own_label = "label" in intervals.columns
    needed = ["start", "end"] + ([] if own_label else ["ratio", "ratio_low", "ratio_high"])
    require(intervals, needed, "the intervals")
    keys = [c for c in group_columns if c in intervals.columns]
    edges = cell_edges(curve, keys, x)
    drawn = _interval_edges(intervals, edges, keys, x)
    optional = ("ratio", "ratio_low", "ratio_high", "q_value", "p_value", "peak_x", "kind")
    keep = ["start", "end", "x_lo", "x_hi", *[c for c in optional if c in drawn.columns]]
    label = pl.col("label") if own_label else ratio_label("ratio", "ratio_low", "ratio_high")
    drawn = _label_anchor(drawn, edges, keys).with_columns(label.alias("label"))
    drawn = attach_labels(drawn, labels, keys)
    return drawn.select([GROUP_FIELD, "x_mid", "label_x", "label_align", "label", *keep])


def _label_anchor(drawn: pl.DataFrame, edges: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Where an interval's label goes so that it stays inside its panel.

    Centred on the interval in the middle of the panel; near the panel's left edge it
    starts at the interval's start, near the right edge it ends at the interval's end.
    """
    extent = (
        edges.group_by(keys).agg(
            pl.col("x_left").min().alias("_lo"), pl.col("x_right").max().alias("_hi")
        )
        if keys
        else edges.select(pl.col("x_left").min().alias("_lo"), pl.col("x_right").max().alias("_hi"))
    )
    joined = (
        drawn.join(extent, on=keys, how="left", nulls_equal=True)
        if keys
        else drawn.join(extent, how="cross")
    )
    mid = (pl.col("x_lo") + pl.col("x_hi")) / 2
    where = (mid - pl.col("_lo")) / (pl.col("_hi") - pl.col("_lo"))
    return joined.with_columns(
        mid.alias("x_mid"),
        pl.when(where < 0.3)
        .then(pl.col("x_lo"))
        .when(where > 0.7)
        .then(pl.col("x_hi"))
        .otherwise(mid)
        .alias("label_x"),
        pl.when(where < 0.3)
        .then(pl.lit("left"))
        .when(where > 0.7)
        .then(pl.lit("right"))
        .otherwise(pl.lit("center"))
        .alias("label_align"),
    ).drop("_lo", "_hi")


def noisy(data: pl.DataFrame, center: str, highs: Sequence[str]) -> bool:
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


def select_groups(
    labels: pl.DataFrame, groups: Sequence[str] | None
) -> tuple[pl.DataFrame, list[str]]:
    """Keep only the labels in ``groups`` (all when ``None``), in label order."""
    order = labels[GROUP_FIELD].to_list()
    if groups is None:
        return labels, order
    unknown = sorted(set(groups) - set(order))
    if unknown:
        raise RegimesInputError(f"unknown group label(s) {unknown}; known: {order}")
    kept = labels.filter(pl.col(GROUP_FIELD).is_in(list(groups)))
    return kept, [g for g in order if g in set(groups)]
