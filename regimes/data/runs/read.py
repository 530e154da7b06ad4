"""Reading a run: its tables, every part verified, or a single trial file.

A run whose part is damaged is refused naming the part, or read without it when asked
(``on_damaged="skip"``, with a :class:`~regimes.errors.RegimesWarning` naming it). Runs
written before format 2 carry no checksum and are read with one warning saying so
(:func:`regimes.data.io.upgrade_run` records checksums).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data._membership import RunIdentity, regular_parts, require_regular_file
from regimes.data.runs.parts import (
    TABLES,
    DamagedPart,
    OnDamaged,
    member_part,
    read_meta,
    read_part,
    warn_unverified,
)
from regimes.data.runs.scan import is_several, load_runs
from regimes.data.schema import (
    ERROR_SCHEMA,
    OPS_SCHEMA,
    STEP_SCHEMA,
    RegimesInputError,
    RegimesWarning,
)

__all__ = ["Run", "load", "read_run"]


@dataclass(frozen=True)
class Run:
    """A run read from disk: the trial table, step times, errors and metadata.

    Attributes
    ----------
    trials : polars.DataFrame
        One row per measured generation (:data:`~regimes.data.schema.TRIAL_SCHEMA`).
    steps : polars.DataFrame
        Per-token step times of instrumented trials (empty when none).
    errors : polars.DataFrame
        Cases that raised (empty when none).
    meta : dict
        The environment metadata (``meta.json``, or a single file's own).
    path : pathlib.Path or None
        Where the run was read from.
    ops : polars.DataFrame
        Operator profiles of profiled generations (:data:`~regimes.data.schema.
        OPS_SCHEMA`; empty when the run has none).

    See Also
    --------
    read_run : reads one.
    """

    trials: pl.DataFrame
    steps: pl.DataFrame
    errors: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    ops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=OPS_SCHEMA))


def read_parts(
    paths: list[Path], table: str, on_damaged: OnDamaged, identity: RunIdentity
) -> tuple[list[pl.DataFrame], list[DamagedPart], int]:
    """Read every part of one table; damaged ones raise, or are returned apart to skip.

    Returns the frames, the damaged parts, and how many parts carry no checksum.
    """
    frames, damaged, unverified = [], [], 0
    for path in paths:
        try:
            frame, checksummed = member_part(path, table, identity)
        except DamagedPart as exc:
            if on_damaged == "raise":
                raise
            damaged.append(exc)
            continue
        frames.append(frame)
        unverified += not checksummed
    return frames, damaged, unverified


def concat_parts(frames: list[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Return one table's parts as one frame (``schema``'s columns when there are none)."""
    if not frames:
        return pl.DataFrame(schema=schema)
    # Rows identical in every column (``order`` included, for trials) can only come from
    # a compaction interrupted between writing the merged part and deleting its sources.
    return pl.concat(frames, how="vertical").unique(maintain_order=True)


def _check_on_damaged(on_damaged: Any) -> None:
    if on_damaged not in ("raise", "skip"):
        raise RegimesInputError(f"on_damaged must be 'raise' or 'skip', got {on_damaged!r}")


def read_run(path: str | os.PathLike[str], *, on_damaged: OnDamaged = "raise") -> Run:
    """Read a run directory (or a single parquet or CSV trial file) from disk.

    Every part is verified against the checksum recorded when it was written and
    against the run it claims to belong to (parts of runs written before format 2 have
    no checksum: such a run is read with one warning). Rows repeated
    exactly (every column equal, which for trials includes the unique execution
    ``order``) are read once: they are the trace of an interrupted
    :meth:`RunWriter.compact`, never two measurements.

    Parameters
    ----------
    path : str or os.PathLike
        A run directory, a ``.parquet`` file (as :func:`save` writes) or a ``.csv``.
    on_damaged : {"raise", "skip"}, default "raise"
        What to do with a part that cannot be read as written (truncated, bytes
        changed): refuse the run naming the part, or leave the part out with a
        :class:`~regimes.errors.RegimesWarning` naming it (only its rows are lost).

    Returns
    -------
    Run
        The trials, steps, errors, metadata and operator profiles.

    Raises
    ------
    RegimesInputError
        With one line naming the problem: a missing path, a directory that is not a
        run, a ``meta.json`` that is not a JSON object, a damaged part (with
        ``on_damaged="raise"``), a part of another run, a file that is not a regular
        file, or a run written by a newer results format.

    See Also
    --------
    load : the trial table alone.
    RunWriter : writes runs.

    Examples
    --------
    >>> run = read_run("examples/data/cpu-distilgpt2")  # from the repository root
    >>> run.trials.height > 0, sorted(run.meta)[:2]
    (True, ['command', 'environment'])
    """
    _check_on_damaged(on_damaged)
    p = Path(path)
    if not p.exists():
        raise RegimesInputError(f"no run at {str(p)!r}: the path does not exist")
    if not p.is_dir():
        require_regular_file(p, "trial file")
        return _read_file(p)
    meta_path = p / "meta.json"
    trial_parts = regular_parts(p / "trials")
    if not meta_path.exists() and not trial_parts:
        raise RegimesInputError(
            f"{str(p)!r} is not a run directory (no meta.json and no trials/*.parquet)"
        )
    meta = read_meta(meta_path) if meta_path.exists() else {}
    tables, unverified = _read_tables(p, RunIdentity.of(p, meta), on_damaged)
    warn_unverified(p, unverified)
    return Run(tables["trials"], tables["steps"], tables["errors"], meta, p, tables["ops"])


def _read_tables(
    p: Path, identity: RunIdentity, on_damaged: OnDamaged
) -> tuple[dict[str, pl.DataFrame], int]:
    """Read every table of a run directory; return them and the unverified part count."""
    tables: dict[str, pl.DataFrame] = {}
    unverified = 0
    for table, schema in TABLES.items():
        try:
            parts = regular_parts(p / table)
            frames, damaged, count = read_parts(parts, table, on_damaged, identity)
        except DamagedPart as exc:
            raise RegimesInputError(
                f"part {table}/{exc.path.name} of the run {str(p)!r} is damaged: {exc.reason}; "
                "to load the run without it pass on_damaged='skip' (regimes.load) or "
                "--skip-damaged (the regimes command)"
            ) from None
        for part in damaged:
            warnings.warn(
                f"skipped damaged part {table}/{part.path.name} of the run {str(p)!r} "
                f"({part.reason}); its rows are not loaded",
                RegimesWarning,
                stacklevel=3,
            )
        tables[table] = concat_parts(frames, schema)
        unverified += count
    return tables, unverified


def _read_file(path: Path) -> Run:
    """Read a single ``.parquet`` or ``.csv`` trial table."""
    if path.suffix == ".parquet":
        try:
            frame, meta, _ = read_part(path)
        except DamagedPart as exc:
            raise RegimesInputError(f"{str(path)!r} is damaged: {exc.reason}") from None
    elif path.suffix == ".csv":
        try:
            frame, meta = pl.read_csv(path, try_parse_dates=False), {}
        except Exception as exc:  # polars raises several types for a malformed file
            message = " ".join(str(exc).split())
            raise RegimesInputError(
                f"{str(path)!r} is not a readable CSV file: {message}"
            ) from None
    else:
        raise RegimesInputError(f"{str(path)!r}: expected a run directory, .parquet or .csv file")
    empty_steps, empty_errors = pl.DataFrame(schema=STEP_SCHEMA), pl.DataFrame(schema=ERROR_SCHEMA)
    return Run(frame, empty_steps, empty_errors, meta, path)


_LOADABLE = ("trials", "steps", "errors", "ops")
"""The tables :func:`load` returns by name."""


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    on_damaged: OnDamaged = "raise",
    table: str = "trials",
) -> pl.DataFrame:
    """Return the trial table of a run directory or file, sorted by ``order``.

    Parameters
    ----------
    path : str, os.PathLike, or a list or tuple of them
        A run directory, or a ``.parquet`` / ``.csv`` trial file. Several runs, a list
        of paths or a ``str`` glob pattern (``"runs/h200-*"``), are concatenated run
        after run, each with its ``run_id`` and the environment columns
        ``torch_version``, ``transformers_version``, ``os_version``, ``python_version``
        and ``host`` from its ``meta.json`` (``device`` filled from it where the trials
        lack one).
    on_damaged : {"raise", "skip"}, default "raise"
        For one run: a damaged part refuses the run, or is left out with a warning (see
        :func:`read_run`). Several runs are always refused on a damaged part.
    table : {"trials", "steps", "errors", "ops"}, default "trials"
        Which table of one run directory: the trials, the per-token step times, the
        failed cases, or the operator profiles of profiled generations (spec key
        ``profile``; :func:`regimes.attribute_operators` reads them).

    Returns
    -------
    polars.DataFrame
        One row per trial (warm-ups included, flagged ``warmup``), or of the ``table`` asked.

    Raises
    ------
    RegimesInputError
        As :func:`read_run`; for several runs also a pattern that matches nothing or
        one run given twice.

    See Also
    --------
    read_run : the trials with the steps, errors and metadata of one run.
    regimes.compare_runs : two runs compared.

    Examples
    --------
    >>> from pathlib import Path
    >>> data = Path("examples") / "data"  # the committed runs, from the repository root
    >>> load(data / "cuda-h200-gpt2").select("backend", "model").unique().rows()
    [('cuda', 'gpt2')]
    >>> runs = load(str(data / "cuda-h200-*"))
    >>> runs.select("run_id", "torch_version").unique().height >= 2
    True
    """
    if table not in _LOADABLE:
        raise RegimesInputError(f"table must be one of {list(_LOADABLE)}, got {table!r}")
    if is_several(path) or not isinstance(path, (str, os.PathLike)):
        if table != "trials":
            raise RegimesInputError(
                f"table={table!r} reads one run directory; load each run's {table} apart"
            )
        return load_runs(path)
    run = read_run(path, on_damaged=on_damaged)
    if table != "trials":
        return getattr(run, table)
    trials = run.trials
    if "order" in trials.columns and trials.height:
        trials = trials.sort("order", nulls_last=True)
    return trials
