"""Charts of the explanations: estimates with their CIs, boundaries per prompt length.

The phase, memory and backend explanations each estimate a few quantities per anomaly
with a confidence interval; they share one chart, an interval plot: one row per
anomaly (or comparison), one dodged mark per quantity, its CI as a bar, its value
printed beside it, and a rule at the value that means "no effect".
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any, cast

import altair as alt
import polars as pl

from regimes.viz import _style as style
from regimes.viz._frames import (
    GROUP_FIELD,
    frame_attr,
    group_labels,
    inline_data,
    require,
    sig3,
)
from regimes.viz._layout import ChartText
from regimes.viz._phases import phase_chart

_ROW_HEIGHT = 26


def interval_plot(
    rows: pl.DataFrame, *, x_title: str, log_x: bool, reference: float, text: ChartText
) -> alt.LayerChart:
    """Estimates with CIs: ``item`` rows, ``series`` dodged and coloured.

    ``rows`` holds ``item``, ``series``, ``estimate``, ``low``, ``high`` and ``label``
    (the text printed beside the estimate); ``reference`` is the value that means
    no effect (1 for a ratio, 0 for a difference), drawn as a dashed rule. With no
    rows, the chart says so in words instead.
    """
    if rows.height == 0:
        return nothing_to_draw(text)
    series = list(dict.fromkeys(rows["series"].to_list()))
    color = alt.Color(
        "series:N",
        title=None,
        sort=series,
        scale=alt.Scale(domain=series, range=list(style.PALETTE[: len(series)])),
        legend=style.legend(),
    )
    scale = alt.Scale(type="log", nice=False) if log_x else alt.Scale(zero=False)
    items = list(dict.fromkeys(rows["item"].to_list()))
    y = alt.Y("item:N", title=None, sort=items, axis=alt.Axis(labelLimit=0))
    tooltip = [
        alt.Tooltip("item:N", title="anomaly"),
        alt.Tooltip("series:N", title="quantity"),
        alt.Tooltip("label:N", title="estimate [CI]"),
    ]
    base = alt.Chart().encode(
        y=y, yOffset=alt.YOffset("series:N", sort=series), color=color, tooltip=tooltip
    )
    layers = [
        base.mark_rule(strokeWidth=2.5).encode(
            # labels at least 4 px apart: on a narrow log axis 3.4 and 3.8 ran together
            x=alt.X("low:Q", title=x_title, scale=scale, axis=alt.Axis(labelSeparation=4)),
            x2="high:Q",
        ),
        base.mark_point(filled=True, size=60).encode(x=alt.X("estimate:Q")),
        base.mark_text(align="left", dx=6, fontSize=10).encode(x=alt.X("high:Q"), text="label:N"),
        alt.Chart()
        .transform_aggregate(rows="count()")
        .transform_calculate(what=f"'{reference:g}: no effect'")
        .mark_rule(color=style.BLACK, strokeDash=[4, 3], opacity=0.6)
        .encode(x=alt.datum(reference), tooltip=[alt.Tooltip("what:N", title="rule")]),
    ]
    chart = alt.layer(*layers, data=inline_data(rows)).properties(
        width=420,
        height=alt.Step(_ROW_HEIGHT),
        title=style.title(text.heading, text.subtitle),
        description=text.description,
    )
    return cast(alt.LayerChart, chart)


def nothing_to_draw(text: ChartText) -> alt.LayerChart:
    """Return a small chart that says there is no estimate to draw, and why."""
    lines = textwrap.wrap(text.description, 70, break_on_hyphens=False)
    note = pl.DataFrame({"note": ["\n".join(lines)]})
    mark = (
        alt.Chart(inline_data(note))
        .mark_text(align="left", baseline="top", fontSize=12, color=style.GREY, lineBreak="\n")
        .encode(x=alt.value(0), y=alt.value(4), text="note:N", tooltip=["note:N"])
    )
    chart = alt.layer(mark).properties(
        width=420,
        height=18 * len(lines) + 8,
        title=style.title(text.heading, text.subtitle),
        description=text.description,
        view=alt.ViewBackground(stroke=None),
    )
    return cast(alt.LayerChart, chart)


def _items(table: pl.DataFrame, group_columns: Sequence[str]) -> tuple[list[str], str]:
    """Name each row ``<group> 512..624`` and say what every row shares.

    Groups are named as the charts name them (by what varies); with one group its
    name goes to the subtitle and the rows are named by their interval alone.
    """
    keys = [c for c in group_columns if c in table.columns]
    spans = [f"{s}..{e}" for s, e in table.select("start", "end").iter_rows()]
    if not keys:
        return spans, ""
    labels, caption = group_labels(table, keys)
    named = table.join(labels, on=keys, how="left", nulls_equal=True)[GROUP_FIELD].to_list()
    if labels.height == 1:
        return spans, " · ".join(s for s in (named[0], caption) if s)
    return [f"{g} {s}" for g, s in zip(named, spans, strict=True)], caption


_Quantity = tuple[str, str, str, str]
"""``(series name, estimate column, CI low column, CI high column)``."""


def _estimates(
    table: pl.DataFrame,
    group_columns: Sequence[str],
    quantities: Sequence[_Quantity],
    unit: str,
    suffix: str = "",
) -> tuple[pl.DataFrame, str]:
    """Build the interval plot's rows (one per table row and quantity) and subtitle.

    ``unit`` ``"x"`` prints ratios (``×10.8 [10.0, 11.6]``), ``"s"`` signed seconds;
    ``suffix`` names a column whose value ends each row's name (``vs cuda``).
    """
    items, subtitle = _items(table, group_columns)
    records = []
    for item, row in zip(items, table.iter_rows(named=True), strict=True):
        name = f"{item} vs {row[suffix]}" if suffix else item
        for series, est, low, high in quantities:
            value, lo, hi = row.get(est), row.get(low), row.get(high)
            lo, hi = (value, value) if lo is None or hi is None else (lo, hi)
            if value is None:
                continue
            label = (
                f"×{sig3(value)} [{sig3(lo)}, {sig3(hi)}]"
                if unit == "x"
                else f"{value:+.3g} s [{lo:+.3g}, {hi:+.3g}]"
            )
            records.append((name, series, value, lo, hi, label))
    columns = ["item", "series", "estimate", "low", "high", "label"]
    return pl.DataFrame(records, schema=columns, orient="row"), subtitle


def backends_chart(result: Any) -> alt.LayerChart:
    """Chart an anomaly's ratio over trend on its backend and on each other backend.

    Parameters
    ----------
    result : BackendResult
        The result of :func:`regimes.compare_backends`.

    Returns
    -------
    altair.LayerChart
        Per comparison: the ratio on the anomaly's backend, on the other backend and
        their ratio, each with its CI, on a log axis with a rule at 1.

    Raises
    ------
    RegimesInputError
        When the result has no ``comparisons`` frame.
    """
    table = frame_attr(result, "comparisons")
    require(table, ["start", "end", "other_backend", "ratio", "other_ratio"], "the comparisons")
    quantities = [
        ("its backend: ratio over trend", "ratio", "ratio_low", "ratio_high"),
        ("other backend: ratio over trend", "other_ratio", "other_low", "other_high"),
        ("ratio of ratios", "ratio_of_ratios", "ratio_of_ratios_low", "ratio_of_ratios_high"),
    ]
    group_columns = list(getattr(result, "group_columns", ()))
    rows, subtitle = _estimates(table, group_columns, quantities, "x", suffix="other_backend")
    description = (
        f"Ratios over trend with CIs for {table.height} comparison(s) of an anomaly with "
        "the same interval on another backend, and their ratio."
    )
    text = ChartText("Is the anomaly specific to its backend?", subtitle, description)
    x_title = "ratio over the smooth trend (×, log scale)"
    return interval_plot(rows, x_title=x_title, log_x=True, reference=1.0, text=text)


def memory_chart(result: Any) -> alt.LayerChart:
    """Chart each anomaly's ratio over trend before and after holding memory fixed.

    Parameters
    ----------
    result : MemoryResult
        The result of :func:`regimes.memory_confound`.

    Returns
    -------
    altair.LayerChart
        Per anomaly: the unadjusted and the memory-adjusted ratio with their CIs, on
        a log axis with a rule at 1 (no anomaly left).

    Raises
    ------
    RegimesInputError
        When the result has no ``effects`` frame.
    """
    table = frame_attr(result, "effects")
    require(table, ["start", "end", "ratio", "adjusted_ratio"], "the effects")
    params = getattr(result, "params", None) or {}
    memory = str(getattr(result, "memory", None) or params.get("memory", "memory"))
    quantities = [
        ("ratio over trend", "ratio", "ratio_low", "ratio_high"),
        (f"with {memory} held fixed", "adjusted_ratio", "adjusted_low", "adjusted_high"),
    ]
    group_columns = list(getattr(result, "group_columns", ()))
    rows, subtitle = _estimates(table, group_columns, quantities, "x")
    description = (
        f"For {table.height} anomaly(ies): the ratio over trend, and the same ratio with "
        f"{memory} held fixed, with CIs."
    )
    text = ChartText(f"Does memory ({memory}) explain the anomaly?", subtitle, description)
    x_title = "ratio over the smooth trend (×, log scale)"
    return interval_plot(rows, x_title=x_title, log_x=True, reference=1.0, text=text)


def phases_result_chart(result: Any, df: Any = None) -> alt.TopLevelMixin:
    """Chart the phases of each anomaly: stacked per budget, or the excess per phase.

    Parameters
    ----------
    result : PhaseResult
        The result of :func:`regimes.attribute_phases`.
    df : polars.DataFrame or pandas.DataFrame, optional
        The instrumented trials. Default: the result's ``trials`` when it keeps them.

    Returns
    -------
    altair.TopLevelMixin
        With trials: :func:`phase_chart` with each anomaly shaded and labelled with
        the share of its excess that decode carries. Without: the excess seconds per
        trial over trend of latency, prefill and decode with their CIs.

    Raises
    ------
    RegimesInputError
        When the result has no ``phases`` frame.
    """
    table = frame_attr(result, "phases")
    require(table, ["start", "end"], "the phases")
    group_columns = list(getattr(result, "group_columns", ()))
    trials = df if df is not None else getattr(result, "trials", None)
    if trials is not None:
        shares = table.with_columns(_share_label().alias("label"))
        x = str(getattr(result, "x", None) or "budget")
        return phase_chart(trials, x=x, by=group_columns, intervals=shares)
    return phase_excess_chart(result)


def _share_label() -> pl.Expr:
    """``decode 98% [95, 100%]`` of the excess, or why the share is not given."""

    def pct(column: str) -> pl.Expr:
        return (pl.col(column) * 100).round(0).cast(pl.Int64)

    share = pl.format(
        "decode {}% [{}, {}%]",
        pct("decode_share"),
        pct("decode_share_low"),
        pct("decode_share_high"),
    )
    return (
        pl.when(pl.col("decode_share").is_not_null())
        .then(share)
        .otherwise(pl.lit("decode share not estimated"))
    )


def phase_excess_chart(result: Any) -> alt.LayerChart:
    """Chart each anomaly's excess over trend in latency, prefill and decode.

    Parameters
    ----------
    result : PhaseResult
        The result of :func:`regimes.attribute_phases`.

    Returns
    -------
    altair.LayerChart
        Per anomaly: the mean excess seconds per trial over the trend of the latency,
        the prefill and the decode, each with its bootstrap CI, and a rule at 0.

    Raises
    ------
    RegimesInputError
        When the result has no ``phases`` frame.
    """
    table = frame_attr(result, "phases")
    require(table, ["start", "end"], "the phases")
    quantities = [
        (phase, f"{phase}_excess_s", f"{phase}_low", f"{phase}_high")
        for phase in ("latency", "prefill", "decode")
    ]
    group_columns = list(getattr(result, "group_columns", ()))
    rows, subtitle = _estimates(table, group_columns, quantities, "s")
    description = (
        f"For {table.height} anomaly(ies): the excess seconds per trial over trend of the "
        "latency, the prefill and the decode, with CIs."
    )
    text = ChartText("Prefill or decode: where the excess time goes", subtitle, description)
    x_title = "excess over the smooth trend per trial (s)"
    return interval_plot(rows, x_title=x_title, log_x=False, reference=0.0, text=text)


def alignment_chart(result: Any) -> alt.FacetChart:
    """Where each boundary sits per prompt length, in budget and in total tokens.

    Parameters
    ----------
    result : AlignmentResult
        The result of :func:`regimes.align_boundaries`.

    Returns
    -------
    altair.FacetChart
        Two panels, budget and total tokens: per prompt length, each boundary's
        position and its bracket. A boundary that follows a coordinate stands in one
        vertical line in that coordinate's panel.

    Raises
    ------
    RegimesInputError
        When the result has no ``positions`` frame.
    """
    positions = frame_attr(result, "positions")
    require(positions, ["prompt_tokens", "boundary", "budget", "total_tokens"], "the positions")
    case_columns = [c for c in getattr(result, "case_columns", ()) if c in positions.columns]
    long = _alignment_rows(positions, case_columns)
    tooltip = [
        alt.Tooltip("boundary_of:N", title="boundary"),
        alt.Tooltip("prompt_tokens:O", title="prompt (tokens)"),
        alt.Tooltip("position:Q", title="position (tokens)"),
        alt.Tooltip("low:Q", title="bracket low"),
        alt.Tooltip("high:Q", title="bracket high"),
    ]
    color = alt.Color(
        "boundary_of:N",
        title=None,
        # one name a line: two long names side by side outgrow a phone's width
        legend=style.legend(columns=1),
        scale=alt.Scale(range=list(style.PALETTE)),
    )
    base = alt.Chart().encode(
        y=alt.Y("prompt_tokens:O", title=style.axis_title("prompt_tokens")),
        color=color,
        tooltip=tooltip,
    )
    layers = [
        base.mark_rule(strokeWidth=2, opacity=0.6).encode(
            x=alt.X("low:Q", title="position (tokens)", scale=alt.Scale(zero=False)), x2="high:Q"
        ),
        base.mark_point(filled=True, size=70).encode(x=alt.X("position:Q")),
    ]
    # A wrapped facet of two columns, not a column facet: the page's loader may then
    # put the panels one under the other where two side by side would not fit.
    return (
        alt.layer(*layers, data=inline_data(long))
        .properties(width=300, height=alt.Step(28))
        .facet(
            facet=alt.Facet(
                "coordinate:N", title=None, header=alt.Header(labelLimit=0, labelFontSize=12)
            ),
            columns=2,
        )
        .resolve_scale(x="independent")
        .properties(
            title=style.title("Does each boundary follow the budget or the total length?"),
            description=(
                f"Positions of {long['boundary_of'].n_unique()} boundary(ies) per prompt "
                "length, in decoding budget and in total tokens, with their brackets."
            ),
        )
    )


def _alignment_rows(positions: pl.DataFrame, case_columns: list[str]) -> pl.DataFrame:
    """One row per boundary, prompt and coordinate, with the bracket in that coordinate."""
    name = pl.concat_str(
        [*[pl.col(c).cast(pl.String) for c in case_columns], pl.col("boundary")], separator=" · "
    )
    if "episode" in positions.columns:
        name = name + pl.lit(" (episode ") + pl.col("episode").cast(pl.String) + pl.lit(")")
    base = positions.with_columns(name.alias("boundary_of"))
    has_bracket = {"budget_low", "budget_high"} <= set(positions.columns)
    low = pl.col("budget_low") if has_bracket else pl.col("budget")
    high = pl.col("budget_high") if has_bracket else pl.col("budget")
    keep = ["boundary_of", "prompt_tokens"]
    by_budget = base.select(
        *keep,
        pl.lit("in decoding budget").alias("coordinate"),
        pl.col("budget").alias("position"),
        low.alias("low"),
        high.alias("high"),
    )
    by_total = base.select(
        *keep,
        pl.lit("in total tokens (prompt + budget)").alias("coordinate"),
        pl.col("total_tokens").alias("position"),
        (low + pl.col("prompt_tokens")).alias("low"),
        (high + pl.col("prompt_tokens")).alias("high"),
    )
    return pl.concat([by_budget, by_total], how="vertical_relaxed")
