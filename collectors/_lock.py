"""One writer per run directory: an exclusive ``flock`` on ``RUN/.lock``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from regimes.errors import RegimesInputError

__all__ = ["RunBusyError", "RunLock"]


class RunBusyError(RegimesInputError):
    """Another process is writing to the same run directory."""


class RunLock:
    """An exclusive ``flock`` on ``RUN/.lock`` so two writers never share a run directory.

    The descriptor is passed to session processes, so the lock lives as long as any of
    them does (a worker orphaned by a killed parent keeps the run busy until it exits).
    """

    def __init__(self, run_dir: Path, wait_s: float):
        self.path = run_dir / ".lock"
        self.wait_s = wait_s
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows has no flock; run unlocked
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        give_up = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    os.close(self.fd)
                    self.fd = None
                    raise RunBusyError(
                        f"another process is writing to {str(self.path.parent)!r}; "
                        "wait for it to finish (or stop it) and rerun"
                    ) from None
                time.sleep(0.2)

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
