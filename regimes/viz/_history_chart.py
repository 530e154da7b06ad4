"""The chart of a process-history analysis: the first-visit cost of each curve."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from regimes.viz._explain import interval_plot
from regimes.viz._frames import GROUP_FIELD, frame_attr, group_labels, require
from regimes.viz._layout import ChartText


def history_chart(result: Any) -> alt.LayerChart:
    """Chart each curve's cost of a KV length's first visit in a process, with its CI.

    Parameters
    ----------
    result : HistoryResult
        The result of :func:`regimes.history_effect`.

    Returns
    -------
    altair.LayerChart
        One row per tested curve: the seconds each newly visited KV length adds to a
        trial, with its confidence interval, and a rule at 0 (no history effect).

    Raises
    ------
    RegimesInputError
        When the result has no ``effects`` frame with ``first_visit_s``, ``ci_low``
        and ``ci_high``.
    """
    effects = frame_attr(result, "effects")
    require(effects, ["first_visit_s", "ci_low", "ci_high"], "the history effects")
    keys = [c for c in getattr(result, "group_columns", ()) if c in effects.columns]
    labels, caption = group_labels(effects, keys)
    named = (
        effects.join(labels, on=keys, how="left", nulls_equal=True)
        if keys
        else effects.with_columns(pl.lit("all").alias(GROUP_FIELD))
    )
    rows = named.select(
        pl.col(GROUP_FIELD).alias("item"),
        pl.lit("first-visit cost").alias("series"),
        pl.col("first_visit_s").alias("estimate"),
        pl.col("ci_low").alias("low"),
        pl.col("ci_high").alias("high"),
        pl.format(
            "{} s [{}, {}]",
            *(pl.col(c).round_sig_figs(3) for c in ("first_visit_s", "ci_low", "ci_high")),
        ).alias("label"),
    ).filter(pl.col("estimate").is_not_null())
    description = (
        f"For {rows.height} curve(s): the seconds a KV length's first visit in a process "
        "adds to a trial, with CIs; a rule at 0 marks no history effect."
        if rows.height
        else f"No curve could be tested: {getattr(result, 'status', 'no effects')}"
    )
    text = ChartText("What a first visit costs (process history)", caption, description)
    x_title = "seconds per newly visited KV length"
    return interval_plot(rows, x_title=x_title, log_x=False, reference=0.0, text=text)
