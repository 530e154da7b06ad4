"""The speedup's cells: each budget measured both ways, reduced to a log-speedup level.

Private to :func:`regimes.cache_speedup` (:mod:`regimes.speedup` says the statistics).
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
from scipy import stats

from regimes._stats.curves import index_curves
from regimes._stats.levels import cell_levels
from regimes.errors import RegimesInputError, RegimesWarning

__all__ = ["paired_cells", "speedup_levels", "speedup_table"]


def paired_cells(frame: pl.DataFrame, group_columns: list[str], x: str) -> pl.DataFrame:
    """Keep the (group, x) cells measured both with and without the cache."""
    if frame.get_column("use_cache").null_count():
        raise RegimesInputError(
            "column 'use_cache' has null values; each trial must say whether the KV cache was on"
        )
    states = set(frame.get_column("use_cache").unique().to_list())
    for state, word in ((False, "off"), (True, "on")):
        if state not in states:
            raise RegimesInputError(
                f"no cache-{word} rows (use_cache={state}): the speedup needs trials with "
                "the KV cache both on and off"
            )
    keys = [*group_columns, x]
    paired = frame.with_columns(pl.col("use_cache").n_unique().over(keys).alias("_ways"))
    kept = paired.filter(pl.col("_ways") == 2).drop("_ways")
    if kept.height == 0:
        raise RegimesInputError(
            f"no {x} value is measured both with and without the cache in any group; the "
            "cache-on and cache-off sweeps do not overlap"
        )
    lost = paired.filter(pl.col("_ways") == 1).select(keys).unique().height
    if lost:
        warnings.warn(
            f"left out {lost} (group, {x}) cell(s) measured with the cache only on or only "
            "off: a speedup needs both",
            RegimesWarning,
            stacklevel=3,
        )
    return kept


def speedup_levels(frame: pl.DataFrame, group_columns: list[str], x: str, y: str) -> pl.DataFrame:
    """Reduce each (group, x) measured both ways to the log-speedup level.

    Its variance and Welch df
    from the two cells' levels, and for the speedup's interval the two medians, their
    counts, and the log median ratio's variance (``median_var``, Welch df ``median_df``).
    """
    index = index_curves(frame, [*group_columns, "use_cache"], x)
    levels = cell_levels(index.frame, "_curve", "_x", "_ly", "_session", raw=y).join(
        index.groups, on="_curve"
    )
    off = levels.filter(~pl.col("use_cache"))
    on = levels.filter(pl.col("use_cache"))
    joined = off.join(on, on=[*group_columns, "_x"], suffix="_on", nulls_equal=True)

    def welch(first: str, second: str) -> pl.Expr:
        a, b = pl.col(first), pl.col(f"{first}_on")
        dof = (a + b) ** 2 / (a**2 / pl.col(second) + b**2 / pl.col(f"{second}_on"))
        return dof.fill_nan(1.0).clip(1.0, None)

    return joined.select(
        *group_columns,
        "_x",
        (pl.col("level") - pl.col("level_on")).alias("level"),
        (pl.col("var") + pl.col("var_on")).alias("var"),
        welch("var", "df").alias("df"),
        pl.col("median").alias("off_median"),
        pl.col("median_on").alias("on_median"),
        pl.col("n").alias("off_n"),
        pl.col("n_on").alias("on_n"),
        (pl.col("median_var") + pl.col("median_var_on")).alias("median_var"),
        welch("median_var", "median_df").alias("median_df"),
    ).sort([*group_columns, "_x"])


def speedup_table(
    levels: pl.DataFrame, group_columns: list[str], x: str, level: float
) -> pl.DataFrame:
    """Compute the speedup per (group, x) with its t interval on the log scale.

    The variance is the sum of the two cells' median variances
    (:func:`regimes._stats.levels.cell_levels`: moderated within-session noise, and with
    several sessions the spread of their medians, so the interval is for a fresh
    process); Welch-Satterthwaite degrees of freedom. Where each cell was measured in a
    single process the interval is for those two processes: one process cannot show
    the lottery between processes, and the speedup curve is too short to estimate it.
    """
    var = levels.get_column("median_var").to_numpy()
    dof = levels.get_column("median_df").to_numpy()
    speedup = (levels.get_column("off_median") / levels.get_column("on_median")).to_numpy()
    half = stats.t.ppf((1.0 + level) / 2.0, dof) * np.sqrt(var)
    return levels.select(
        *group_columns,
        pl.col("_x").alias(x),
        pl.Series("speedup", speedup),
        pl.Series("ci_low", speedup * np.exp(-half)),
        pl.Series("ci_high", speedup * np.exp(half)),
        "off_median",
        "on_median",
        "off_n",
        "on_n",
    )
