"""Trial-level terms of the model, removed before the cells are summarised.

Per curve, on the log of ``y`` (docs/method.md, section 1):

- **a first-trial effect**: the first trial of every process (by ``order``, else
  ``trial``) against the median of the other trials of its process in its cell; when
  those differences are positive more often than chance allows (a one-sided sign test
  over the processes at level :data:`FIRST_TRIAL_LEVEL`), every first trial of the
  curve is left out;
- **drift in the execution order**: the slope of log ``y`` on ``order`` within each
  (cell, process), pooled over the curve (a within estimator: cells and processes
  absorb everything but the drift), removed;
- **session effects**: a process that spans at least three cells gets an offset (the
  median over its cells of its median minus the cell's median of process medians),
  removed.

What is left is ``_adj``; the cell level is its median.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl
from scipy import stats

__all__ = ["FIRST_TRIAL_LEVEL", "Adjusted", "adjust_trials"]

FIRST_TRIAL_LEVEL = 0.01
"""Sign-test level at which the first trials of a curve's processes are left out."""

_CELL = ["_curve", "_x"]
_BLOCK = ["_curve", "_x", "_session"]


class Adjusted(NamedTuple):
    """Trials with ``_adj`` (adjusted log ``y``), and what was found per curve.

    ``first_trials``: ``_curve``, ``n_processes``, ``ratio`` (median first trial over
    the rest of its process), ``p_value``, ``dropped``, ``n_dropped``; ``drift``:
    ``_curve``, ``drift`` (the fitted change of ``y`` over the curve's span of
    ``order``, as a ratio).
    """

    frame: pl.DataFrame
    first_trials: pl.DataFrame
    drift: pl.DataFrame


def _first_trials(frame: pl.DataFrame, key: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Test and drop the first trial of each process, per curve."""
    first = pl.col(key) == pl.col(key).min().over(["_curve", "_session"])
    marked = frame.with_columns(first.alias("_first"))
    rest = (
        marked.filter(~pl.col("_first")).group_by(_BLOCK).agg(pl.col("_ly").median().alias("_rest"))
    )
    diffs = (
        marked.filter(pl.col("_first"))
        .join(rest, on=_BLOCK, how="inner")
        .with_columns((pl.col("_ly") - pl.col("_rest")).alias("_d"))
        .group_by("_curve")
        .agg(
            pl.len().alias("n_processes"),
            (pl.col("_d") > 0).sum().alias("_up"),
            pl.col("_d").median().exp().alias("ratio"),
        )
    )
    n = diffs.get_column("n_processes").to_numpy()
    up = diffs.get_column("_up").to_numpy()
    p = stats.binom.sf(up - 1, n, 0.5)
    dropped = (p < FIRST_TRIAL_LEVEL) & (n >= 3)
    table = diffs.with_columns(
        pl.Series("p_value", p, dtype=pl.Float64), pl.Series("dropped", dropped)
    ).drop("_up")
    gone = table.filter("dropped").select("_curve")
    kept = marked.filter(~(pl.col("_first") & pl.col("_curve").is_in(gone.get_column("_curve"))))
    counts = marked.filter(pl.col("_first")).group_by("_curve").len("n_dropped")
    table = table.join(counts, on="_curve", how="left").with_columns(
        pl.when("dropped").then(pl.col("n_dropped")).otherwise(0).alias("n_dropped")
    )
    return kept.drop("_first"), table


def _drift(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Remove each curve's pooled within-(cell, process) slope on ``order``."""
    o = pl.col("order").cast(pl.Float64)
    centred = frame.with_columns(
        (o - o.mean().over(_BLOCK)).alias("_oc"),
        (pl.col("_ly") - pl.col("_ly").mean().over(_BLOCK)).alias("_yc"),
    )
    # a hiccup far out would steer a least-squares slope: clip at four robust SDs
    scale = 4.0 * 1.4826 * pl.col("_yc").abs().median().over("_curve")
    centred = centred.with_columns(pl.col("_yc").clip(-scale, scale))
    slopes = centred.group_by("_curve").agg(
        ((pl.col("_oc") * pl.col("_yc")).sum() / (pl.col("_oc") ** 2).sum()).alias("_slope"),
        (o.max() - o.min()).alias("_span"),
        o.mean().alias("_omean"),
    )
    slopes = slopes.with_columns(
        pl.when(pl.col("_slope").is_finite()).then("_slope").otherwise(0.0).alias("_slope")
    )
    adjusted = centred.join(slopes, on="_curve", how="left").with_columns(
        (pl.col("_ly") - pl.col("_slope") * (o - pl.col("_omean"))).alias("_ly")
    )
    table = slopes.select("_curve", (pl.col("_slope") * pl.col("_span")).exp().alias("drift"))
    return adjusted.drop("_oc", "_yc", "_slope", "_span", "_omean"), table


def _session_offsets(frame: pl.DataFrame) -> pl.DataFrame:
    """Remove the offset of every process spanning three or more cells of its curve."""
    blocks = frame.group_by(_BLOCK).agg(pl.col("_ly").median().alias("_bm"))
    blocks = blocks.with_columns(
        (pl.col("_bm") - pl.col("_bm").median().over(_CELL)).alias("_dev"),
        pl.len().over(["_curve", "_session"]).alias("_span"),
    )
    offsets = (
        blocks.filter(pl.col("_span") >= 3)
        .group_by(["_curve", "_session"])
        .agg(pl.col("_dev").median().alias("_offset"))
    )
    return (
        frame.join(offsets, on=["_curve", "_session"], how="left")
        .with_columns((pl.col("_ly") - pl.col("_offset").fill_null(0.0)).alias("_adj"))
        .drop("_offset")
    )


def adjust_trials(frame: pl.DataFrame) -> Adjusted:
    """Remove first-trial effects, drift and session effects from each curve's trials.

    Parameters
    ----------
    frame : polars.DataFrame
        Trials with ``_curve``, ``_x``, ``_session`` and ``_ly``; ``order`` and
        ``trial``, where present, place each trial in its process.

    Returns
    -------
    Adjusted
    """
    key = "order" if "order" in frame.columns else "trial" if "trial" in frame.columns else None
    empty = pl.DataFrame(
        schema={
            "_curve": pl.Int64,
            "n_processes": pl.UInt32,
            "ratio": pl.Float64,
            "p_value": pl.Float64,
            "dropped": pl.Boolean,
            "n_dropped": pl.UInt32,
        }
    )
    first, drift = empty, pl.DataFrame(schema={"_curve": pl.Int64, "drift": pl.Float64})
    if key is not None and frame.get_column(key).null_count() == 0:
        frame, first = _first_trials(frame, key)
    if "order" in frame.columns and frame.get_column("order").null_count() == 0:
        frame, drift = _drift(frame)
    frame = _session_offsets(frame)
    if frame.get_column("_adj").is_nan().any():
        frame = frame.with_columns(pl.col("_adj").fill_nan(pl.col("_ly")))
    return Adjusted(frame, first, drift)


def cell_arrays(frame: pl.DataFrame) -> pl.DataFrame:
    """Return the cells: per ``(curve, x)`` the trial count, sessions, median and level."""
    return (
        frame.group_by(_CELL)
        .agg(
            pl.len().alias("n"),
            pl.col("_session").n_unique().alias("n_sessions"),
            pl.col("_y").median().alias("median"),
            pl.col("_adj").median().alias("level"),
        )
        .sort(_CELL)
    )


def residual_pools(frame: pl.DataFrame) -> dict[int, np.ndarray]:
    r"""Each curve's trial residuals within (cell, process), for resampling.

    Deviations from the block mean, scaled by :math:`\sqrt{n/(n-1)}` so that their
    variance is the trials' own; blocks of one trial have none.
    """
    n = pl.len().over(_BLOCK)
    dev = (pl.col("_adj") - pl.col("_adj").mean().over(_BLOCK)) * (n / (n - 1)).sqrt()
    pooled = (
        frame.with_columns(dev.alias("_r"), n.alias("_n"))
        .filter(pl.col("_n") > 1)
        .group_by("_curve")
        .agg(pl.col("_r"))
    )
    return {
        int(c): np.asarray(r, dtype=float)
        for c, r in zip(pooled.get_column("_curve"), pooled.get_column("_r"), strict=True)
    }
