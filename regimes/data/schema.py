"""The trial table: one row per measured generation, with an explicit schema.

Collectors write it, the statistics read it; this module is where both agree. It holds
the column types, the case columns that identify a measured condition, and the
validation every public entry point runs first, so that bad input fails here with a
message naming the problem instead of deep inside numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl

from regimes.errors import RegimesInputError, RegimesWarning

__all__ = [
    "CASE_COLUMNS",
    "ERROR_SCHEMA",
    "REQUIRED_COLUMNS",
    "RegimesInputError",
    "RegimesWarning",
    "STEP_SCHEMA",
    "TRIAL_SCHEMA",
    "as_polars",
    "empty_trials",
    "validate_trials",
]


TRIAL_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "session": pl.Int64(),
    "backend": pl.String(),
    "device": pl.String(),
    "model": pl.String(),
    "dtype": pl.String(),
    "engine": pl.String(),
    "use_cache": pl.Boolean(),
    "prompt_tokens": pl.Int64(),
    "budget": pl.Int64(),
    "trial": pl.Int64(),
    "order": pl.Int64(),
    "warmup": pl.Boolean(),
    "latency_s": pl.Float64(),
    "prefill_s": pl.Float64(),
    "decode_s": pl.Float64(),
    "new_tokens": pl.Int64(),
    "mem_allocated_bytes": pl.Int64(),
    "mem_driver_bytes": pl.Int64(),
    "rss_bytes": pl.Int64(),
    "instrumented": pl.Boolean(),
    "process_id": pl.String(),
    "host": pl.String(),
    "injected_factor": pl.Float64(),
}
"""Column types of the trial table (DESIGN.md). ``engine``, ``process_id``, ``host`` and
``injected_factor`` are additions: which generation engine produced the row, a unique id
of the OS process it ran in (a resumed session runs in a new process, and that must stay
visible), the machine's host name (null in runs written before it was recorded), and
the slowdown injected into a synthetic run (1.0 outside its interval, null in runs
without fault injection)."""

REQUIRED_COLUMNS: tuple[str, ...] = ("backend", "model", "use_cache", "budget", "latency_s")

CASE_COLUMNS: tuple[str, ...] = (
    "backend",
    "device",
    "model",
    "dtype",
    "use_cache",
    "prompt_tokens",
)
"""Columns that identify a measured condition; analysis groups by those present."""

STEP_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "session": pl.Int64(),
    "backend": pl.String(),
    "device": pl.String(),
    "model": pl.String(),
    "dtype": pl.String(),
    "use_cache": pl.Boolean(),
    "prompt_tokens": pl.Int64(),
    "budget": pl.Int64(),
    "trial": pl.Int64(),
    "warmup": pl.Boolean(),
    "step": pl.Int64(),
    "step_s": pl.Float64(),
}
"""Per-token step times of instrumented trials; step 0 is the prefill."""

ERROR_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "session": pl.Int64(),
    "backend": pl.String(),
    "model": pl.String(),
    "dtype": pl.String(),
    "use_cache": pl.Boolean(),
    "prompt_tokens": pl.Int64(),
    "budget": pl.Int64(),
    "error_type": pl.String(),
    "error": pl.String(),
    "traceback": pl.String(),
}
"""Cases that raised (out of memory, unsupported dtype): recorded, not retried."""

_NUMERIC = (
    pl.Int8,
    pl.Int16,
    pl.Int32,
    pl.Int64,
    pl.UInt8,
    pl.UInt16,
    pl.UInt32,
    pl.UInt64,
    pl.Float32,
    pl.Float64,
)


def empty_trials() -> pl.DataFrame:
    """An empty trial table with the full schema."""
    return pl.DataFrame(schema=TRIAL_SCHEMA)


def as_polars(df: Any) -> pl.DataFrame:
    """Accept a polars or pandas frame (or a polars LazyFrame) and return polars."""
    if isinstance(df, pl.LazyFrame):
        return df.collect()
    if isinstance(df, pl.DataFrame):
        return df
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency of statsmodels
        pd = None
    if pd is not None and isinstance(df, pd.DataFrame):
        return pl.from_pandas(df.reset_index(drop=True))
    raise RegimesInputError(f"expected a polars or pandas DataFrame, got {type(df).__name__}")


def _require_numeric(df: pl.DataFrame, column: str) -> None:
    dtype = df.schema[column]
    if not isinstance(dtype, _NUMERIC):
        raise RegimesInputError(f"column {column!r} must be numeric, found {dtype}")


def validate_trials(
    df: Any,
    *,
    x: str = "budget",
    y: str = "latency_s",
    required: Sequence[str] | None = None,
    drop_warmup: bool = True,
) -> pl.DataFrame:
    """Check a trial table and return it ready for analysis.

    Steps, each failing with a :class:`RegimesInputError` that names the problem:
    the frame is converted to polars; it must be non-empty and hold the required
    columns; ``x`` may be ``total_tokens``, derived as ``prompt_tokens + budget``;
    warm-up rows are dropped; ``x`` and ``y`` must be numeric, finite and ``y``
    strictly positive (latencies are analysed on the log scale).
    """
    frame = as_polars(df)
    if frame.height == 0:
        raise RegimesInputError("the trial table is empty (0 rows)")
    if x == "total_tokens" and "total_tokens" not in frame.columns:
        missing_for_total = [c for c in ("prompt_tokens", "budget") if c not in frame.columns]
        if missing_for_total:
            raise RegimesInputError(
                "x='total_tokens' needs columns 'prompt_tokens' and 'budget'; missing "
                + ", ".join(repr(c) for c in missing_for_total)
            )
        frame = frame.with_columns(
            (pl.col("prompt_tokens") + pl.col("budget")).alias("total_tokens")
        )
    needed: list[str] = (
        list(required)
        if required is not None
        else [c for c in REQUIRED_COLUMNS if c not in ("budget", "latency_s")]
    )
    for column in (x, y):
        if column not in needed:
            needed.append(column)
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise RegimesInputError(
            "the trial table lacks required column(s): "
            + ", ".join(repr(c) for c in missing)
            + f"; it has {frame.columns}"
        )
    if drop_warmup and "warmup" in frame.columns:
        frame = frame.filter(~pl.col("warmup").fill_null(False))
        if frame.height == 0:
            raise RegimesInputError("every row is a warm-up; no measured trials remain")
    for column in (x, y):
        _require_numeric(frame, column)
    frame = frame.with_columns(pl.col(y).cast(pl.Float64))
    bad_x = frame.select(
        (pl.col(x).is_null() | ~pl.col(x).cast(pl.Float64).is_finite()).sum()
    ).item()
    if bad_x:
        raise RegimesInputError(f"column {x!r} has {bad_x} null or non-finite value(s)")
    checks = {
        "null": pl.col(y).is_null(),
        "NaN": pl.col(y).is_nan(),
        "infinite": pl.col(y).is_infinite(),
        "zero or negative": pl.col(y) <= 0,
    }
    counts = frame.select(
        [expr.fill_null(False).sum().alias(name) for name, expr in checks.items()]
    ).row(0, named=True)
    problems = [f"{n} {name}" for name, n in counts.items() if n]
    if problems:
        raise RegimesInputError(
            f"column {y!r} has " + ", ".join(problems) + " value(s); "
            "latencies must be finite and positive (drop or fix those rows first)"
        )
    return frame


def check_fraction(**values: float) -> None:
    """Raise :class:`RegimesInputError` unless every named value lies in (0, 1)
    (``alpha``, ``level`` and the like).
    """
    for name, value in values.items():
        if not 0.0 < value < 1.0:
            raise RegimesInputError(f"{name} must lie in (0, 1), got {value}")


def check_min_ratio(min_ratio: Any) -> None:
    """Raise :class:`RegimesInputError` unless ``min_ratio`` is a finite number >= 1."""
    if not (isinstance(min_ratio, (int, float)) and math.isfinite(min_ratio) and min_ratio >= 1.0):
        raise RegimesInputError(f"min_ratio must be a finite number >= 1, got {min_ratio!r}")


def check_n_boot(n_boot: Any) -> None:
    """Raise :class:`RegimesInputError` unless ``n_boot`` is a positive integer."""
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise RegimesInputError(f"n_boot must be a positive integer, got {n_boot!r}")


def present_case_columns(
    df: pl.DataFrame, candidates: Iterable[str] = CASE_COLUMNS, exclude: Iterable[str] = ()
) -> list[str]:
    """Case columns present in ``df`` (in canonical order), minus ``exclude``."""
    excluded = set(exclude)
    return [c for c in candidates if c in df.columns and c not in excluded]
