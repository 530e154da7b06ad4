"""One part of a run on disk: its format, its checksum, written atomically, read verified.

Every part is written to a temporary name in the same directory and renamed into
place (``os.replace`` is atomic on POSIX), so a crash leaves either a whole part or
none. The environment metadata is also stored in each part's parquet key-value
metadata, so a single part copied elsewhere still says where it came from.

Integrity. Each part's key-value metadata also holds the results format version
(:data:`FORMAT_VERSION`) and a SHA-256 checksum of its content (every column's name,
kind, nulls and values, with the metadata and the version), recorded at write time.
Reading recomputes it: a part whose bytes changed on disk raises :class:`DamagedPart`,
never reads with silently changed values. In a run of format 2 every part must carry
its checksum, the run's ``run_id`` and its spec (:mod:`regimes.data._membership`): a
part rewritten by another tool, or another run's part copied in, is refused by name.
A part written by a newer format than this version reads is refused with a message
saying so. Every row of a run's table holds :data:`REQUIRED_ON_DISK`.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from regimes.data._membership import RunIdentity, require_regular_file
from regimes.data.schema import (
    ERROR_SCHEMA,
    OPS_SCHEMA,
    STEP_SCHEMA,
    TRIAL_SCHEMA,
    RegimesInputError,
    RegimesWarning,
)

__all__ = ["FORMAT_VERSION", "REQUIRED_ON_DISK", "DamagedPart", "read_meta", "read_run_part"]

FORMAT_VERSION = 2
"""The results format this version writes and the newest it reads. 1: runs written
before the format was recorded; 2: every part carries its version and a checksum."""


OnDamaged = Literal["raise", "skip"]


TABLES = {"trials": TRIAL_SCHEMA, "steps": STEP_SCHEMA, "errors": ERROR_SCHEMA, "ops": OPS_SCHEMA}


_META_KEY = b"regimes.meta"


_SUM_KEY = b"regimes.sha256"


_FORMAT_KEY = b"regimes.format_version"


class DamagedPart(Exception):
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
    "ops": ("budget", "session", "trial", "operator", "self_host_s", "calls"),
}
"""Columns every row of a run's table holds: without ``warmup`` the warm-ups would be
analysed as measured trials, without ``session`` and ``trial`` a resume could not tell
what is done. Checked when a part is written and when it is read."""


def conform(rows: pl.DataFrame | list[dict[str, Any]], table: str) -> pl.DataFrame:
    """Give rows of ``table`` its schema's columns and types; refuse what it cannot hold."""
    schema = TABLES[table]
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


def write_parquet_atomically(frame: pl.DataFrame, path: Path, meta: Mapping[str, Any]) -> None:
    """Write ``frame`` to ``path`` as one part: ``meta``, the format and the checksum in it."""
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


def write_text_atomically(text: str, path: Path) -> None:
    """Replace ``path`` by ``text`` in one rename (``meta.json``: never half written)."""
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


def read_part(path: Path) -> tuple[pl.DataFrame, dict[str, Any], bool]:
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
        raise DamagedPart(path, f"not readable as parquet ({' '.join(str(exc).split())})") from None
    metadata = table.schema.metadata or {}
    meta = _verified_meta(path, table, metadata)
    try:
        # Full validation refuses text that is not UTF-8, which polars would take and
        # later fail on; only a part without a checksum can get this far with it.
        table.validate(full=True)
        frame = pl.from_arrow(table.replace_schema_metadata(None))
    except Exception as exc:  # a part without checksum can hold anything
        raise DamagedPart(path, f"its columns cannot be read ({type(exc).__name__})") from None
    assert isinstance(frame, pl.DataFrame)
    return frame, meta, _SUM_KEY in metadata


def _verified_meta(path: Path, table: pa.Table, metadata: dict[bytes, bytes]) -> dict[str, Any]:
    """Check a part's format version and checksum against ``table``; return its meta."""
    try:
        version = int(metadata.get(_FORMAT_KEY, b"1"))
    except ValueError:
        raise DamagedPart(path, "its recorded format version is unreadable") from None
    if version > FORMAT_VERSION:
        raise _newer(f"part {str(path)!r}", version)
    recorded, meta_bytes = metadata.get(_SUM_KEY), metadata.get(_META_KEY, b"")
    if recorded is not None or version >= 2:
        if recorded is None:
            raise DamagedPart(path, "its recorded checksum is missing")
        if recorded.decode("ascii", "replace") != _digest_or_none(table, meta_bytes, version):
            raise DamagedPart(
                path, "its content does not match the checksum recorded when it was written"
            )
    try:
        meta = json.loads(meta_bytes) if meta_bytes else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise DamagedPart(path, "its metadata is not valid JSON") from None
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
    except DamagedPart as exc:
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
        return read_part(path)[:2]
    except DamagedPart as exc:
        raise RegimesInputError(f"part {str(path)!r} is damaged: {exc.reason}") from None


def member_part(path: Path, table: str, identity: RunIdentity) -> tuple[pl.DataFrame, bool]:
    """Read a part of a run directory: verified, of this run, conformed to ``table``.

    Returns the conformed rows and whether the part carries a checksum. A part that
    belongs to another run raises :class:`RegimesInputError` (never skipped: its rows
    are not damaged, they are someone else's); anything else wrong is a damaged part.
    """
    frame, meta, checksummed = read_part(path)
    if identity.version >= 2 and not checksummed:
        raise DamagedPart(
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
        return conform(frame, table), checksummed
    except RegimesInputError as exc:  # columns that no writer of this table makes
        raise DamagedPart(path, str(exc)) from None


def read_run_part(path: Path, table: str, identity: RunIdentity) -> tuple[pl.DataFrame, bool]:
    """Read one part of a run directory as :func:`read_run` does; raise naming it if not.

    For :mod:`regimes.data._runs`, which scans runs part by part.
    """
    try:
        return member_part(path, table, identity)
    except DamagedPart as exc:
        raise RegimesInputError(f"part {str(path)!r} is damaged: {exc.reason}") from None


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
