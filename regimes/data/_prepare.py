"""Trial rows ready for analysis: validated, grouped, deduplicated, replicated.

Every analysis (:func:`regimes.detect_regimes`, :func:`regimes.cache_speedup` and the
explanations) starts from the same preparation, so it lives here, apart from any
detector: :func:`prepare_trials` validates the table, chooses the group columns, keys
each trial's process (``_session``), takes the log of ``y`` (``_ly``) and drops what
cannot be analysed, warning about every row it drops.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import polars as pl

from regimes.data.schema import closest_column, present_case_columns, validate_trials
from regimes.errors import RegimesInputError, RegimesWarning

__all__ = ["HOST_COLUMN", "SESSION_COLUMNS", "TRIAL_IDENTITY", "group_columns", "prepare_trials"]

SESSION_COLUMNS = ("run_id", "session", "process_id")
"""Columns that together identify the process a trial ran in."""

HOST_COLUMN = "host"
"""The machine a trial ran on; a group column whenever it varies (see :func:`group_columns`)."""

TRIAL_IDENTITY = ("trial", "order")
"""Columns that tell one trial from another: a table with neither cannot hold a trial
twice, so equal rows in it are different trials."""


def _session_key(frame: pl.DataFrame, session: str | None) -> pl.Expr:
    """``_session``: a key of the process each trial ran in.

    The ``session`` column itself, or the one process column present, or a hash of the
    several present (a 64-bit hash of a million keys collides with odds of about one in
    ten million; a string key would cost far more to build and group by).
    """
    if session is not None:
        if session not in frame.columns:
            raise RegimesInputError(f"session column {session!r} is not in the trial table")
        return pl.col(session).alias("_session")
    present = [c for c in SESSION_COLUMNS if c in frame.columns]
    if not present:
        return pl.lit(0).alias("_session")
    if len(present) == 1:
        return pl.col(present[0]).alias("_session")
    return pl.struct(present).hash(seed=0).alias("_session")


def group_columns(
    frame: pl.DataFrame, x: str, by: str | Sequence[str] | None, *, reserved: Sequence[str] = ()
) -> list[str]:
    """Return ``by`` checked against the table, or every case column present except ``x``.

    With ``by=None``, ``host`` joins the case columns when it takes more than one value:
    two machines of one model report the same ``device``, and their curves (a fleet
    run, several runs loaded together) must be analysed apart. Every analysis groups
    its trials with this one rule.

    Parameters
    ----------
    frame : polars.DataFrame
        The validated trial table.
    x : str
        The position column; never a group column.
    by : str or sequence of str or None
        The caller's group columns; ``None``: the rule above.
    reserved : sequence of str, default ()
        Other columns the analysis reads as positions (history's ``budget``): never
        group columns either.

    Returns
    -------
    list of str

    Raises
    ------
    RegimesInputError
        When ``by`` names a column the table lacks, ``x`` or a reserved column.
    """
    excluded = [x, *reserved]
    if by is None:
        columns = present_case_columns(frame, exclude=excluded)
        if (
            HOST_COLUMN in frame.columns
            and HOST_COLUMN not in excluded
            and frame[HOST_COLUMN].n_unique() > 1
        ):
            columns.append(HOST_COLUMN)
        return columns
    named = [by] if isinstance(by, str) else list(by)
    missing = [c for c in named if c not in frame.columns]
    if missing:
        hints = " ".join(h for h in (closest_column(c, frame.columns) for c in missing) if h)
        raise RegimesInputError(
            f"by= names column(s) not in the trial table: {missing}; it has {frame.columns}"
            + (f"; {hints}" if hints else "; name columns it has, or by=[] for one curve")
        )
    if x in named:
        raise RegimesInputError(f"by= must not contain the x column {x!r}")
    taken = [c for c in reserved if c in named]
    if taken:
        raise RegimesInputError(f"by= must not contain {taken}: the analysis reads them as x")
    return named


def _drop_duplicates(frame: pl.DataFrame) -> pl.DataFrame:
    """Drop rows identical in every column, trial identity included (warned).

    Equal values are not the same trial: a table rounded to milliseconds has many equal
    rows. Only a table that says which trial each row is (:data:`TRIAL_IDENTITY`) can
    hold a row twice; without one, every row is taken as one trial.
    """
    if "order" in frame.columns:
        # each run's execution order never repeats: where it does not, no row can repeat
        if int(frame.get_column("order").n_unique()) == frame.height:
            return frame
        if "run_id" in frame.columns:
            # one integer per (run, order): far cheaper to count than text pairs
            code = pl.col("run_id").cast(pl.String).cast(pl.Categorical).to_physical()
            width = pl.col("order").max() - pl.col("order").min() + 1
            key = code.cast(pl.Int64) * width + (pl.col("order") - pl.col("order").min())
            if int(frame.select(key.n_unique()).item()) == frame.height:
                return frame
    # hash first: comparing a million rows on every column costs more than one u64 column,
    # and only rows whose hashes collide can be duplicates
    hashed = frame.hash_rows(seed=0)
    if not bool(hashed.is_duplicated().any()):
        return frame
    duplicated = int(frame.filter(hashed.is_duplicated()).is_duplicated().sum())
    if not duplicated:
        return frame
    if not any(c in frame.columns for c in TRIAL_IDENTITY):
        warnings.warn(
            f"{duplicated} rows equal another row in every column; the table has no "
            f"{' or '.join(TRIAL_IDENTITY)} column to tell trials apart, so each row is "
            "taken as one trial",
            RegimesWarning,
            stacklevel=4,
        )
        return frame
    before = frame.height
    frame = frame.unique(maintain_order=True)
    warnings.warn(
        f"dropped {before - frame.height} exact duplicate row(s) "
        f"({duplicated} rows were involved): a trial is counted once",
        RegimesWarning,
        stacklevel=4,
    )
    return frame


def _drop_single_trial_cells(frame: pl.DataFrame, cell_keys: list[str], x: str) -> pl.DataFrame:
    """Drop cells holding one trial (warned); an error when every cell does."""
    if int(frame.group_by(cell_keys).len().get_column("len").min()) > 1:  # type: ignore[arg-type]
        return frame
    frame = frame.with_columns(pl.len().over(cell_keys).alias("_n"))
    single = frame.filter(pl.col("_n") == 1)
    if single.height == frame.height:
        raise RegimesInputError(
            "every (group, x) cell holds a single trial; replication is required to "
            "estimate noise (run at least 2 trials per budget, 3 or more recommended)"
        )
    if single.height:
        warnings.warn(
            f"dropped {single.height} cell(s) with a single trial "
            f"(e.g. {x}={single.get_column(x)[0]}): replication is required to estimate "
            "a cell's noise",
            RegimesWarning,
            stacklevel=4,
        )
        frame = frame.filter(pl.col("_n") > 1)
    return frame.drop("_n")


def prepare_trials(
    df: Any, x: str, y: str, by: str | Sequence[str] | None, session: str | None
) -> tuple[pl.DataFrame, list[str]]:
    """Validate the trial table and make it ready for analysis.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table.
    x, y : str
        The position and measured columns (see :func:`regimes.validate_trials`).
    by : str or sequence of str or None
        Group columns; ``None`` takes every case column present except ``x``.
    session : str or None
        Column naming each trial's process; ``None`` joins those of
        :data:`SESSION_COLUMNS` present.

    Returns
    -------
    frame : polars.DataFrame
        The trials, with ``_session`` (a key of the process), ``_ly`` (log of ``y``) and
        ``_group`` (a 64-bit hash of the group columns' values).
    group_columns : list of str

    Raises
    ------
    RegimesInputError
        When the table fails validation, ``by`` or ``session`` name missing columns, or
        every cell holds a single trial.
    """
    frame = validate_trials(df, x=x, y=y)
    columns = group_columns(frame, x, by)
    frame = _drop_duplicates(frame)
    group = pl.struct(columns).hash(seed=0) if columns else pl.lit(0, dtype=pl.UInt64)
    frame = frame.with_columns(
        _session_key(frame, session), pl.col(y).log().alias("_ly"), group.alias("_group")
    )
    return _drop_single_trial_cells(frame, ["_group", x], x), columns
