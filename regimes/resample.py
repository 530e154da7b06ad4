"""Bootstrap replicates of cell medians, for statistics that combine several cells.

:mod:`regimes.bootstrap` gives each cell's median an interval. A speedup (one cell's
median over another's) or an excess over a trend fitted through several cells needs the
*replicates* themselves, so that the statistic can be recomputed on each and its
percentile interval read off. This module draws them with the same scheme: per replicate
and cell, sessions are drawn with replacement, then trials with replacement inside each
drawn session, and the median of the pooled draws is taken; with one session this is the
ordinary bootstrap of the trials. Cells are resampled independently of each other.

Several value columns of a cell (prefill and decode time of the same trials) are
resampled *paired*: one set of drawn trials per replicate, medians taken per column, so
their dependence carries into any statistic combining them.

All cells are resampled at once as a padded ``(cells, sessions, trials)`` array: a
drawn session of ``m`` trials contributes ``m`` draws (the surplus of the padded width is
masked), exactly as in :func:`regimes.bootstrap.bootstrap_median_ci`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

__all__ = ["CellReplicates", "cell_replicates"]

_MAX_DRAWN_VALUES = 20_000_000
"""Values drawn at once (about 160 MB of float64); larger jobs go in chunks of cells."""


@dataclass(frozen=True)
class CellReplicates:
    """``cells``: the cell keys with ``n`` and ``n_sessions``, sorted by the keys;
    ``median``: ``(cells, values)`` sample medians; ``replicates``: ``(cells, n_boot,
    values)`` bootstrap medians, value columns in the order asked for."""

    cells: pl.DataFrame
    median: np.ndarray
    replicates: np.ndarray


def cell_replicates(
    frame: pl.DataFrame,
    keys: Sequence[str],
    values: Sequence[str],
    *,
    session: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> CellReplicates:
    """Bootstrap medians of ``values`` per cell (distinct ``keys``), sessions first.

    Rows with a null in any of ``values`` must be removed by the caller. ``session``
    names the process column; without it every cell is one session.
    """
    keys, values = list(keys), list(values)
    if n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot}")
    if session is None or session not in frame.columns:
        frame = frame.with_columns(pl.lit(0).alias("_session"))
        session = "_session"
    # Sorting the values too makes the draws independent of the input's row order.
    ordered = frame.select([*keys, session, *values]).sort([*keys, session, *values])
    sessions = ordered.group_by([*keys, session], maintain_order=True).agg(
        pl.len().alias("_size"), *[pl.col(v).alias(f"_{v}") for v in values]
    )
    cells = sessions.group_by(keys, maintain_order=True).agg(
        pl.col("_size").sum().cast(pl.Int64).alias("n"),
        pl.len().cast(pl.Int64).alias("n_sessions"),
        pl.col("_size"),
        *[pl.col(f"_{v}") for v in values],
    )
    n_cells = cells.height
    n_sessions = cells.get_column("n_sessions").to_numpy()
    width = int(sessions.get_column("_size").max())
    max_sessions = int(n_sessions.max())
    sizes = np.zeros((n_cells, max_sessions), dtype=np.int64)
    padded = np.full((n_cells, max_sessions, width, len(values)), np.nan)
    for i, row in enumerate(cells.iter_rows(named=True)):
        for j, size in enumerate(row["_size"]):
            sizes[i, j] = size
            for k, v in enumerate(values):
                padded[i, j, :size, k] = row[f"_{v}"][j]
    medians = ordered.group_by(keys, maintain_order=True).agg(
        [pl.col(v).median() for v in values]
    ).select(values).to_numpy()
    rng = np.random.default_rng(seed)
    out = np.empty((n_cells, n_boot, len(values)))
    chunk = max(1, _MAX_DRAWN_VALUES // max(1, n_boot * max_sessions * width * len(values)))
    for start in range(0, n_cells, chunk):
        stop = min(n_cells, start + chunk)
        out[start:stop] = _draw(
            padded[start:stop], sizes[start:stop], n_sessions[start:stop], n_boot, rng
        )
    return CellReplicates(
        cells=cells.select([*keys, "n", "n_sessions"]), median=medians, replicates=out
    )


def _draw(
    padded: np.ndarray, sizes: np.ndarray, n_sessions: np.ndarray, n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``(cells, n_boot, values)`` medians of hierarchical resamples of a block of cells."""
    c, s_max, width, _ = padded.shape
    chosen = np.floor(rng.random((c, n_boot, s_max)) * n_sessions[:, None, None]).astype(np.intp)
    chosen_sizes = np.take_along_axis(sizes[:, None, :], chosen, axis=2)
    # Padded session slots beyond a cell's own count draw nothing.
    chosen_sizes = np.where(np.arange(s_max)[None, None, :] < n_sessions[:, None, None],
                            chosen_sizes, 0)
    draws = np.floor(rng.random((c, n_boot, s_max, width)) * chosen_sizes[..., None]).astype(np.intp)
    rows = np.arange(c)[:, None, None, None]
    picked = padded[rows, chosen[..., None], draws]  # (c, B, S, W, values)
    keep = np.arange(width)[None, None, None, :] < chosen_sizes[..., None]
    picked = picked.reshape(c, n_boot, s_max * width, -1)
    if keep.all():
        return np.median(picked, axis=2)
    picked = np.where(keep.reshape(c, n_boot, s_max * width, 1), picked, np.nan)
    return np.nanmedian(picked, axis=2)
