"""Trial-level terms of the model, removed before the cells are summarised.

Per curve, on the log of ``y`` (docs/method.md, section 1):

- **a first-trial effect**: the first trial of every process (by ``order``, else
  ``trial``) ranked among its process's trials by its residual from the median of its
  cell's other trials; when those ranks are higher than chance allows (a one-sided
  rank-sum test stratified by process, :func:`_rank_sum_p`, at level
  :data:`FIRST_TRIAL_LEVEL`) and the first trials are at least
  :data:`FIRST_TRIAL_RATIO` times slower than the rest of their cells, every first
  trial of the curve is left out (of cells that keep :data:`FIRST_TRIAL_KEEP` trials or
  more besides them);
- **drift in the execution order**: the slope of log ``y`` on ``order`` within each
  cell, pooled over the curve (a within estimator: the cells absorb the budget),
  removed where it is significant and seen over a good part of the sweep
  (:data:`DRIFT_Z`, :data:`DRIFT_REACH`);
- **session effects**: a process that spans at least three cells gets an offset (the
  median over its cells of its median minus the cell's median of process medians),
  removed.

What is left is ``_adj``; the cell level is its median.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import polars as pl
from scipy import stats

__all__ = [
    "FIRST_TRIAL_LEVEL",
    "Adjusted",
    "Pools",
    "process_deviations",
    "resampled",
    "adjust_trials",
    "cell_arrays",
    "with_cell_ids",
    "residual_pools",
]

FIRST_TRIAL_LEVEL = 0.01
"""Rank-test level at which the first trials of a curve's processes are left out ..."""

FIRST_TRIAL_RATIO = 1.1
""" ... when they are also this much slower than the rest (median): a first trial a few
per cent slower, a warm cache, moves a median by less than the trials' noise."""

FIRST_TRIAL_KEEP = 2
"""Trials a cell keeps besides its first ones, at least, where those are tested."""


def with_cell_ids(frame: pl.DataFrame) -> pl.DataFrame:
    """Return ``frame`` with ``_cell`` and ``_block``: ids of its cells and blocks.

    A cell is a ``(_curve, _x)``, a block a ``(_curve, _x, _session)``; ``frame`` is
    sorted by them, so each id is its run's, increasing in that order. One integer key
    groups 5-8 times faster than two or three columns (1M rows: 1.6 s -> 1.2 s).
    """
    return frame.with_columns(
        pl.struct("_curve", "_x").rle_id().alias("_cell"),
        pl.struct("_curve", "_x", "_session").rle_id().alias("_block"),
    )


class Adjusted(NamedTuple):
    """Trials with ``_adj`` (adjusted log ``y``), and what was found per curve.

    ``first_trials``: ``_curve``, ``n_processes``, ``ratio`` (median first trial over
    the other trials of its cell), ``p_value``, ``dropped``, ``n_dropped``; ``drift``:
    ``_curve``, ``drift`` (the fitted change of ``y`` over the curve's span of
    ``order``, as a ratio).
    """

    frame: pl.DataFrame
    first_trials: pl.DataFrame
    drift: pl.DataFrame


def _marked(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """Return the trials with ``_first`` (a tested first trial) and ``_tested`` (its cell is)."""
    first = pl.col(key) == pl.col(key).min().over(["_curve", "_session"])
    marked = frame.with_columns(first.alias("_first")).with_columns(
        pl.len().over("_cell").alias("_size"), pl.col("_first").sum().over("_cell").alias("_k")
    )
    # only where the cell keeps enough trials besides its first ones are they tested
    tested = pl.col("_size") - pl.col("_k") >= FIRST_TRIAL_KEEP
    return marked.with_columns((pl.col("_first") & tested).alias("_first"), tested.alias("_tested"))


def _residuals(cell: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each trial less the median of the other trials of its cell (sorted by cell, then y).

    Left out of its own reference, every trial of a cell is measured against as many of
    the others: under no effect their residuals are alike, first trials or not (with
    their own value in, the trials a first trial is ranked against sat nearer their
    median than it, and three processes' first trials reached 0.01 three times as often
    as they should).
    """
    # each trial's cell is a run of equal ids: its first row and the run's length
    first = np.flatnonzero(np.diff(cell, prepend=cell[:1] - 1))
    length = np.diff(np.append(first, cell.size))
    starts = np.repeat(first, length)
    size = np.repeat(length, length) - 1
    place = np.arange(y.size) - starts
    lo, hi = (size - 1) // 2, size // 2
    # the k-th of the others is the k-th of the cell, or the next where the trial is before it
    at_lo = starts + lo + (lo >= place)
    at_hi = starts + hi + (hi >= place)
    return y - 0.5 * (y[at_lo] + y[at_hi])


def _first_trials(frame: pl.DataFrame, key: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Test and drop the first trial of each process, per curve."""
    marked = _marked(frame, key)
    tested = marked.filter("_tested").sort("_cell", "_ly")
    cell = tested.get_column("_cell").to_numpy()
    residual = _residuals(cell, tested.get_column("_ly").to_numpy())
    ranked = tested.with_columns(pl.Series("_res", residual)).with_columns(
        pl.col("_res").rank("min").over(["_curve", "_session"]).cast(pl.Int64).alias("_rank"),
        pl.len().over(["_curve", "_session"]).cast(pl.Int64).alias("_n"),
    )
    firsts = ranked.filter("_first")
    # a process's first trials (one per cell it ran where ``trial`` places them) are
    # one stratum: a subset of its ranks
    laws = (
        firsts.group_by("_curve", "_session")
        .agg(pl.col("_rank").sum().alias("_w"), pl.col("_n").first(), pl.len().alias("_k"))
        .group_by("_curve")
        .agg(
            pl.len().alias("n_processes"),
            pl.col("_k").sum().cast(pl.UInt32).alias("_firsts"),
            pl.col("_w").sum(),
            pl.col("_n"),
            pl.col("_k").cast(pl.Int64),
        )
    )
    ratios = firsts.group_by("_curve").agg(pl.col("_res").median().exp().alias("ratio"))
    diffs = laws.join(ratios, on="_curve").sort("_curve")
    p = _rank_sum_ps(diffs.select("_w", "_n", "_k").iter_rows())
    ratio = diffs.get_column("ratio").to_numpy()
    dropped = (p < FIRST_TRIAL_LEVEL) & (ratio >= FIRST_TRIAL_RATIO)
    table = diffs.with_columns(
        pl.Series("p_value", p, dtype=pl.Float64),
        pl.Series("dropped", dropped),
        pl.when(pl.Series(dropped)).then(pl.col("_firsts")).otherwise(0).alias("n_dropped"),
    ).select("_curve", "n_processes", "ratio", "p_value", "dropped", "n_dropped")
    gone = table.filter("dropped").get_column("_curve").to_list()
    kept = marked.filter(~(pl.col("_first") & pl.col("_curve").is_in(gone)))
    return kept.drop("_first", "_tested", "_size", "_k"), table


_EXACT_FIRSTS = 40
"""First trials up to which the rank-sum p-value is exact; a normal tail beyond."""


@lru_cache(maxsize=256)
def _subset_sum_law(n: int, k: int) -> np.ndarray:
    """Law of the sum of ``k`` ranks drawn without replacement from ``1..n``.

    Index ``s`` holds the probability of the sum ``s + k (k + 1) / 2`` (the least sum).
    """
    # scipy exposes no law of a stratified rank sum, so each stratum's subsets are
    # counted: ways[j, s] is the number of j-subsets of the ranks so far summing to s
    # plus j (j + 1) / 2, built rank by rank
    top = k * (n - k)
    ways = np.zeros((k + 1, top + 1))
    ways[0, 0] = 1.0
    for rank in range(1, n + 1):
        for j in range(min(k, rank), 0, -1):
            shift = rank - j  # the rank's excess over the least it could be as j-th
            if shift <= top:
                ways[j, shift:] += ways[j - 1, : top + 1 - shift]
    law = ways[k] / ways[k].sum()
    law.setflags(write=False)  # cached: shared by every caller
    return law


def _rank_sum_p(observed: int, sizes: np.ndarray, counts: np.ndarray) -> float:
    r"""One-sided p-value that the first trials rank high in their strata.

    Under no first-trial effect the :math:`k_c` first trials of stratum :math:`c` are
    exchangeable with its other trials, so their ranks among its :math:`n_c` trials
    (1 the fastest) are a random :math:`k_c`-subset of :math:`1..n_c`, independently over
    strata; the statistic is the sum of all their ranks (a stratified Wilcoxon rank sum,
    van Elteren 1960), its law the convolution of the strata's subset-sum laws, exact
    for up to :data:`_EXACT_FIRSTS` first trials and normal (mean
    :math:`\sum k_c (n_c+1)/2`, variance :math:`\sum k_c (n_c-k_c)(n_c+1)/12`,
    continuity-corrected) beyond. The strata are the processes.
    """
    z = _rank_sum_z(observed, sizes, counts)
    return _exact_p(observed, sizes, counts) if z is None else float(stats.norm.sf(z))


def _rank_sum_ps(rows: Iterable[tuple[int, list[int], list[int]]]) -> np.ndarray:
    """:func:`_rank_sum_p` of each ``(observed, sizes, counts)``, the normal tails at once.

    One call of the normal tail over every curve's ``z``: called per curve, its checks
    of arguments cost a 1M-row call a tenth of a second.
    """
    p, z = [], []
    for w, n, k in rows:
        sizes, counts = np.asarray(n), np.asarray(k)
        one = _rank_sum_z(int(w), sizes, counts)
        z.append(np.nan if one is None else one)
        p.append(_exact_p(int(w), sizes, counts) if one is None else np.nan)
    out, z_all = np.array(p, dtype=float), np.array(z, dtype=float)
    normal = ~np.isnan(z_all)
    out[normal] = stats.norm.sf(z_all[normal])
    return out


def _rank_sum_z(observed: int, sizes: np.ndarray, counts: np.ndarray) -> float | None:
    """Return the continuity-corrected normal ``z`` of :func:`_rank_sum_p` (None: exact)."""
    sizes, counts = sizes.astype(np.int64), counts.astype(np.int64)
    if counts.sum() <= _EXACT_FIRSTS:
        return None
    n, k = sizes.astype(float), counts.astype(float)
    mean = float(np.sum(k * (n + 1) / 2.0))
    sd = float(np.sqrt(np.sum(k * (n - k) * (n + 1) / 12.0)))
    return (observed - 0.5 - mean) / max(sd, 1e-12)


def _exact_p(observed: int, sizes: np.ndarray, counts: np.ndarray) -> float:
    """:func:`_rank_sum_p` from the exact law of the stratified rank sum."""
    sizes, counts = sizes.astype(np.int64), counts.astype(np.int64)
    law = np.ones(1)
    for n, k in zip(sizes.tolist(), counts.tolist(), strict=True):
        law = np.convolve(law, _subset_sum_law(n, k))
    least = int(np.sum(counts * (counts + 1) // 2))
    return float(min(1.0, law[max(observed - least, 0) :].sum()))


DRIFT_Z = 3.0
"""A drift is removed when its slope is this many standard errors from 0 ..."""

DRIFT_REACH = 0.1
""" ... and a cell's trials span at least this share of the sweep's order (median over
cells): a slope seen only within runs of consecutive trials is local (a process warming
up), and no ground for extrapolating over the sweep."""


def _drift(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Remove each curve's pooled within-cell slope on ``order``, where it is a drift."""
    o = pl.col("order").cast(pl.Float64)
    centred = frame.with_columns(
        (o - o.mean().over("_cell")).alias("_oc"),
        (pl.col("_ly") - pl.col("_ly").mean().over("_cell")).alias("_yc"),
        ((o.max() - o.min()).over("_cell")).alias("_reach"),
    )
    # a hiccup far out would steer a least-squares slope: clip at four robust SDs
    scale = 4.0 * 1.4826 * pl.col("_yc").abs().median().over("_curve")
    centred = centred.with_columns(pl.col("_yc").clip(-scale, scale))
    fit = centred.group_by("_curve").agg(
        ((pl.col("_oc") * pl.col("_yc")).sum() / (pl.col("_oc") ** 2).sum()).alias("_slope"),
        (pl.col("_oc") ** 2).sum().alias("_sxx"),
        (pl.col("_yc") ** 2).sum().alias("_syy"),
        (pl.len() - pl.col("_x").n_unique() - 1).alias("_dof"),
        (o.max() - o.min()).alias("_span"),
        o.mean().alias("_omean"),
        pl.col("_reach").median().alias("_reach"),
    )
    residual = (pl.col("_syy") - pl.col("_slope") ** 2 * pl.col("_sxx")) / pl.col("_dof")
    z = pl.col("_slope") / (residual / pl.col("_sxx")).sqrt()
    drifts = (z.abs() > DRIFT_Z) & (pl.col("_reach") >= DRIFT_REACH * pl.col("_span"))
    fit = fit.with_columns(
        pl.when(drifts & pl.col("_slope").is_finite()).then("_slope").otherwise(0.0).alias("_slope")
    )
    adjusted = frame.join(fit.select("_curve", "_slope", "_omean"), on="_curve", how="left")
    adjusted = adjusted.with_columns(
        (pl.col("_ly") - pl.col("_slope") * (o - pl.col("_omean"))).alias("_ly")
    )
    table = fit.select("_curve", (pl.col("_slope") * pl.col("_span")).exp().alias("drift"))
    return adjusted.drop("_slope", "_omean"), table


def _session_offsets(frame: pl.DataFrame) -> pl.DataFrame:
    """Remove the offset of every process spanning three or more cells of its curve."""
    blocks = frame.group_by("_block").agg(
        pl.col("_curve", "_session", "_cell").first(), pl.col("_ly").median().alias("_bm")
    )
    blocks = blocks.with_columns(
        (pl.col("_bm") - pl.col("_bm").median().over("_cell")).alias("_dev"),
        pl.len().over(["_curve", "_session"]).alias("_span"),
    )
    offsets = (
        blocks.filter(pl.col("_span") >= 3)
        .group_by(["_curve", "_session"])
        .agg(pl.col("_dev").median().alias("_offset"))
    )
    # their spread is the lottery of a fresh process, which a cell's interval carries
    # sorted first: the offsets come from a group_by in no set order, and a sum must not
    spread = offsets.group_by("_curve").agg(
        pl.col("_offset").sort().var().fill_null(0.0).alias("_svar")
    )
    return (
        frame.join(offsets, on=["_curve", "_session"], how="left")
        .join(spread, on="_curve", how="left")
        .with_columns(
            (pl.col("_ly") - pl.col("_offset").fill_null(0.0)).alias("_adj"),
            pl.col("_svar").fill_null(0.0),
        )
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
    """Return the cells: per ``(curve, x)`` trials, sessions, median, level and spreads.

    ``own_var``: the variance of the cell's adjusted trials; ``session_var``: that of
    its curve's process offsets (0 without processes spanning three cells).
    """
    return (
        frame.group_by("_cell")
        .agg(
            pl.col("_curve", "_x").first(),
            pl.len().alias("n"),
            pl.col("_session").n_unique().alias("n_sessions"),
            pl.col("_y").median().alias("median"),
            pl.col("_adj").median().alias("level"),
            pl.col("_adj").var().fill_null(0.0).alias("own_var"),
            pl.col("_svar").first().alias("session_var"),
        )
        .sort("_cell")
        .drop("_cell")
    )


class Pools(NamedTuple):
    """What one curve's bootstrap resamples, sorted so that row order cannot matter.

    ``trials``: trial residuals within (cell, process), for the trials' own noise; per
    process and cell, in cell order (a *block*): ``block_mean`` (its trials' mean),
    ``block_cell``, ``block_size`` and ``block_se`` (the standard error of its own
    deviation, :func:`process_deviations`; NaN where the cell was measured in one
    process, which has no deviation of its own); ``trial_value`` and ``trial_block``:
    the adjusted log time of each trial of a block of two or more and its block, from
    which :func:`resampled` takes the residuals the draws resample.
    """

    trials: np.ndarray
    block_mean: np.ndarray
    block_cell: np.ndarray
    block_size: np.ndarray
    block_se: np.ndarray
    trial_value: np.ndarray
    trial_block: np.ndarray


BLOCK_EVENT_Z = 3.0
"""A process deviates from the others of its cell, beyond its trials' noise, when its
own deviation is this many standard errors."""


def _less_shared_shift(d: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """Deviations ``d`` (sorted by ``cell``) less the shift their cell's members share.

    The shared shift is the deviation closest to 0 where all of the cell's members
    deviate to one side, else none: the trend's misfit there, or a regime.
    """
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    low, high = np.minimum.reduceat(d, starts), np.maximum.reduceat(d, starts)
    common = np.where(low > 0, low, np.where(high < 0, high, 0.0))
    return d - np.repeat(common, np.diff(np.r_[starts, d.size]))


def process_deviations(pools: Pools, trend: np.ndarray) -> np.ndarray:
    """Each block's own deviation in its cell where it stands out, else 0.

    ``trend``: the curve's fitted trend at its cells. A process's deviation from the
    trend is its cell's shift, which every process of the cell shares (the trend's
    misfit there, or a regime), plus its own: the shared part is the deviation closest
    to 0 where all of the cell's processes deviate to one side, else none. Of three
    processes two of which ran slow, each slow one keeps its whole excess and the fast
    one none (against the others' median the fast one would be the deviant, and the
    slow ones keep half); of three that all ran slow together, a regime, none keeps
    anything, so that a null draw cannot rebuild the regime from its own processes. A
    block mean carries its trials' noise, which the draws add again with fresh trials:
    only deviations beyond :data:`BLOCK_EVENT_Z` standard errors are kept. Blocks of
    cells measured once get 0.
    """
    out = np.zeros(pools.block_mean.size)
    shared = np.isfinite(pools.block_se)
    if not shared.any():
        return out
    cell = pools.block_cell[shared]
    own = _less_shared_shift(pools.block_mean[shared] - trend[cell], cell)
    out[shared] = np.where(np.abs(own) > BLOCK_EVENT_Z * pools.block_se[shared], own, 0.0)
    return out


def resampled(pools: Pools, trend: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the process deviations and the trial residuals the draws resample, sorted.

    The process deviations are :func:`process_deviations`, processes of cells measured
    once left out. A trial deviates from the fitted ``trend`` by its process's own
    deviation, the shift its cell's trials all share, and its own, which is its
    residual. Taken so, not about their block's mean, the trials keep the shape of their
    noise at its full size: a hiccup in a cell of two trials keeps its whole excess
    (centred on its block it kept half, and its partner took the other half, negated),
    as does the slow trial of a cell of three trials run at two speeds, so that the
    draws make a cell slow throughout as often as the trials do; a regime, or the
    trend's misfit, moves every trial of its cell and is taken out.
    """
    own = process_deviations(pools, trend)
    events = np.sort(own[np.isfinite(pools.block_se)])
    cell = pools.block_cell[pools.trial_block]
    d = pools.trial_value - trend[cell] - own[pools.trial_block]
    return events, np.sort(_less_shared_shift(d, cell)) if d.size else d


def residual_pools(frame: pl.DataFrame) -> dict[int, Pools]:
    r"""Each curve's residuals at the two levels of its design, for resampling.

    Trial deviations from their block (cell, process) mean, scaled by
    :math:`\sqrt{n/(n-1)}` so that their variance is the trials' own (blocks of one
    trial have none); each block's mean, whose own deviation (from the fitted trend,
    less its cell's shared shift) :func:`process_deviations` takes once the curve is
    fitted; and the trials of blocks of two or more, about the fitted model
    (:func:`resampled`).
    """
    n = pl.len().over("_block")
    dev = (pl.col("_adj") - pl.col("_adj").mean().over("_block")) * (n / (n - 1)).sqrt()
    replicated = frame.with_columns(dev.alias("_r"), n.alias("_n")).filter(pl.col("_n") > 1)
    blocks = _blocks(frame)
    trials = _replicated_by_curve(replicated, blocks)
    place = (pl.col("_x").rank("dense").over("_curve").cast(pl.Int64) - 1).alias("_place")
    by_curve = _by_curve(blocks.with_columns(place), ["_m", "_place", "_size", "_se1"])
    out = {}
    # a curve with no replicated block has no trials to resample
    none = (np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))
    for curve, (mean, cell, size, se1) in by_curve.items():
        own, value, block = trials.get(curve, none)
        sigma = float(np.sqrt(np.mean(np.square(own)))) if own.size else 0.0
        out[curve] = Pools(
            own, mean, cell, size.astype(np.int64), sigma * se1, value, block.astype(np.int64)
        )
    return out


def _replicated_by_curve(
    replicated: pl.DataFrame, blocks: pl.DataFrame
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each curve's trial residuals, sorted; its trials' values and blocks, by block then value.

    Sorted curve by curve: a million trials sorted at once by curve and value, twice,
    took three times as long as a thousand sorts of a thousand.
    """
    ids = blocks.get_column("_block").to_numpy()
    b_of = np.zeros(int(ids.max()) + 1 if ids.size else 0, dtype=np.int64)
    b_of[ids] = blocks.get_column("_b").to_numpy()
    b = b_of[replicated.get_column("_block").to_numpy()]
    frame = replicated.select("_curve", "_r", "_adj").with_columns(pl.Series("_b", b))
    if not frame.get_column("_curve").is_sorted():
        frame = frame.sort("_curve", maintain_order=True)
    out = {}
    for curve, (r, adj, block) in _by_curve(frame, ["_r", "_adj", "_b"]).items():
        members = np.lexsort((adj, block))
        out[curve] = (np.sort(r), adj[members], block[members])
    return out


def _by_curve(frame: pl.DataFrame, columns: list[str]) -> dict[int, list[np.ndarray]]:
    """Each curve's slice of ``columns``, from ``frame`` sorted by ``_curve`` first.

    Slices of whole columns: aggregated into lists per curve and read back row by row,
    as Python floats, the same arrays took 0.25 s more of a 1M-row call.
    """
    curves = frame.get_column("_curve").to_numpy()
    edges = np.flatnonzero(curves[1:] != curves[:-1]) + 1
    parts = [np.split(frame.get_column(c).to_numpy(), edges) for c in columns]
    ids = curves[np.concatenate([[0], edges])] if curves.size else curves
    return {int(c): [part[k] for part in parts] for k, c in enumerate(ids.tolist())}


def _blocks(frame: pl.DataFrame) -> pl.DataFrame:
    """Per (cell, process): mean, size, the unit standard error of its own deviation, index.

    Sorted by curve, cell, size and mean, so that row order cannot matter; ``_b`` is the
    block's index within its curve in that order.
    """
    cell_total = pl.col("_size").sum().over("_cell")
    return (
        frame.group_by("_block")
        .agg(
            pl.col("_curve", "_x", "_cell").first(),
            pl.col("_adj").mean().alias("_m"),
            pl.len().alias("_size"),
        )
        .sort(["_cell", "_size", "_m"])
        .with_columns(
            pl.when(pl.len().over("_cell") > 1)
            .then((1.0 / pl.col("_size") + 1.0 / cell_total).sqrt())
            .otherwise(float("nan"))
            .alias("_se1"),
            pl.int_range(pl.len()).over("_curve").alias("_b"),
        )
    )
