"""Runs on disk: a directory of parquet parts written atomically.

Layout of a run directory::

    RUN/
      meta.json               environment metadata, the spec, the run id
      trials/part-*.parquet   trial rows, one part per flush
      steps/part-*.parquet    per-step times of instrumented trials
      errors/part-*.parquet   cases that raised

Every part is written to a temporary name in the same directory and renamed into
place (``os.replace`` is atomic on POSIX), so a crash leaves either a whole part or
none. A resumed sweep asks :meth:`RunWriter.done_keys` what is already there and
appends new parts; nothing is ever rewritten in place. The environment metadata is
also stored in each part's parquet key-value metadata, so a single part copied
elsewhere still says where it came from.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from regimes.data.schema import (
    ERROR_SCHEMA,
    STEP_SCHEMA,
    TRIAL_SCHEMA,
    RegimesInputError,
    as_polars,
)

__all__ = ["Run", "RunWriter", "TRIAL_KEY", "load", "read_run"]

TRIAL_KEY: tuple[str, ...] = (
    "model",
    "backend",
    "dtype",
    "use_cache",
    "prompt_tokens",
    "budget",
    "session",
    "trial",
    "warmup",
)
"""Columns that identify one trial within a run: a resumed sweep never repeats one."""

_TABLES = {"trials": TRIAL_SCHEMA, "steps": STEP_SCHEMA, "errors": ERROR_SCHEMA}
_META_KEY = b"regimes.meta"


def _conform(
    rows: pl.DataFrame | list[dict[str, Any]], schema: dict[str, pl.DataType]
) -> pl.DataFrame:
    frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, infer_schema_length=None)
    extra = [c for c in frame.columns if c not in schema]
    if extra:
        raise RegimesInputError(f"unknown column(s) for this table: {extra}")
    return frame.select(
        [
            (
                pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype=dtype)
            ).alias(name)
            for name, dtype in schema.items()
        ]
    )


def _atomic_write_parquet(frame: pl.DataFrame, path: Path, meta: dict[str, Any] | None) -> None:
    table = frame.to_arrow()
    if meta is not None:
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), _META_KEY: json.dumps(meta, default=str).encode()}
        )
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as handle:
        pq.write_table(table, handle, compression="zstd")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _atomic_write_text(text: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunWriter:
    """Appends atomically written parts to a run directory.

    ``meta`` is written to ``meta.json`` when the directory is new; an existing run
    keeps its metadata (and its ``run_id``), and a resumed sweep records its own
    environment under ``meta["resumes"]``. ``meta=None`` opens an existing run as it
    is, without touching ``meta.json`` (a worker process appending to its parent's run).
    """

    def __init__(self, path: str | os.PathLike[str], meta: dict[str, Any] | None):
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if meta is None:
            if not meta_path.exists():
                raise RegimesInputError(f"{str(self.path)!r} is not a run directory (no meta.json)")
            self.meta = json.loads(meta_path.read_text())
            return
        self.path.mkdir(parents=True, exist_ok=True)
        for table in _TABLES:
            (self.path / table).mkdir(exist_ok=True)
        if meta_path.exists():
            existing = json.loads(meta_path.read_text())
            existing.setdefault("resumes", []).append(meta)
            self.meta = existing
        else:
            self.meta = dict(meta)
            self.meta.setdefault("run_id", uuid.uuid4().hex[:12])
        _atomic_write_text(json.dumps(self.meta, indent=2, default=str), meta_path)

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])

    def _write(self, table: str, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        frame = _conform(rows, _TABLES[table])
        if frame.height == 0:
            return None
        part = self.path / table / f"part-{uuid.uuid4().hex}.parquet"
        _atomic_write_parquet(frame, part, self.meta)
        return part

    def write_trials(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write trial rows as one atomic part."""
        return self._write("trials", rows)

    def write_steps(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write per-step rows as one atomic part."""
        return self._write("steps", rows)

    def write_errors(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write error rows as one atomic part."""
        return self._write("errors", rows)

    def existing(self) -> Run:
        """What the directory holds now."""
        return read_run(self.path)

    def done_keys(self) -> set[tuple[Any, ...]]:
        """Keys (:data:`TRIAL_KEY`) of measured, non-warm-up trials already on disk."""
        trials = self.existing().trials.filter(~pl.col("warmup"))
        return set(trials.select(TRIAL_KEY).iter_rows())

    def compact(self) -> None:
        """Merge each table's parts into a single part, so a finished run is a few files.

        The merged part is written atomically first and the old parts deleted after, so
        a crash in between leaves every row twice, never zero times; :func:`read_run`
        drops such exact duplicate rows.
        """
        for table, schema in _TABLES.items():
            parts = _parts(self.path / table)
            if len(parts) < 2:
                continue
            merged = _read_table(parts, schema)
            if "order" in merged.columns:
                merged = merged.sort("order", nulls_last=True, maintain_order=True)
            self._write(table, merged)
            for part in parts:
                part.unlink()

    def next_order(self) -> int:
        """The next global execution order index (continues after a resume)."""
        trials = self.existing().trials
        if trials.height == 0:
            return 0
        return int(trials["order"].max()) + 1  # type: ignore[arg-type]


@dataclass(frozen=True)
class Run:
    """A run read from disk: the trial table, step times, errors and metadata."""

    trials: pl.DataFrame
    steps: pl.DataFrame
    errors: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def _read_table(paths: list[Path], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    if not paths:
        return pl.DataFrame(schema=schema)
    frames = [_conform(pl.read_parquet(p), schema) for p in paths]
    # Rows identical in every column (``order`` included, for trials) can only come from
    # a compaction interrupted between writing the merged part and deleting its sources.
    return pl.concat(frames, how="vertical").unique(maintain_order=True)


def _parts(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith("."))


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a run directory (or a single parquet/CSV trial file) from disk.

    Raises :class:`RegimesInputError` with one clear line for a missing path or a
    directory that is not a run. Rows repeated exactly (every column equal, which
    for trials includes the unique execution ``order``) are read once: they are the
    trace of an interrupted :meth:`RunWriter.compact`, never two measurements.
    """
    p = Path(path)
    if not p.exists():
        raise RegimesInputError(f"no run at {str(p)!r}: the path does not exist")
    if p.is_file():
        if p.suffix == ".parquet":
            try:
                frame = pl.read_parquet(p)
                raw_meta = pq.read_schema(p).metadata or {}
            except Exception as exc:  # pyarrow raises several types for bad files
                raise RegimesInputError(
                    f"{str(p)!r} is not a readable parquet file: {exc}"
                ) from None
            meta = json.loads(raw_meta[_META_KEY]) if _META_KEY in raw_meta else {}
        elif p.suffix == ".csv":
            frame = pl.read_csv(p, try_parse_dates=False)
            meta = {}
        else:
            raise RegimesInputError(f"{str(p)!r}: expected a run directory, .parquet or .csv file")
        return Run(
            frame, pl.DataFrame(schema=STEP_SCHEMA), pl.DataFrame(schema=ERROR_SCHEMA), meta, p
        )
    meta_path = p / "meta.json"
    trial_parts = _parts(p / "trials")
    if not meta_path.exists() and not trial_parts:
        raise RegimesInputError(
            f"{str(p)!r} is not a run directory (no meta.json and no trials/*.parquet)"
        )
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except json.JSONDecodeError as exc:
        raise RegimesInputError(f"{str(meta_path)!r} is not valid JSON: {exc}") from None
    try:
        trials = _read_table(trial_parts, TRIAL_SCHEMA)
        steps = _read_table(_parts(p / "steps"), STEP_SCHEMA)
        errors = _read_table(_parts(p / "errors"), ERROR_SCHEMA)
    except RegimesInputError:
        raise
    except Exception as exc:  # a truncated part from outside the writer
        raise RegimesInputError(f"{str(p)!r} holds an unreadable part: {exc}") from None
    return Run(trials, steps, errors, meta, p)


def load(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> pl.DataFrame:
    """Return the trial table of a run directory or file (polars, sorted by ``order``).

    Parameters
    ----------
    path : str, os.PathLike, or a list or tuple of them
        A run directory, or a ``.parquet`` / ``.csv`` trial file. Several runs, a list
        of paths or a ``str`` glob pattern (``"runs/h200-*"``), are read lazily with
        :func:`polars.scan_parquet` and concatenated run after run, each with its
        ``run_id`` and the environment columns ``torch_version``,
        ``transformers_version``, ``os_version``, ``python_version`` and ``host`` from
        its ``meta.json`` (``device`` filled from it where the trials lack one).

    Returns
    -------
    polars.DataFrame
        The trial table (:data:`regimes.TRIAL_SCHEMA` for a run directory).

    Raises
    ------
    RegimesInputError
        A path that does not exist or is not a run, a pattern that matches nothing, an
        unreadable part, or one run given twice.

    See Also
    --------
    regimes.read_run : the trials with the steps, errors and metadata of one run.
    regimes.compare_runs : two runs compared.

    Examples
    --------
    >>> import regimes
    >>> runs = regimes.load("examples/data/cuda-h200-*")
    >>> runs.select("run_id", "torch_version").unique().height >= 2
    True
    """
    from regimes.data._runs import is_several, load_runs

    if is_several(path) or not isinstance(path, (str, os.PathLike)):
        return load_runs(path)
    trials = read_run(path).trials
    if "order" in trials.columns and trials.height:
        trials = trials.sort("order", nulls_last=True)
    return trials


def save(df: Any, path: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> Path:
    """Write a trial table (polars or pandas) to a single parquet file, atomically."""
    frame = as_polars(df)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_parquet(frame, target, meta or {})
    return target
