"""The chart of an operator attribution: each operator's share of the profiled time."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from regimes.viz._frames import frame_attr, inline_data, require
from regimes.viz._style import ANOMALY_COLOR, FACET_HEIGHT, FACET_WIDTH, PALETTE, legend, title


def operators_chart(result: Any) -> alt.TopLevelMixin:
    """Chart each operator's share of a profiled generation's time along the budget.

    Parameters
    ----------
    result : OperatorResult
        The result of :func:`regimes.attribute_operators`.

    Returns
    -------
    altair.LayerChart
        Lines of each operator's median share per budget, the flagged operators drawn
        thick, over the anomalies' intervals shaded.

    Raises
    ------
    RegimesInputError
        When the result has no ``profiles`` frame with ``operator``, ``budget`` and
        ``share``.
    """
    profiles = frame_attr(result, "profiles")
    require(profiles, ["operator", "budget", "share"], "the operator profiles")
    operators = frame_attr(result, "operators")
    flagged = set(operators.filter(pl.col("flagged")).get_column("operator").to_list())
    lines = _pooled(profiles.select("operator", "budget", "share"), flagged).with_columns(
        pl.col("operator").is_in(sorted(flagged)).alias("flagged")
    )
    spans = operators.select("start", "end").unique().sort("start")
    base = alt.Chart(inline_data(lines)).encode(
        x=alt.X("budget:Q", title="decoding budget (tokens)", scale=alt.Scale(zero=False)),
        y=alt.Y("share:Q", title="share of profiled time", axis=alt.Axis(format="%")),
        color=alt.Color(
            "operator:N",
            scale=alt.Scale(range=list(PALETTE)),
            legend=legend(title=None, columns=2),
        ),
        tooltip=["operator:N", "budget:Q", alt.Tooltip("share:Q", format=".1%")],
    )
    drawn = base.mark_line(point=True).encode(
        strokeWidth=alt.condition("datum.flagged", alt.value(3.0), alt.value(1.0))
    )
    shade = (
        alt.Chart(inline_data(spans))
        .mark_rect(color=ANOMALY_COLOR, opacity=0.12)
        .encode(x="start:Q", x2="end:Q")
    )
    carriers = ", ".join(sorted(flagged)) or "no operator flagged"
    return alt.layer(shade, drawn).properties(
        width=FACET_WIDTH,
        height=FACET_HEIGHT,
        title=title(
            "Operators' share of the profiled time by budget", f"carry the excess: {carriers}"
        ),
    )


OTHERS = "(other operators)"


def _pooled(lines: pl.DataFrame, flagged: set[str]) -> pl.DataFrame:
    """Keep as many operators as the palette has colours, the rest summed into one line.

    The flagged operators are always kept, then the largest by mean share; with more
    lines than colours two operators would share a colour.
    """
    names = lines.get_column("operator").unique().to_list()
    if len(names) <= len(PALETTE):
        return lines
    by_share = (
        lines.filter(pl.col("operator") != OTHERS)
        .group_by("operator")
        .agg(pl.col("share").mean())
        .sort(["share", "operator"], descending=[True, False])
        .get_column("operator")
        .to_list()
    )
    kept = [*sorted(flagged & set(by_share)), *(n for n in by_share if n not in flagged)]
    kept = kept[: len(PALETTE) - 1]
    return (
        lines.with_columns(
            pl.when(pl.col("operator").is_in(kept))
            .then(pl.col("operator"))
            .otherwise(pl.lit(OTHERS))
            .alias("operator")
        )
        .group_by("operator", "budget")
        .agg(pl.col("share").sum())
        .sort("operator", "budget")
    )
