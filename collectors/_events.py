"""Progress events: the plain dicts a session reports, in process or as JSON lines.

A session emits ``load`` (a model is being loaded), ``start`` (a generation begins),
``trial`` (it ended and is on disk), ``error`` (a case failed), ``skip`` (how many
generations of the plan will not run after a failure) and, from a worker process,
``end``. A ``start`` or ``load`` not followed by ``trial`` or ``skip`` is what a
session process was doing when it died.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Event", "EventSink", "error_event", "ignore"]

Event = dict[str, Any]
EventSink = Callable[[Event], None]


def error_event(session: int, case: dict[str, Any], error_type: str, error: str) -> Event:
    """Build the event that reports a failed case (the first line of its message)."""
    return {
        "event": "error",
        "session": session,
        "case": case,
        "error_type": error_type,
        "error": error.splitlines()[0] if error else "",
    }


def ignore(event: Event) -> None:
    """Drop ``event`` (the sink of a session nobody watches)."""
