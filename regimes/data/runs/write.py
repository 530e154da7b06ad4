"""Writing a run: parts appended atomically, a single trial file, a format-1 run upgraded.

A resumed sweep asks :meth:`RunWriter.done_keys` what is already there and appends new
parts; nothing is ever rewritten in place, except by :meth:`RunWriter.compact` (the
merged part first, the old ones deleted after) and :func:`upgrade_run`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data._membership import RunIdentity, regular_parts
from regimes.data.runs.parts import (
    FORMAT_VERSION,
    TABLES,
    DamagedPart,
    conform,
    read_meta,
    read_part,
    write_parquet_atomically,
    write_text_atomically,
)
from regimes.data.runs.read import Run, concat_parts, read_parts, read_run
from regimes.data.schema import (
    RegimesInputError,
    as_polars,
)

__all__ = ["TRIAL_KEY", "RunWriter", "save", "upgrade_run"]

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


_CREATED = ("trials", "steps", "errors")
"""The folders every run has; ``ops`` is made by its first part (profiled runs only)."""


class RunWriter:
    """Append atomically written, checksummed parts to a run directory.

    Parameters
    ----------
    path : str or os.PathLike
        The run directory; created with its ``trials``, ``steps`` and ``errors``
        folders when missing.
    meta : dict or None
        The environment metadata. Written to ``meta.json`` (with ``run_id`` and
        ``format_version``) when the directory is new; an existing run keeps its
        metadata and ``run_id``, and records ``meta`` under ``meta["resumes"]``. None
        opens an existing run as it is, without touching ``meta.json`` (a worker process
        appending to its parent's run).

    Raises
    ------
    RegimesInputError
        When ``meta`` is None and the directory holds no ``meta.json``, when
        ``meta.json`` is unreadable, or when the run was written by a newer format.

    See Also
    --------
    read_run : what the directory holds.

    Examples
    --------
    >>> import tempfile, regimes
    >>> trials = regimes.simulate_sweep(1, n_budgets=4, seed=0).trials.drop("source")
    >>> writer = RunWriter(tempfile.mkdtemp() + "/run", {"source": "synthetic"})
    >>> part = writer.write_trials(trials)
    >>> writer.existing().trials.height, writer.next_order()
    (20, 20)
    """

    def __init__(self, path: str | os.PathLike[str], meta: dict[str, Any] | None):
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if meta is None:
            if not meta_path.exists():
                raise RegimesInputError(f"{str(self.path)!r} is not a run directory (no meta.json)")
            self.meta = read_meta(meta_path)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        for table in _CREATED:
            (self.path / table).mkdir(exist_ok=True)
        if meta_path.exists():
            # A resumed run keeps its format: parts of a format-1 run carry no
            # checksum, and a format-2 run must have one in every part.
            existing = read_meta(meta_path)
            existing.setdefault("resumes", []).append(meta)
            existing.setdefault("format_version", 1)
            self.meta = existing
        else:
            self.meta = dict(meta)
            self.meta.setdefault("run_id", uuid.uuid4().hex[:12])
            self.meta["format_version"] = FORMAT_VERSION
        write_text_atomically(json.dumps(self.meta, indent=2, default=str), meta_path)

    @property
    def run_id(self) -> str:
        """The run's id, kept across resumes."""
        return str(self.meta["run_id"])

    def _write(self, table: str, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        frame = conform(rows, table)
        if frame.height == 0:
            return None
        (self.path / table).mkdir(exist_ok=True)
        part = self.path / table / f"part-{uuid.uuid4().hex}.parquet"
        write_parquet_atomically(frame, part, self.meta)
        return part

    def write_trials(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write trial rows as one atomic part; return its path (None for no rows)."""
        return self._write("trials", rows)

    def write_steps(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write per-step rows as one atomic part; return its path (None for no rows)."""
        return self._write("steps", rows)

    def write_ops(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write one profiled generation's operator rows as one atomic part (None: no rows)."""
        return self._write("ops", rows)

    def write_errors(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write error rows as one atomic part; return its path (None for no rows)."""
        return self._write("errors", rows)

    def existing(self) -> Run:
        """Read what the directory holds now (every part verified)."""
        return read_run(self.path)

    def done_keys(self) -> set[tuple[Any, ...]]:
        """Return the keys (:data:`TRIAL_KEY`) of measured trials already on disk."""
        trials = self.existing().trials.filter(~pl.col("warmup"))
        return set(trials.select(TRIAL_KEY).iter_rows())

    def compact(self) -> None:
        """Merge each table's parts into a single part, so a finished run is a few files.

        The merged part is written atomically first and the old parts deleted after, so
        a crash in between leaves every row twice, never zero times; :func:`read_run`
        drops such exact duplicate rows. A damaged part stops the compaction before
        anything is written.
        """
        identity = RunIdentity.of(self.path, read_meta(self.path / "meta.json"))
        for table, schema in TABLES.items():
            parts = regular_parts(self.path / table)
            if len(parts) < 2:
                continue
            try:
                frames, _, _ = read_parts(parts, table, "raise", identity)
            except DamagedPart as exc:
                raise RegimesInputError(
                    f"part {table}/{exc.path.name} of the run {str(self.path)!r} is damaged: "
                    f"{exc.reason}; the run was not compacted"
                ) from None
            merged = concat_parts(frames, schema)
            if "order" in merged.columns:
                merged = merged.sort("order", nulls_last=True, maintain_order=True)
            self._write(table, merged)
            for part in parts:
                part.unlink()

    def next_order(self) -> int:
        """Return the next global execution order index (continues after a resume)."""
        trials = self.existing().trials
        if trials.height == 0:
            return 0
        return int(trials["order"].max()) + 1  # type: ignore[arg-type]


def upgrade_run(path: str | os.PathLike[str]) -> int:
    """Record a checksum in every part of a format-1 run, making it a format-2 run.

    A format-1 run (written before checksums) is read with a warning that its parts
    cannot be verified. Upgrading rewrites each part, atomically and with the same rows
    and metadata, with the checksum of what it holds *now*: from then on any change is
    refused, but a change made before the upgrade cannot be detected. A part that
    records no ``run_id`` or spec (older than that metadata) is given the run's.
    ``meta.json`` records ``format_version: 2`` and ``upgraded_from_format: 1``.

    Parameters
    ----------
    path : str or os.PathLike
        The run directory.

    Returns
    -------
    int
        The number of parts rewritten (0 for a run already at format 2).

    Raises
    ------
    RegimesInputError
        As :func:`read_run` for a run that cannot be read.
    """
    run_dir = Path(path)
    meta_path = run_dir / "meta.json"
    meta = read_meta(meta_path)
    if meta.get("format_version", 1) >= 2:
        return 0
    identity = RunIdentity.of(run_dir, meta)
    rewritten = 0
    for table in TABLES:
        for part in regular_parts(run_dir / table):
            try:
                frame, part_meta, _ = read_part(part)
            except DamagedPart as exc:
                raise RegimesInputError(f"part {str(part)!r} is damaged: {exc.reason}") from None
            reason = identity.foreign_reason(part_meta)
            if reason is not None:
                raise RegimesInputError(f"part {str(part)!r} belongs to another run: {reason}")
            # A part older than the recorded metadata is this run's: say so in it.
            owner: dict[str, Any] = {
                k: meta[k] for k in ("run_id", "spec") if k in meta and k not in part_meta
            }
            write_parquet_atomically(frame, part, {**part_meta, **owner})
            rewritten += 1
    meta.update(format_version=FORMAT_VERSION, upgraded_from_format=1)
    write_text_atomically(json.dumps(meta, indent=2, default=str), meta_path)
    return rewritten


def save(df: Any, path: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> Path:
    """Write a trial table to a single parquet file, atomically and checksummed.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table.
    path : str or os.PathLike
        The file to write (its folder is created).
    meta : dict, optional
        Metadata stored in the file (provenance: where the data came from).

    Returns
    -------
    pathlib.Path
        The file written; :func:`load` and :func:`read_run` read it back.

    Raises
    ------
    RegimesInputError
        When ``df`` is not a polars or pandas frame.

    See Also
    --------
    RunWriter : a run directory, appended to part by part.

    Examples
    --------
    >>> import tempfile, regimes
    >>> trials = regimes.simulate_sweep(1, n_budgets=4, seed=0).trials
    >>> path = save(trials, tempfile.mkdtemp() + "/t.parquet", {"source": "synthetic"})
    >>> regimes.read_run(path).meta, regimes.load(path).height
    ({'source': 'synthetic'}, 20)
    """
    frame = as_polars(df)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomically(frame, target, meta or {})
    return target
