"""SIGINT and SIGTERM stop a sweep between parts, never inside one."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Interrupts"]


class Interrupts:
    """Turn SIGINT and SIGTERM into KeyboardInterrupt, but never inside :meth:`deferred`.

    Signal handlers can only be installed from the main thread; elsewhere this does
    nothing and Python's defaults apply.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._deferring = False
        self._pending = False
        self._raised = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._raised:
            return  # a second Ctrl-C must not break the clean stop the first one began
        if self._deferring:
            self._pending = True
        else:
            self._raised = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a signal that arrives inside the block until the block ends."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
            if self._pending:
                self._pending = False
                self._raised = True
                raise KeyboardInterrupt("interrupted")
