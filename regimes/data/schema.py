"""The trial table: one row per measured generation, with an explicit schema.

Collectors write it, the statistics read it; this module is where both agree. It holds
the column types, the case columns that identify a measured condition, and the
validation every public entry point runs first, so that bad input fails here with a
message naming the problem instead of deep inside numpy.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
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
    "OPS_SCHEMA",
    "STEP_SCHEMA",
    "TRIAL_SCHEMA",
    "as_polars",
    "check_fraction",
    "check_min_ratio",
    "check_n_boot",
    "check_seed",
    "closest_column",
    "empty_trials",
    "n_boot_floor",
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
    "attn_implementation": pl.String(),
    "sdpa_backends": pl.String(),
}
"""Column types of the trial table (docs/data.md). ``engine``, ``process_id``, ``host`` and
``injected_factor`` are additions: which generation engine produced the row, a unique id
of the OS process it ran in (a resumed session runs in a new process, and that must stay
visible), the machine's host name (null in runs written before it was recorded), and
the slowdown injected into a synthetic run (1.0 outside its interval, null in runs
without fault injection), the attention implementation the model ran (``eager``,
``sdpa``, ...) and the scaled-dot-product-attention kernels enabled during the
generation (comma-separated, e.g. ``flash,efficient,math``)."""

REQUIRED_COLUMNS: tuple[str, ...] = ("budget", "latency_s")
"""The only columns an analysis needs, at its default ``x`` and ``y``; every case column
is optional (a table without any is one curve), and another ``x`` or ``y`` replaces these."""

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
    "attn_implementation": pl.String(),
    "sdpa_backends": pl.String(),
}
"""Per-token step times of instrumented trials; step 0 is the prefill. The attention
implementation and SDPA kernels of the trial are repeated on its steps, so that the steps
of a spec with ``attn_implementation = ["eager", "sdpa"]`` can be told apart (null in
runs written before they were recorded)."""

OPS_SCHEMA: dict[str, pl.DataType] = {
    **{c: STEP_SCHEMA[c] for c in ("run_id", "session", *CASE_COLUMNS, "budget", "trial")},
    "attn_implementation": pl.String(),
    "sdpa_backends": pl.String(),
    "scope": pl.String(),
    "operator": pl.String(),
    "device_type": pl.String(),
    "self_host_s": pl.Float64(),
    "self_device_s": pl.Float64(),
    "calls": pl.Int64(),
    "latency_s": pl.Float64(),
    "process_id": pl.String(),
    "host": pl.String(),
}
"""Profiled generations (spec key ``profile``), one row per operator (or device kernel)
of each: its self time on the host and on the device (null where the backend's profiler
reports none) and its calls; ``scope`` is the outermost operator it ran inside (itself
when called from the model's code); ``latency_s`` is that generation's latency with the
profiler on. Profiled generations are never rows of the trial table."""

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
    """Return an empty trial table with the full schema."""
    return pl.DataFrame(schema=TRIAL_SCHEMA)


def as_polars(df: Any) -> pl.DataFrame:
    """Return any dataframe narwhals reads (polars, pandas, pyarrow, modin, ...) as polars.

    A lazy frame (polars, DuckDB, ...) is collected. pandas keeps its own path: its index
    is dropped rather than carried as a column, and repeated column names are refused.

    Raises
    ------
    RegimesInputError
        When ``df`` is not a dataframe, or a pandas frame polars cannot hold.

    Examples
    --------
    >>> import pyarrow as pa
    >>> as_polars(pa.table({"budget": [8], "latency_s": [0.1]})).columns
    ['budget', 'latency_s']
    """
    if isinstance(df, pl.LazyFrame):
        return df.collect()
    if isinstance(df, pl.DataFrame):
        return df
    import pandas as pd  # a dependency; imported here so that polars users never load it

    if isinstance(df, pd.DataFrame):
        return _from_pandas(df)
    import narwhals as nw

    try:
        frame = nw.from_native(df)
    except TypeError:
        raise RegimesInputError(
            f"expected a dataframe (polars, pandas, pyarrow or another that narwhals "
            f"reads), got {type(df).__name__}; build one from your data first"
        ) from None
    if isinstance(frame, nw.LazyFrame):
        return frame.collect(backend="polars").to_native()
    return frame.to_polars()


FLAG_COLUMNS: tuple[str, ...] = ("warmup", "use_cache", "instrumented")
"""Boolean columns of the trial table, which users also write as 0/1 or text."""

_TRUE, _FALSE = ("true", "1", "yes", "t", "y"), ("false", "0", "no", "f", "n")


def as_flags(frame: pl.DataFrame, columns: Iterable[str]) -> pl.DataFrame:
    """Read each of ``columns`` present in ``frame`` as booleans.

    A CSV or a spreadsheet stores flags as ``0``/``1`` or ``"true"``/``"false"`` (any
    case, also ``yes``/``no``); those are the booleans they mean. Anything else is
    refused, naming the column and a value: a ``warmup`` read wrongly would analyse
    warm-ups as measured trials.

    Raises
    ------
    RegimesInputError
        A column holding values other than those.
    """
    casts = [
        _flag(frame, c) for c in columns if c in frame.columns and frame.schema[c] != pl.Boolean
    ]
    return frame.with_columns(casts) if casts else frame


def _flag(frame: pl.DataFrame, column: str) -> pl.Series:
    """One column of 0/1 or true/false words as booleans, nulls kept."""
    values = frame.get_column(column)
    if values.dtype.is_numeric():
        words = values.cast(pl.Float64).cast(pl.String).str.replace(r"\.0$", "")
    elif values.dtype == pl.String:
        words = values.str.strip_chars().str.to_lowercase()
    else:
        raise RegimesInputError(
            f"column {column!r} must hold booleans (true/false or 0/1), found {values.dtype}"
        )
    bad = words.filter(~words.is_in([*_TRUE, *_FALSE]) & words.is_not_null())
    if bad.len():
        raise RegimesInputError(
            f"column {column!r} must hold booleans (true/false or 0/1), found "
            f"{values.filter(words == bad[0])[0]!r} in {bad.len()} row(s)"
        )
    word = pl.col(column)
    flags = pl.when(word.is_null()).then(None).otherwise(word.is_in(list(_TRUE)))
    return words.to_frame().select(flags.alias(column)).to_series()


def _from_pandas(df: Any) -> pl.DataFrame:
    """Convert a pandas frame, refusing what a polars frame cannot hold, by name."""
    names = [str(c) for c in df.columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RegimesInputError(
            f"the trial table has duplicate column name(s) {repeated}: give each column a "
            "name of its own (pandas allows repeats, a trial table does not)"
        )
    try:
        return pl.from_pandas(df.reset_index(drop=True).set_axis(names, axis=1))
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:  # pyarrow's too
        message = " ".join(str(exc).split())
        raise RegimesInputError(f"the pandas trial table cannot be converted: {message}") from None


def _require_numeric(df: pl.DataFrame, column: str) -> None:
    dtype = df.schema[column]
    if not isinstance(dtype, _NUMERIC):
        raise RegimesInputError(f"column {column!r} must be numeric, found {dtype}")


PHASE_COLUMNS: tuple[str, ...] = ("prefill_s", "decode_s")
"""Phase times, measured only by instrumented sweeps."""


def _require_instrumented(frame: pl.DataFrame, y: str) -> None:
    """Refuse a phase time as ``y`` when no trial measured it: the run is not instrumented."""
    if y not in PHASE_COLUMNS:
        return
    measured = frame.get_column(y).null_count() < frame.height if y in frame.columns else False
    if not measured:
        raise RegimesInputError(
            f"the run is not instrumented: no trial measured {y!r} (phase times need a sweep "
            "collected with instrument = true); analyse latency_s, or collect again with "
            "instrumentation on"
        )


def validate_trials(
    df: Any,
    *,
    x: str = "budget",
    y: str = "latency_s",
    required: Sequence[str] | None = None,
    drop_warmup: bool = True,
) -> pl.DataFrame:
    """Check a trial table and return it ready for analysis.

    The frame is converted to polars; it must be non-empty and hold ``x`` and ``y``
    (every other column is optional: without case columns the table is one curve);
    ``x`` may be ``total_tokens``, derived as ``prompt_tokens + budget``;
    warm-up rows are dropped; ``x`` and ``y`` must be numeric, finite and ``y`` strictly
    positive (latencies are analysed on the log scale).

    Parameters
    ----------
    df : polars.DataFrame, polars.LazyFrame or pandas.DataFrame
        The trial table.
    x : str, default "budget"
        The axis (``"budget"`` or ``"total_tokens"``, or any numeric column).
    y : str, default "latency_s"
        The time analysed (``"latency_s"``, or ``"decode_s"`` / ``"prefill_s"`` of an
        instrumented run).
    required : sequence of str, optional
        Columns that must be present besides ``x`` and ``y``; default none.
    drop_warmup : bool, default True
        Drop rows flagged ``warmup``.

    Returns
    -------
    polars.DataFrame
        The measured trials, ``y`` as Float64 (and ``total_tokens`` when asked for).

    Raises
    ------
    RegimesInputError
        Naming the problem: not a frame, no rows, a missing column, a phase time asked
        of a run that is not instrumented, only warm-ups, non-numeric or non-finite
        ``x``, or null, NaN, infinite, zero or negative ``y``.

    See Also
    --------
    regimes.load : reads a trial table from disk.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"budget": [8, 16], "latency_s": [0.1, 0.2]})
    >>> validate_trials(df).height
    2
    >>> validate_trials(df, y="latency")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    regimes.errors.RegimesInputError: ... lacks ... 'latency'; ... did you mean 'latency_s' ...
    >>> validate_trials(df, y="decode_s")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    regimes.errors.RegimesInputError: the run is not instrumented: ...
    """
    frame = as_polars(df)
    if frame.height == 0:
        raise RegimesInputError("the trial table is empty (0 rows)")
    frame = _with_total_tokens(frame, x)
    _require_instrumented(frame, y)
    _require_columns(frame, x, y, required)
    frame = as_flags(frame, FLAG_COLUMNS)
    if drop_warmup and "warmup" in frame.columns:
        frame = frame.filter(~pl.col("warmup").fill_null(False))
        if frame.height == 0:
            raise RegimesInputError("every row is a warm-up; no measured trials remain")
    for column in (x, y):
        _require_numeric(frame, column)
    frame = frame.with_columns(pl.col(y).cast(pl.Float64))
    _require_finite(frame, x, y)
    return frame


def _with_total_tokens(frame: pl.DataFrame, x: str) -> pl.DataFrame:
    if x != "total_tokens" or "total_tokens" in frame.columns:
        return frame
    missing = [c for c in ("prompt_tokens", "budget") if c not in frame.columns]
    if missing:
        raise RegimesInputError(
            "x='total_tokens' needs columns 'prompt_tokens' and 'budget'; missing "
            + ", ".join(repr(c) for c in missing)
        )
    return frame.with_columns((pl.col("prompt_tokens") + pl.col("budget")).alias("total_tokens"))


def closest_column(name: str, columns: Sequence[str]) -> str:
    """Return ``"did you mean 'COL' for 'NAME'?"`` for the closest of ``columns``, or ``""``.

    Examples
    --------
    >>> closest_column("latency", ["budget", "latency_s"])
    "did you mean 'latency_s' for 'latency'?"
    """
    close = difflib.get_close_matches(name, list(columns), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r} for {name!r}?" if close else ""


def _require_columns(frame: pl.DataFrame, x: str, y: str, required: Sequence[str] | None) -> None:
    """Raise unless ``x``, ``y`` and ``required`` are columns, naming the closest matches."""
    needed = list(dict.fromkeys([*(required or ()), x, y]))
    missing = [c for c in needed if c not in frame.columns]
    if not missing:
        return
    hints = [closest_column(c, frame.columns) for c in missing]
    fix = (
        " ".join(h for h in hints if h)
        if any(hints)
        else "rename the table's columns, or pass x=/y= naming the columns it has"
    )
    raise RegimesInputError(
        "the trial table lacks required column(s): "
        + ", ".join(repr(c) for c in missing)
        + f"; it has {frame.columns}; {fix}"
    )


def _require_finite(frame: pl.DataFrame, x: str, y: str) -> None:
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


def check_fraction(**values: float) -> None:
    """Raise :class:`RegimesInputError` unless every named value lies in (0, 1).

    For ``alpha``, ``level`` and the like: ``check_fraction(alpha=0.05, level=0.95)``.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0.0 < value < 1.0):
            raise RegimesInputError(f"{name} must lie in (0, 1), got {value!r}")


def check_min_ratio(min_ratio: Any) -> None:
    """Raise :class:`RegimesInputError` unless ``min_ratio`` is a finite number >= 1.

    Any real number counts (numpy scalars too, as ``check_fraction`` takes them);
    ``True`` does not, though Python counts it as 1.
    """
    real = isinstance(min_ratio, numbers.Real) and not isinstance(min_ratio, (bool, np.bool_))
    if not (real and math.isfinite(min_ratio) and min_ratio >= 1.0):
        raise RegimesInputError(f"min_ratio must be a finite number >= 1, got {min_ratio!r}")


N_BOOT_MIN = 100
"""Fewest bootstrap replicates any analysis accepts (more at levels above 0.95)."""

_BYTES_PER_DRAW = 32
"""Bytes of working memory per resampled value and column (indices, draws, copies)."""


def n_boot_floor(level: float = 0.95) -> int:
    """Fewest replicates for a percentile interval at ``level``.

    At least :data:`N_BOOT_MIN`, and enough that about 2.5 replicates are expected
    beyond each bound: ``ceil(5 / (1 - level))`` (100 at 0.95, 500 at 0.99). With fewer,
    a bound is the most extreme replicate or an interpolation towards it.
    """
    return max(N_BOOT_MIN, math.ceil(5.0 / (1.0 - level) - 1e-9))


def memory_limit() -> int:
    """Bytes an analysis may allocate for bootstrap replicates: half the physical memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX
        total = 16 * 2**30
    return int(total) // 2


def replicate_bytes(n_boot: int, cells: int = 1, columns: int = 1, draws: int = 1) -> int:
    """Estimated peak bytes of a bootstrap over ``cells`` cells.

    The replicate medians kept, ``cells * n_boot * columns`` float64 values, plus the
    working arrays of one cell's resample, ``n_boot * draws`` resampled values (``draws``:
    the largest cell's trial count) of :data:`_BYTES_PER_DRAW` bytes per column.
    """
    kept = 8 * cells * n_boot * columns
    working = _BYTES_PER_DRAW * n_boot * max(draws, 1) * (columns + 1)
    return int(kept + working)


def check_n_boot(
    n_boot: Any, *, level: float = 0.95, cells: int = 1, columns: int = 1, draws: int = 1
) -> None:
    """Check a number of bootstrap replicates: the one bound every analysis applies.

    Parameters
    ----------
    n_boot : int
        The number of replicates asked for.
    level : float, default 0.95
        Confidence level of the intervals drawn from them (sets the floor).
    cells, columns, draws : int, default 1
        Cells resampled, value columns per cell and the largest cell's trial count, for
        the memory estimate (:func:`replicate_bytes`); the defaults give the least
        memory any bootstrap needs.

    Raises
    ------
    RegimesInputError
        When ``n_boot`` is not an integer (``True`` is refused), is below
        :func:`n_boot_floor` (an interval from so few replicates is not meaningful), or
        would need more memory than :func:`memory_limit` (refused before allocating).

    Examples
    --------
    >>> check_n_boot(2000)
    >>> check_n_boot(1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    regimes.errors.RegimesInputError: n_boot=1 is too few for a 95% interval: ...
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)):
        raise RegimesInputError(
            f"n_boot must be a whole number of bootstrap replicates, got {n_boot!r}"
        )
    floor = n_boot_floor(level)
    if n_boot < floor:
        raise RegimesInputError(
            f"n_boot={n_boot} is too few for a {100 * level:g}% interval: use at least "
            f"{floor} replicates (the default is 2000)"
        )
    need, limit = replicate_bytes(int(n_boot), cells, columns, draws), memory_limit()
    if need > limit:
        most = int(n_boot * limit // need)
        raise RegimesInputError(
            f"n_boot={n_boot} would need about {need / 2**30:.1f} GiB for the bootstrap "
            f"replicates ({cells} cell(s)), more than the {limit / 2**30:.1f} GiB allowed "
            f"(half this machine's memory); use n_boot <= {most}"
        )


def check_seed(seed: Any) -> None:
    """Check a random seed: a whole number >= 0 (``True`` is refused).

    Raises
    ------
    RegimesInputError
        When ``seed`` is not a non-negative integer.

    Examples
    --------
    >>> check_seed(0)
    >>> check_seed(-1)
    Traceback (most recent call last):
    ...
    regimes.errors.RegimesInputError: seed must be a whole number >= 0, got -1
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise RegimesInputError(f"seed must be a whole number >= 0, got {seed!r}")


def present_case_columns(
    df: pl.DataFrame, candidates: Iterable[str] = CASE_COLUMNS, exclude: Iterable[str] = ()
) -> list[str]:
    """Case columns present in ``df`` (in canonical order), minus ``exclude``."""
    excluded = set(exclude)
    return [c for c in candidates if c in df.columns and c not in excluded]
