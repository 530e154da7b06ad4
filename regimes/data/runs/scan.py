"""Several runs as one trial table, read lazily, with the environment of each.

A comparison of runs (a torch upgrade, another machine, another day) needs the trials of
each run tagged with the run they came from and with the environment that run measured
in. :func:`scan_runs` builds that table as a :class:`polars.LazyFrame`: each run's parts
are read and verified against the checksums recorded when they were written (as
:func:`regimes.read_run` verifies them: a damaged part is refused by name), conformed to
the trial schema, and given

* ``run_id``: the run's id (``meta.json``'s, else the directory or file name) wherever
  the trials carry none;
* :data:`ENV_COLUMNS`: the versions of torch, transformers, the OS and Python, and the
  host, from the run's ``meta.json`` (for a single parquet file, from the metadata the
  writer stores in it); a run resumed under another environment lists every value it
  saw, ``" | "``-separated, since a trial does not record which resume measured it;
* ``device``: the trials' own value, else the device ``meta.json`` names.

:func:`regimes.load` dispatches here for a list of paths or a glob pattern; a single path
keeps its plain behaviour.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data._membership import RunIdentity, regular_parts, require_regular_file
from regimes.data.runs.parts import (
    read_meta,
    read_run_part,
    read_verified_part,
    verify_part_as_polars_reads_it,
    warn_unverified,
)
from regimes.data.schema import TRIAL_SCHEMA
from regimes.errors import RegimesInputError

__all__ = ["ENV_COLUMNS", "is_several", "load_runs", "run_environment", "scan", "scan_runs"]

ENV_COLUMNS: tuple[str, ...] = (
    "torch_version",
    "transformers_version",
    "os_version",
    "python_version",
    "host",
)
"""Environment columns added to every trial of a multi-run table."""


_ENV_KEYS: dict[str, tuple[str, ...]] = {
    "torch_version": ("torch",),
    "transformers_version": ("transformers",),
    "os_version": ("os", "os_release"),
    "python_version": ("python",),
    "host": ("hostname",),
}
"""Where each environment column comes from in ``meta["environment"]`` (joined by a
space when several keys make one value)."""


_GLOB_CHARS = frozenset("*?[")


PathLike = str | os.PathLike[str]


def is_several(path: Any) -> bool:
    """Whether ``path`` names several runs: a list or tuple of paths, or a glob pattern."""
    if isinstance(path, (list, tuple)):
        return True
    return isinstance(path, str) and bool(_GLOB_CHARS & set(path))


def _expand(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """Expand a glob pattern or a list (whose items may be patterns) to run paths."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise RegimesInputError("no run given: pass one or more run paths or a glob pattern")
    out: list[Path] = []
    for item in items:
        if isinstance(item, str) and _GLOB_CHARS & set(item):
            matches = sorted(glob.glob(item))
            if not matches:
                raise RegimesInputError(f"no run matches the pattern {item!r}")
            out.extend(Path(m) for m in matches)
        elif isinstance(item, (str, os.PathLike)):
            out.append(Path(item))
        else:
            raise RegimesInputError(
                f"a run is named by a path (str or os.PathLike), got {type(item).__name__}"
            )
    return out


def _read_meta(path: Path) -> dict[str, Any]:
    # Read and checked as one run is (regimes.data.io): a JSON object of a known format.
    if path.is_dir():
        meta_path = path / "meta.json"
        return read_meta(meta_path) if meta_path.exists() else {}
    if path.suffix == ".parquet" and path.exists():
        require_regular_file(path, "trial file")
        return read_verified_part(path)[1]
    return {}


def run_environment(meta: dict[str, Any]) -> dict[str, str | None]:
    """Read the :data:`ENV_COLUMNS` values of a run, and its ``device``, from its metadata.

    Parameters
    ----------
    meta : dict
        A run's ``meta.json`` (``environment``, and ``resumes`` each with its own).

    Returns
    -------
    dict
        One string (or ``None`` when unrecorded) per environment column, plus
        ``device``; a value that changed between the run and its resumes lists each
        distinct one in order, ``" | "``-separated.
    """
    environments = [meta.get("environment") or {}] + [
        (resume or {}).get("environment") or {} for resume in meta.get("resumes") or []
    ]
    out: dict[str, str | None] = {}
    for column, keys in {**_ENV_KEYS, "device": ()}.items():
        seen: list[str] = []
        for env in environments:
            value = _device_of(env) if column == "device" else _joined(env, keys)
            if value is not None and value not in seen:
                seen.append(value)
        out[column] = " | ".join(seen) if seen else None
    return out


def _joined(env: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    parts = [str(env[k]) for k in keys if env.get(k) not in (None, "")]
    return " ".join(parts) if parts else None


def _device_of(env: dict[str, Any]) -> str | None:
    for backend in (env.get("backends") or {}).values():
        if isinstance(backend, dict) and backend.get("available") and backend.get("device"):
            return str(backend["device"])
    return None


def _conformed(frame: pl.LazyFrame, where: Path) -> pl.LazyFrame:
    """Give a run directory's part the trial schema's columns and types, lazily."""
    schema = frame.collect_schema()
    extra = [c for c in schema.names() if c not in TRIAL_SCHEMA]
    if extra:
        raise RegimesInputError(f"{str(where)!r}: unknown column(s) for the trial table: {extra}")
    return frame.select(
        [
            (pl.col(name).cast(dtype) if name in schema else pl.lit(None, dtype=dtype)).alias(name)
            for name, dtype in TRIAL_SCHEMA.items()
        ]
    )


def _scan_trials(path: Path, verify: bool, meta: dict[str, Any]) -> pl.LazyFrame:
    """Scan the trials of one run (directory, parquet or CSV file); duplicates once."""
    if not path.exists():
        raise RegimesInputError(f"no run at {str(path)!r}: the path does not exist")
    if not path.is_dir():
        require_regular_file(path, "trial file")
        if path.suffix == ".parquet":
            return _scan_part(path, verify)
        if path.suffix == ".csv":
            return pl.scan_csv(path, try_parse_dates=False)
        raise RegimesInputError(f"{str(path)!r}: expected a run directory, .parquet or .csv file")
    parts = regular_parts(path / "trials")
    if not parts:
        raise RegimesInputError(f"{str(path)!r} is not a run directory (no trials/*.parquet)")
    identity = RunIdentity.of(path, meta)
    unverified = 0
    for part in parts if verify else ():
        # As regimes.load reads it: verified, of this run, with the required columns.
        unverified += not read_run_part(part, "trials", identity)[1]
    warn_unverified(path, unverified)
    frames = [_conformed(_scan_part(p, verify, read_by_pyarrow=True), p) for p in parts]
    # rows identical in every column are the trace of an interrupted compaction
    # (see regimes.data.io.read_run), never two measurements
    return pl.concat(frames, how="vertical").unique(maintain_order=True)


def _scan_part(part: Path, verify: bool, *, read_by_pyarrow: bool = False) -> pl.LazyFrame:
    """Scan one parquet part, checked first as polars reads it when ``verify``.

    Verifying decodes the part with polars (as the scan will) and checks it against the
    checksum of its content (regimes.data.io), one part at a time and then dropped
    (and with pyarrow, as :func:`regimes.load` reads it, unless ``read_by_pyarrow``
    says the caller did), so a damaged part is refused by name while memory
    holds no more than one part; the frame itself stays a lazy ``scan_parquet``, read
    again, with only the columns and rows asked for, when collected.
    """
    if verify:
        # Both readers: load() reads with pyarrow, the scan with polars, and the two do
        # not read every byte alike; a part passes only when both read it as written.
        if not read_by_pyarrow:
            read_verified_part(part)
        verify_part_as_polars_reads_it(part)
    try:
        frame = pl.scan_parquet(part)
        frame.collect_schema()
    except pl.exceptions.PolarsError as exc:
        message = " ".join(str(exc).split())
        raise RegimesInputError(f"part {str(part)!r} cannot be read: {message}") from None
    return frame


def _tagged(trials: pl.LazyFrame, run_id: str, env: dict[str, str | None]) -> pl.LazyFrame:
    """``trials`` with ``run_id`` filled, the environment columns and ``device``."""
    names = trials.collect_schema().names()

    def filled(column: str, value: str | None) -> pl.Expr:
        constant = pl.lit(value, dtype=pl.String)
        if column in names:
            return pl.coalesce(pl.col(column).cast(pl.String), constant).alias(column)
        return constant.alias(column)

    columns = [filled("run_id", run_id), filled("device", env["device"])]
    columns += [filled(column, env[column]) for column in ENV_COLUMNS]
    out = trials.with_columns(columns)
    if "order" in names:
        out = out.sort("order", nulls_last=True, maintain_order=True)
    return out


def scan_runs(paths: PathLike | Sequence[PathLike], *, verify: bool = True) -> pl.LazyFrame:
    """Scan runs' trial tables as one lazy frame, tagged with their environment.

    Parameters
    ----------
    paths : str, os.PathLike or sequence of them
        Run directories or ``.parquet`` / ``.csv`` trial files; a ``str`` holding ``*``,
        ``?`` or ``[`` is a glob pattern (matches in sorted order), in a list too.
    verify : bool, default True
        Check every part against the checksum recorded when it was written before the
        frame is returned (each part is decoded once, one at a time): a damaged part is
        refused by name. ``False`` reads nothing until the frame is collected, and then
        only the columns and rows the query needs; a damaged part may then fail at
        collection or, for a part whose damage still decodes, go unnoticed.

    Returns
    -------
    polars.LazyFrame
        The runs' trials, run after run, each sorted by ``order``, with ``run_id`` filled
        and the columns :data:`ENV_COLUMNS` (see the module docstring).

    Raises
    ------
    RegimesInputError
        A path that does not exist or is not a run, a pattern that matches nothing, an
        unreadable or damaged part, or two runs with the same ``run_id`` (one run given
        twice).

    See Also
    --------
    regimes.load : collects this frame when given several runs.
    """
    frames: list[pl.LazyFrame] = []
    seen: dict[str, Path] = {}
    for path in _expand(paths):
        meta = _read_meta(path)
        run_id = str(meta.get("run_id") or path.stem)
        if run_id in seen:
            raise RegimesInputError(
                f"{str(seen[run_id])!r} and {str(path)!r} are the same run (run_id "
                f"{run_id!r}): give each run once"
            )
        seen[run_id] = path
        frames.append(_tagged(_scan_trials(path, verify, meta), run_id, run_environment(meta)))
    return pl.concat(frames, how="diagonal_relaxed")


def load_runs(paths: PathLike | Sequence[PathLike]) -> pl.DataFrame:
    """Collect :func:`scan_runs` (see there); errors while reading are one clear line.

    Parameters
    ----------
    paths : str, os.PathLike or sequence of them
        Run directories or trial files, or glob patterns.

    Returns
    -------
    polars.DataFrame
        Every run's trials with ``run_id`` and the environment columns.

    Raises
    ------
    RegimesInputError
        As :func:`scan_runs`, and for parts that cannot be read or combined.
    """
    frame = scan_runs(paths)
    try:
        return frame.collect()
    except pl.exceptions.PolarsError as exc:
        raise RegimesInputError(f"the runs cannot be read as one trial table: {exc}") from None


def scan(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, verify: bool = True
) -> pl.LazyFrame:
    """Return the trial table of one run or many as a lazy frame, for large fleets.

    Each run's parts are scanned with :func:`polars.scan_parquet`: a query that filters
    to a model or a host, or selects a few columns, reads only those from disk when it
    is collected. The rows and columns are those of :func:`load` given the same runs as
    a list (``run_id`` and the environment columns included).

    Parameters
    ----------
    path : str, os.PathLike, or a list or tuple of them
        Run directories or ``.parquet`` / ``.csv`` trial files, or ``str`` glob patterns.
    verify : bool, default True
        Check every part against its recorded checksum first (each part decoded by
        pyarrow and by polars, one part at a time): a damaged part is refused by name.
        ``False`` reads nothing until the frame is collected; damage then surfaces at
        collection, or not at all where the damaged bytes still decode.

    Returns
    -------
    polars.LazyFrame
        The trials, run after run, each sorted by ``order``.

    Raises
    ------
    RegimesInputError
        A path that is not a run, a pattern that matches nothing, a damaged part (with
        ``verify``), or one run given twice.

    See Also
    --------
    load : the same table, collected.

    Examples
    --------
    >>> import polars as pl
    >>> from pathlib import Path
    >>> runs = scan(str(Path("examples") / "data" / "cuda-h200-gpt2*"))
    >>> runs.filter(pl.col("budget") == 64).select("run_id").unique().collect().height >= 2
    True
    """
    return scan_runs(path, verify=verify)
