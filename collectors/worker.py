"""One sweep session in its own process: ``python -m collectors.worker RUN_DIR --session K``.

Started by :func:`collectors.sweep.run_sweep` for ``isolation = "process"``, so that
every session begins with fresh process state (allocator, kernel caches, MPSGraph's
kernel choices). It reads the spec stored in ``RUN_DIR/meta.json``, runs what is left
of session ``K`` and reports progress as one JSON object per line on its stdout;
anything else written to stdout (by a library, say) is sent to stderr instead, so the
parent can trust every line it reads.

Exit status: 0 the session is done, 3 the ``--deadline`` passed (the trial in flight,
and the first measured trial of a case whose warm-ups had begun, were finished first),
130 interrupted, 2 the run directory is unusable or the session cannot go on (an
endpoint's server gone: a ``stopped`` event says why). The session also stops, as if
interrupted, when its parent process is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from regimes.data.schema import RegimesInputError

__all__ = ["main"]


def _event_stream() -> IO[str]:
    """Open a line-buffered handle on the real stdout; fd 1 then points to stderr."""
    events_fd = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return os.fdopen(events_fd, "w", buffering=1, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the session named on the command line; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m collectors.worker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run_dir")
    parser.add_argument("--session", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=None, help="stop after this Unix time")
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop when this process is no longer our parent",
    )
    args = parser.parse_args(argv)
    events = _event_stream()

    def emit(event: dict[str, Any]) -> None:
        events.write(json.dumps(event) + "\n")

    def should_stop() -> str | None:
        if args.parent_pid is not None and os.getppid() != args.parent_pid:
            return "orphaned"
        if args.deadline is not None and time.time() >= args.deadline:
            return DEADLINE
        return None

    from ._session import DEADLINE, EXIT_CODES
    from .sweep import run_stored_session

    try:
        outcome = run_stored_session(args.run_dir, args.session, emit=emit, should_stop=should_stop)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        emit({"event": "end", "status": "interrupted"})
        return EXIT_CODES["interrupted"]
    except BrokenPipeError:  # the parent stopped reading: it is gone
        return EXIT_CODES["interrupted"]
    except (RegimesInputError, KeyError) as exc:
        # said to the parent too: a server gone mid-session is no crash of the case
        emit({"event": "stopped", "message": str(exc)})
        print(f"collectors.worker: error: {exc}", file=sys.stderr)
        return 2
    if outcome.stopped == "orphaned":
        return EXIT_CODES["interrupted"]
    status = "incomplete" if outcome.stopped else "complete"
    emit({"event": "end", "status": status})
    return EXIT_CODES[status]


if __name__ == "__main__":
    sys.exit(main())
