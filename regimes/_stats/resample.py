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

The draws are those of :func:`regimes.bootstrap.hierarchical_medians`, the one
sampler both modules use, on blocks of cells with equal session counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from regimes._stats.bootstrap import block_size, hierarchical_medians

__all__ = ["CellReplicates", "cell_replicates"]


@dataclass(frozen=True)
class CellReplicates:
    """Bootstrap medians of cells.

    ``cells``: the cell keys with ``n`` and ``n_sessions``, sorted by the keys;
    ``median``: ``(cells, values)`` sample medians; ``replicates``: ``(cells, n_boot,
    values)`` bootstrap medians, value columns in the order asked for.
    """

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
    medians = (
        ordered.group_by(keys, maintain_order=True)
        .agg([pl.col(v).median() for v in values])
        .select(values)
        .to_numpy()
    )
    rng = np.random.default_rng(seed)
    out = np.empty((n_cells, n_boot, len(values)))
    # hierarchical_medians takes blocks of cells with equal session counts
    for count in np.unique(n_sessions):
        members = np.flatnonzero(n_sessions == count)
        rows = cells[members]
        width = int(rows.get_column("_size").list.max().to_numpy().max())
        padded = np.full((members.size, int(count), width, len(values)), np.nan)
        for i, row in enumerate(rows.iter_rows(named=True)):
            for j, size in enumerate(row["_size"]):
                for k, v in enumerate(values):
                    padded[i, j, :size, k] = row[f"_{v}"][j]
        chunk = block_size(n_boot, int(count), width, len(values))
        for first in range(0, members.size, chunk):
            out[members[first : first + chunk]] = hierarchical_medians(
                padded[first : first + chunk], n_boot, rng
            )
    return CellReplicates(
        cells=cells.select([*keys, "n", "n_sessions"]), median=medians, replicates=out
    )
