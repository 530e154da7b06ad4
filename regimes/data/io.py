"""Runs on disk: a directory of parquet parts written atomically and verified on load.

Layout of a run directory::

    RUN/
      meta.json               environment metadata, the spec, the run id, the format
      trials/part-*.parquet   trial rows, one part per flush
      steps/part-*.parquet    per-step times of instrumented trials
      errors/part-*.parquet   cases that raised

Every part is written to a temporary name in the same directory and renamed into
place (``os.replace`` is atomic on POSIX), so a crash leaves either a whole part or
none. A resumed sweep asks :meth:`RunWriter.done_keys` what is already there and
appends new parts; nothing is ever rewritten in place. The environment metadata is
also stored in each part's parquet key-value metadata, so a single part copied
elsewhere still says where it came from.

Integrity. Each part's key-value metadata also holds the results format version
(:data:`FORMAT_VERSION`) and a SHA-256 checksum of its content (every column's name,
kind, nulls and values, with the metadata and the version), recorded at write time.
Loading recomputes it: a part whose bytes changed on disk is refused with its name, or
skipped with a :class:`~regimes.errors.RegimesWarning` when asked
(``on_damaged="skip"``), never read with silently changed values. In a run of format 2
every part must carry its checksum, the run's ``run_id`` and its spec
(:mod:`regimes.data._membership`): a part rewritten by another tool, or another run's
part copied in, is refused by name. Runs written before format 2 carry no checksum and
are read with one warning saying so (:func:`upgrade_run` records checksums). A run or
part written by a newer format than this version reads is refused with a message
saying so. Every row of a run's table holds :data:`REQUIRED_ON_DISK`.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from regimes.data._membership import RunIdentity, regular_parts, require_regular_file
from regimes.data.schema import (
    ERROR_SCHEMA,
    STEP_SCHEMA,
    TRIAL_SCHEMA,
    RegimesInputError,
    RegimesWarning,
    as_polars,
)

__all__ = [
    "FORMAT_VERSION",
    "TRIAL_KEY",
    "Run",
    "RunWriter",
    "load",
    "read_run",
    "save",
    "upgrade_run",
]

FORMAT_VERSION = 2
"""The results format this version writes and the newest it reads. 1: runs written
before the format was recorded; 2: every part carries its version and a checksum."""

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

OnDamaged = Literal["raise", "skip"]

_TABLES = {"trials": TRIAL_SCHEMA, "steps": STEP_SCHEMA, "errors": ERROR_SCHEMA}
_META_KEY = b"regimes.meta"
_SUM_KEY = b"regimes.sha256"
_FORMAT_KEY = b"regimes.format_version"


class _DamagedPart(Exception):
    """A part that cannot be read as written; ``reason`` says how."""

    def __init__(self, path: Path, reason: str):
        super().__init__(reason)
        self.path = path
        self.reason = reason


REQUIRED_ON_DISK: dict[str, tuple[str, ...]] = {
    "trials": (
        "backend",
        "model",
        "use_cache",
        "budget",
        "latency_s",
        "warmup",
        "session",
        "trial",
    ),
    "steps": ("step", "step_s"),
    "errors": ("error_type",),
}
"""Columns every row of a run's table holds: without ``warmup`` the warm-ups would be
analysed as measured trials, without ``session`` and ``trial`` a resume could not tell
what is done. Checked when a part is written and when it is read."""


def _conform(rows: pl.DataFrame | list[dict[str, Any]], table: str) -> pl.DataFrame:
    """Give rows of ``table`` its schema's columns and types; refuse what it cannot hold."""
    schema = _TABLES[table]
    frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, infer_schema_length=None)
    extra = [c for c in frame.columns if c not in schema]
    if extra:
        raise RegimesInputError(f"unknown column(s) for this table: {extra}")
    columns = [_conformed_column(frame, name, dtype) for name, dtype in schema.items()]
    out = pl.DataFrame(columns)
    missing = [c for c in REQUIRED_ON_DISK[table] if out.get_column(c).null_count()]
    if missing and out.height:
        raise RegimesInputError(
            f"the {table} table needs column(s) {missing} in every row (missing or null here)"
        )
    return out


def _conformed_column(frame: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Series:
    """One column of the schema: cast strictly, or all null when the frame lacks it."""
    if name not in frame.columns:
        return pl.Series(name, [None] * frame.height, dtype=dtype)
    try:
        return frame.get_column(name).cast(dtype)
    except pl.exceptions.PolarsError:
        raise RegimesInputError(
            f"column {name!r} holds {frame.schema[name]} values that cannot be read as {dtype}"
        ) from None


def _content_digest(table: pa.Table, meta: bytes, version: int) -> str:
    """SHA-256 of a table's content: names, kinds, nulls and values of every column.

    Independent of how the table is chunked and of the arrow flavour of its strings
    (what a parquet round trip may change), so the digest of a part read back equals the
    one recorded when it was written exactly when its content is the same.
    """
    digest = hashlib.sha256(b"regimes-part\0%d\0" % version)
    digest.update(len(meta).to_bytes(8, "little") + meta)
    for name, column in zip(table.column_names, table.columns, strict=True):
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        kind = (
            "string"
            if pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
            else str(array.type)
        )
        digest.update(f"{name}\0{kind}\0".encode())
        digest.update(np.asarray(array.is_valid().to_numpy(zero_copy_only=False)).tobytes())
        digest.update(_value_bytes(array, kind))
    return digest.hexdigest()


def _value_bytes(array: pa.Array, kind: str) -> bytes:
    if kind == "string":
        # As bytes: damaged text need not be valid UTF-8, and must still hash.
        values = array.cast(pa.large_binary()).fill_null(b"").to_pylist()
        lengths = np.asarray([len(v) for v in values], dtype="<i8")
        return lengths.tobytes() + b"".join(values)
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        values = array.fill_null(0).to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()
    if pa.types.is_boolean(array.type):
        return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), bool).tobytes()
    return json.dumps(array.to_pylist(), default=str).encode()


def _atomic_write_parquet(frame: pl.DataFrame, path: Path, meta: Mapping[str, Any]) -> None:
    table = frame.to_arrow()
    meta_bytes = json.dumps(dict(meta), default=str).encode()
    table = table.replace_schema_metadata(
        {
            **(table.schema.metadata or {}),
            _META_KEY: meta_bytes,
            _FORMAT_KEY: str(FORMAT_VERSION).encode(),
            _SUM_KEY: _content_digest(table, meta_bytes, FORMAT_VERSION).encode(),
        }
    )
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with _cleaned_on_failure(tmp, path):
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)


def _atomic_write_text(text: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with _cleaned_on_failure(tmp, path):
        tmp.write_text(text)
        os.replace(tmp, path)


@contextmanager
def _cleaned_on_failure(tmp: Path, target: Path) -> Iterator[None]:
    """Remove ``tmp`` when writing it fails, and name ``target`` in the error.

    A full disk or a file-size limit fails the write itself, whose error names no file;
    the caller's message must say which file could not be written, and no temporary
    file may be left behind (a rerun could not tell it from a live writer's).
    """
    try:
        yield
    except BaseException as exc:
        with suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from None
        raise


def _newer(where: str, version: int) -> RegimesInputError:
    return RegimesInputError(
        f"{where} was written by a newer version of regimes (results format {version}; this "
        f"version reads formats up to {FORMAT_VERSION}): upgrade regimes to read it"
    )


_META_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "spec": (dict,),
    "environment": (dict, type(None)),
    "resumes": (list,),
    "batches": (list,),
    "fleet": (dict,),
}
"""The ``meta.json`` keys readers rely on, and the JSON kinds each may hold."""


def read_meta(path: Path) -> dict[str, Any]:
    """Read ``meta.json``: a JSON object whose format this version reads.

    Raises
    ------
    RegimesInputError
        Naming the file: not a regular file, unreadable, not UTF-8 JSON (or nested too
        deeply to parse), not an object, a key of the wrong kind, or a newer format.
    """
    require_regular_file(path, "run metadata")
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegimesInputError(f"{str(path)!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise RegimesInputError(f"{str(path)!r} is nested too deeply to be run metadata") from None
    except OSError as exc:
        raise RegimesInputError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    if not isinstance(meta, dict):
        raise RegimesInputError(
            f"{str(path)!r} must hold a JSON object (the run's metadata), found a "
            f"{type(meta).__name__}"
        )
    _check_meta_fields(path, meta)
    version = meta.get("format_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RegimesInputError(
            f"{str(path)!r} has format_version {version!r}; expected a whole number >= 1"
        )
    if version > FORMAT_VERSION:
        raise _newer(f"the run {str(path.parent)!r}", version)
    return meta


def _check_meta_fields(path: Path, meta: dict[str, Any]) -> None:
    """Refuse a ``meta.json`` key of the wrong kind (a list where an object belongs)."""
    for key, kinds in _META_FIELDS.items():
        if key in meta and not isinstance(meta[key], kinds):
            raise RegimesInputError(
                f"{str(path)!r} holds {key!r} as a {type(meta[key]).__name__}, which is not "
                "what regimes writes there: the run's metadata is damaged"
            )
    for key in ("resumes", "batches"):
        if any(not isinstance(item, dict) for item in meta.get(key, [])):
            raise RegimesInputError(
                f"{str(path)!r} holds {key!r} entries that are not objects: the run's "
                "metadata is damaged"
            )


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
        for table in _TABLES:
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
        _atomic_write_text(json.dumps(self.meta, indent=2, default=str), meta_path)

    @property
    def run_id(self) -> str:
        """The run's id, kept across resumes."""
        return str(self.meta["run_id"])

    def _write(self, table: str, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        frame = _conform(rows, table)
        if frame.height == 0:
            return None
        part = self.path / table / f"part-{uuid.uuid4().hex}.parquet"
        _atomic_write_parquet(frame, part, self.meta)
        return part

    def write_trials(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write trial rows as one atomic part; return its path (None for no rows)."""
        return self._write("trials", rows)

    def write_steps(self, rows: pl.DataFrame | list[dict[str, Any]]) -> Path | None:
        """Write per-step rows as one atomic part; return its path (None for no rows)."""
        return self._write("steps", rows)

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
        for table, schema in _TABLES.items():
            parts = _parts(self.path / table)
            if len(parts) < 2:
                continue
            try:
                frames, _, _ = _read_parts(parts, table, "raise", identity)
            except _DamagedPart as exc:
                raise RegimesInputError(
                    f"part {table}/{exc.path.name} of the run {str(self.path)!r} is damaged: "
                    f"{exc.reason}; the run was not compacted"
                ) from None
            merged = _concat(frames, schema)
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

    See Also
    --------
    read_run : reads one.
    """

    trials: pl.DataFrame
    steps: pl.DataFrame
    errors: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def _read_part(path: Path) -> tuple[pl.DataFrame, dict[str, Any], bool]:
    """Read one parquet part, verify its format and checksum.

    Returns the frame, the metadata its writer recorded, and whether it carries a
    checksum (parts of format-1 runs do not).
    """
    try:
        with open(path, "rb") as handle:
            table = pq.ParquetFile(handle).read()
    except (FileNotFoundError, PermissionError):
        raise
    except Exception as exc:  # pyarrow raises several types (OSError too) for a bad file
        raise _DamagedPart(
            path, f"not readable as parquet ({' '.join(str(exc).split())})"
        ) from None
    metadata = table.schema.metadata or {}
    meta = _verified_meta(path, table, metadata)
    try:
        # Full validation refuses text that is not UTF-8, which polars would take and
        # later fail on; only a part without a checksum can get this far with it.
        table.validate(full=True)
        frame = pl.from_arrow(table.replace_schema_metadata(None))
    except Exception as exc:  # a part without checksum can hold anything
        raise _DamagedPart(path, f"its columns cannot be read ({type(exc).__name__})") from None
    assert isinstance(frame, pl.DataFrame)
    return frame, meta, _SUM_KEY in metadata


def _verified_meta(path: Path, table: pa.Table, metadata: dict[bytes, bytes]) -> dict[str, Any]:
    """Check a part's format version and checksum against ``table``; return its meta."""
    try:
        version = int(metadata.get(_FORMAT_KEY, b"1"))
    except ValueError:
        raise _DamagedPart(path, "its recorded format version is unreadable") from None
    if version > FORMAT_VERSION:
        raise _newer(f"part {str(path)!r}", version)
    recorded, meta_bytes = metadata.get(_SUM_KEY), metadata.get(_META_KEY, b"")
    if recorded is not None or version >= 2:
        if recorded is None:
            raise _DamagedPart(path, "its recorded checksum is missing")
        if recorded.decode("ascii", "replace") != _digest_or_none(table, meta_bytes, version):
            raise _DamagedPart(
                path, "its content does not match the checksum recorded when it was written"
            )
    try:
        meta = json.loads(meta_bytes) if meta_bytes else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _DamagedPart(path, "its metadata is not valid JSON") from None
    return meta if isinstance(meta, dict) else {}


def verify_part_as_polars_reads_it(path: Path) -> None:
    """Check one part as :func:`polars.scan_parquet` will read it; raise naming it if not.

    The content polars decodes is checked against the recorded checksum (pyarrow and
    polars do not read every byte of a file alike: damage in a page index, say, may
    pass one and break the other), so a lazy scan of a part that passed reads exactly
    the rows that were written. For :func:`scan`.
    """
    try:
        metadata = pq.read_schema(path).metadata or {}
        frame = pl.read_parquet(path)
        table = frame.to_arrow(compat_level=pl.CompatLevel.oldest())
    except (FileNotFoundError, PermissionError):
        raise
    except Exception as exc:  # pyarrow and polars raise several types for a bad file
        reason = f"not readable as parquet ({' '.join(str(exc).split())})"
        raise RegimesInputError(f"part {str(path)!r} is damaged: {reason}") from None
    try:
        _verified_meta(path, table, metadata)
    except _DamagedPart as exc:
        raise RegimesInputError(f"part {str(path)!r} is damaged: {exc.reason}") from None


def _digest_or_none(table: pa.Table, meta: bytes, version: int) -> str | None:
    """Return the content digest, or None for content too damaged to be read at all."""
    try:
        return _content_digest(table, meta, version)
    except Exception:  # a damaged column can fail to convert in many ways
        return None


def read_verified_part(path: Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Read one part or single parquet file, verified; a damaged one raises naming it.

    For readers that assemble runs themselves (:mod:`regimes.data._runs`).
    """
    try:
        return _read_part(path)[:2]
    except _DamagedPart as exc:
        raise RegimesInputError(f"part {str(path)!r} is damaged: {exc.reason}") from None


def _member_part(path: Path, table: str, identity: RunIdentity) -> tuple[pl.DataFrame, bool]:
    """Read a part of a run directory: verified, of this run, conformed to ``table``.

    Returns the conformed rows and whether the part carries a checksum. A part that
    belongs to another run raises :class:`RegimesInputError` (never skipped: its rows
    are not damaged, they are someone else's); anything else wrong is a damaged part.
    """
    frame, meta, checksummed = _read_part(path)
    if identity.version >= 2 and not checksummed:
        raise _DamagedPart(
            path,
            "it carries no checksum, which every part of a format-2 run has (it was "
            "written by something other than the run's writer, or its metadata was lost)",
        )
    reason = identity.foreign_reason(meta)
    if reason is not None:
        raise RegimesInputError(
            f"part {table}/{path.name} of the run {str(identity.where)!r} belongs to another "
            f"run: {reason}; move it out of the run directory"
        )
    try:
        return _conform(frame, table), checksummed
    except RegimesInputError as exc:  # columns that no writer of this table makes
        raise _DamagedPart(path, str(exc)) from None


def read_run_part(path: Path, table: str, identity: RunIdentity) -> tuple[pl.DataFrame, bool]:
    """Read one part of a run directory as :func:`read_run` does; raise naming it if not.

    For :mod:`regimes.data._runs`, which scans runs part by part.
    """
    try:
        return _member_part(path, table, identity)
    except _DamagedPart as exc:
        raise RegimesInputError(f"part {str(path)!r} is damaged: {exc.reason}") from None


def _read_parts(
    paths: list[Path], table: str, on_damaged: OnDamaged, identity: RunIdentity
) -> tuple[list[pl.DataFrame], list[_DamagedPart], int]:
    """Read every part of one table; damaged ones raise, or are returned apart to skip.

    Returns the frames, the damaged parts, and how many parts carry no checksum.
    """
    frames, damaged, unverified = [], [], 0
    for path in paths:
        try:
            frame, checksummed = _member_part(path, table, identity)
        except _DamagedPart as exc:
            if on_damaged == "raise":
                raise
            damaged.append(exc)
            continue
        frames.append(frame)
        unverified += not checksummed
    return frames, damaged, unverified


def _concat(frames: list[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema=schema)
    # Rows identical in every column (``order`` included, for trials) can only come from
    # a compaction interrupted between writing the merged part and deleting its sources.
    return pl.concat(frames, how="vertical").unique(maintain_order=True)


def _parts(directory: Path) -> list[Path]:
    return regular_parts(directory)


def warn_unverified(where: Path, count: int) -> None:
    """Say once that a format-1 run's ``count`` parts cannot be verified (none: silent)."""
    if count:
        warnings.warn(
            f"the run {str(where)!r} was written before results format 2: its {count} "
            "part(s) carry no checksum, so values changed on disk would go unnoticed "
            "(regimes.data.io.upgrade_run records checksums of what it holds now)",
            RegimesWarning,
            stacklevel=3,
        )


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
        The trials, steps, errors and metadata.

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
    trial_parts = _parts(p / "trials")
    if not meta_path.exists() and not trial_parts:
        raise RegimesInputError(
            f"{str(p)!r} is not a run directory (no meta.json and no trials/*.parquet)"
        )
    meta = read_meta(meta_path) if meta_path.exists() else {}
    tables, unverified = _read_tables(p, RunIdentity.of(p, meta), on_damaged)
    warn_unverified(p, unverified)
    return Run(tables["trials"], tables["steps"], tables["errors"], meta, p)


def _read_tables(
    p: Path, identity: RunIdentity, on_damaged: OnDamaged
) -> tuple[dict[str, pl.DataFrame], int]:
    """Read every table of a run directory; return them and the unverified part count."""
    tables: dict[str, pl.DataFrame] = {}
    unverified = 0
    for table, schema in _TABLES.items():
        try:
            frames, damaged, count = _read_parts(_parts(p / table), table, on_damaged, identity)
        except _DamagedPart as exc:
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
        tables[table] = _concat(frames, schema)
        unverified += count
    return tables, unverified


def _read_file(path: Path) -> Run:
    """Read a single ``.parquet`` or ``.csv`` trial table."""
    if path.suffix == ".parquet":
        try:
            frame, meta, _ = _read_part(path)
        except _DamagedPart as exc:
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


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    on_damaged: OnDamaged = "raise",
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

    Returns
    -------
    polars.DataFrame
        One row per trial (warm-ups included, flagged ``warmup``).

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
    from regimes.data._runs import is_several, load_runs

    if is_several(path) or not isinstance(path, (str, os.PathLike)):
        return load_runs(path)
    trials = read_run(path, on_damaged=on_damaged).trials
    if "order" in trials.columns and trials.height:
        trials = trials.sort("order", nulls_last=True)
    return trials


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
    from regimes.data._runs import scan_runs

    return scan_runs(path, verify=verify)


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
    for table in _TABLES:
        for part in _parts(run_dir / table):
            try:
                frame, part_meta, _ = _read_part(part)
            except _DamagedPart as exc:
                raise RegimesInputError(f"part {str(part)!r} is damaged: {exc.reason}") from None
            reason = identity.foreign_reason(part_meta)
            if reason is not None:
                raise RegimesInputError(f"part {str(part)!r} belongs to another run: {reason}")
            # A part older than the recorded metadata is this run's: say so in it.
            owner: dict[str, Any] = {
                k: meta[k] for k in ("run_id", "spec") if k in meta and k not in part_meta
            }
            _atomic_write_parquet(frame, part, {**part_meta, **owner})
            rewritten += 1
    meta.update(format_version=FORMAT_VERSION, upgraded_from_format=1)
    _atomic_write_text(json.dumps(meta, indent=2, default=str), meta_path)
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
    >>> read_run(path).meta, load(path).height
    ({'source': 'synthetic'}, 20)
    """
    frame = as_polars(df)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_parquet(frame, target, meta or {})
    return target
