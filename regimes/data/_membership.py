"""Which files may be read as a run's parts, and which parts belong to the run.

A run directory is only ever appended to by its own writer, so everything in it can be
checked against ``meta.json``:

* a part is a regular file (a FIFO named like one would block a reader forever, a
  device would stream without end), and each table's folder is a directory;
* in a run of format 2 or later every part carries the checksum its writer recorded: a
  part without one was written by something else (a plain ``write_parquet``) and
  cannot be told apart from a part with changed values;
* a part records the ``run_id`` and the spec of the run that wrote it (the writer
  stores the run's metadata in each part): a part of another run, copied or linked
  into ``trials/``, would mix two runs into one curve, so it is refused by name;
* a run of format 1 has no checksums at all: it is read with one warning saying that
  its parts cannot be verified.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regimes.errors import RegimesInputError

__all__ = ["RunIdentity", "regular_parts"]


def _kind(mode: int) -> str:
    """Name the kind of a file that is not regular (for the error message)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def require_regular_file(path: Path, what: str) -> None:
    """Refuse ``path`` (``what`` names it) unless it is a regular file, or a link to one.

    Checked with ``stat``, which never blocks, before anything opens the file: opening a
    FIFO for reading waits for a writer that may never come.
    """
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise RegimesInputError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise RegimesInputError(
            f"{what} {str(path)!r} is {_kind(mode)}, not a regular file: remove it or "
            "replace it with the file it stands for"
        )


def regular_parts(directory: Path) -> list[Path]:
    """Return the parquet parts of one table's folder, each checked to be a regular file.

    A missing folder holds no parts; a folder that is a file (``trials`` written over) is
    refused, not read as an empty table.
    """
    if not directory.exists():
        return []
    if not directory.is_dir():
        raise RegimesInputError(
            f"{str(directory)!r} is not a directory: a run keeps its {directory.name} parts "
            "in a folder of that name"
        )
    parts = sorted(p for p in directory.glob("*.parquet") if not p.name.startswith("."))
    for part in parts:
        require_regular_file(part, "part")
    return parts


@dataclass(frozen=True)
class RunIdentity:
    """What every part of one run records: its format, ``run_id`` and spec.

    Attributes
    ----------
    where : pathlib.Path
        The run directory (for messages).
    version : int
        ``meta.json``'s results format (1 for a run without ``meta.json``).
    run_id : str or None
        ``meta.json``'s run id.
    spec : object
        ``meta.json``'s spec (None when it has none).
    """

    where: Path
    version: int
    run_id: str | None
    spec: Any

    @classmethod
    def of(cls, where: Path, meta: dict[str, Any]) -> RunIdentity:
        """Read the identity from a run's ``meta.json`` (already checked by ``read_meta``)."""
        run_id = meta.get("run_id")
        return cls(where, int(meta.get("format_version", 1)), _text(run_id), meta.get("spec"))

    def foreign_reason(self, part_meta: dict[str, Any]) -> str | None:
        """Say why a part's recorded metadata marks it as another run's (None: it is ours).

        A part of a format-1 run may predate the metadata; from format 2 on, every part
        records the run id, so a part without one is not this run's writer's.
        """
        recorded = _text(part_meta.get("run_id"))
        if self.run_id is not None and recorded != self.run_id:
            if recorded is None and self.version < 2:
                return None
            found = "no run_id" if recorded is None else f"run_id {recorded!r}"
            return f"it records {found}, and this run's is {self.run_id!r}"
        if self.spec is not None and "spec" in part_meta and part_meta["spec"] != self.spec:
            return "it records another sweep spec than this run's meta.json"
        if self.spec is not None and "spec" not in part_meta and self.version >= 2:
            return "it records no sweep spec, and this run has one"
        return None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
