"""Replay: every trial in its process, in order, and the KV lengths it visits first.

The History paragraph of :mod:`regimes.explain.history` says what is counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from regimes.data.schema import (
    RegimesInputError,
    as_polars,
)

__all__ = [
    "PROCESS_COLUMNS",
    "SHAPE_COLUMNS",
    "check_history_columns",
    "first_visits",
    "replay",
    "row_key",
]

PROCESS_COLUMNS: tuple[str, ...] = ("run_id", "session", "process_id")
"""Columns that together identify the process a trial ran in (those present)."""


SHAPE_COLUMNS: tuple[str, ...] = (
    "backend",
    "device",
    "model",
    "dtype",
    "use_cache",
    "attn_implementation",
    "sdpa_backends",
)
"""Columns that change the attention's shapes or kernels: a process keeps one history of
visited KV lengths per combination of those present."""


def row_key(frame: pl.DataFrame, columns: Sequence[str], name: str) -> pl.Expr:
    """One string per row joining ``columns`` (lists joined by commas; nulls empty)."""
    parts = []
    for c in columns:
        if isinstance(frame.schema[c], pl.List):
            parts.append(pl.col(c).list.eval(pl.element().cast(pl.String)).list.join(","))
        else:
            parts.append(pl.col(c).cast(pl.String))
    if not parts:
        return pl.lit("").alias(name)
    return pl.concat_str([p.fill_null("") for p in parts], separator="|").alias(name)


def check_history_columns(frame: pl.DataFrame) -> None:
    """Raise unless ``frame`` has what a history needs: order, process, budget."""
    columns = set(frame.columns)
    if "order" not in columns:
        raise RegimesInputError(
            "the trial table lacks the column 'order' (the execution order of trials in "
            "the run), so no process's history can be replayed. Runs written by "
            "`regimes collect` carry it; for another table add an integer 'order' column "
            "giving the order in which the trials, warm-ups included, ran"
        )
    if not columns & {"session", "process_id"}:
        raise RegimesInputError(
            "the trial table lacks both 'session' and 'process_id', so trials cannot be "
            "assigned to the process they ran in. Runs written by `regimes collect` carry "
            "both; for another table add 'session' (one value per process)"
        )
    for column in ("order", "budget", "prompt_tokens"):
        if column == "prompt_tokens" and column not in columns:
            continue
        if column not in columns:
            raise RegimesInputError(
                f"the trial table lacks the column {column!r}; it has {frame.columns}"
            )
        dtype = frame.schema[column]
        nulls = frame.get_column(column).null_count()
        if not dtype.is_integer() or nulls:
            raise RegimesInputError(
                f"column {column!r} must hold integers without nulls to replay a process's "
                f"history, found {dtype} with {nulls} null(s)"
            )


def first_visits(df: Any) -> pl.DataFrame:
    """Replay every process's history: the KV lengths each trial visits first.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The whole trial table of a run (or several), warm-ups included: a history is
        only as complete as the rows given. It needs ``order``, ``budget`` and
        ``session`` or ``process_id``; without ``prompt_tokens`` every trial is taken
        to share one prompt length.

    Returns
    -------
    polars.DataFrame
        ``df`` sorted by process and ``order``, with ``n_new_lengths`` (Int64: lengths
        ``p .. p + b - 1`` that no earlier trial of the process and shape family
        visited) and ``first_in_process`` (Boolean: the first trial of its shape family
        in its process). See the module docstring for the conventions.

    Raises
    ------
    RegimesInputError
        When ``order``, ``budget``, or both ``session`` and ``process_id`` are missing,
        or ``order`` repeats within a process.

    See Also
    --------
    history_effect : the cost of a first visit, estimated from these counts.

    Examples
    --------
    >>> import polars as pl
    >>> from regimes.explain.history import first_visits
    >>> runs = pl.DataFrame({"session": [0, 0, 0], "order": [0, 1, 2],
    ...     "backend": "cuda", "model": "gpt2", "use_cache": True, "prompt_tokens": 8,
    ...     "budget": [64, 32, 96], "latency_s": [2.4, 0.13, 1.3]})
    >>> first_visits(runs)["n_new_lengths"].to_list()
    [64, 0, 32]
    """
    frame = as_polars(df)
    check_history_columns(frame)
    return replay(frame)


def replay(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``n_new_lengths`` and ``first_in_process`` to a checked table, in process order.

    Raises
    ------
    RegimesInputError
        When ``order`` repeats within a process.
    """
    process = [c for c in PROCESS_COLUMNS if c in frame.columns]
    shape = [c for c in SHAPE_COLUMNS if c in frame.columns]
    frame = frame.with_columns(
        row_key(frame, process, "_process"), row_key(frame, shape, "_family")
    )
    repeats = frame.select("_process", "order").is_duplicated()
    if repeats.any():
        raise RegimesInputError(
            f"'order' repeats within a process in {int(repeats.sum())} row(s) "
            f"(process columns {process}); each trial of a process needs its own order. "
            "Pass each run once (drop duplicated rows), or give runs distinct run_id"
        )
    frame = frame.sort("_process", "_family", "order")
    keys = frame.select(pl.struct("_process", "_family").rank("dense")).to_series().to_numpy()
    prompt = (
        frame.get_column("prompt_tokens").to_numpy()
        if "prompt_tokens" in frame.columns
        else np.zeros(frame.height, dtype=np.int64)
    )
    budget = frame.get_column("budget").to_numpy()
    n_new, opening = _count_new_lengths(keys, prompt, prompt + budget)
    return frame.drop("_process", "_family").with_columns(
        pl.Series("n_new_lengths", n_new, dtype=pl.Int64),
        pl.Series("first_in_process", opening, dtype=pl.Boolean),
    )


def _count_new_lengths(
    keys: np.ndarray, first: np.ndarray, stop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the lengths ``first .. stop - 1`` its key's earlier rows did not visit.

    Rows are sorted by key, then order; returns the counts and the first row of each key.
    """
    n_new = np.zeros(keys.size, dtype=np.int64)
    opening = np.ones(keys.size, dtype=bool)
    opening[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(opening)
    stops = np.append(starts[1:], keys.size)
    for a, b in zip(starts, stops, strict=True):
        seen = np.zeros(int(stop[a:b].max()) + 1, dtype=bool)
        for i in range(a, b):
            window = seen[max(int(first[i]), 0) : max(int(stop[i]), 0)]
            n_new[i] = window.size - np.count_nonzero(window)
            window[:] = True
    return n_new, opening
