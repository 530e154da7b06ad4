"""Sessions in fresh processes (``isolation = "process"``).

Every session runs in a new Python process (:mod:`collectors.worker`), which reports
progress as JSON lines on its stdout. A session process that dies outright (a native
crash, the out-of-memory killer) is charged to the case it was running, as an error
row of type ``WorkerCrash``, and a new process takes over the rest of the session; one
that stops on an error it reports (a ``stopped`` event: an endpoint's server gone) is
charged to no case, and the sweep stops, to be resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from regimes.data.io import RunWriter

from ._events import Event, error_event
from ._progress import Progress
from ._schedule import generations_left
from ._session import EXIT_CODES
from ._state import CASE_FIELDS, RunState, error_row
from .spec import Case, SweepSpec

__all__ = ["crash_error_rows", "run_process_session"]


def _exit_description(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            pass
    return f"status {returncode}"


def crash_error_rows(
    run_id: str, spec: SweepSpec, session: int, last: Event | None, returncode: int
) -> list[dict[str, Any]]:
    """Error rows charging a dead session process to what it was doing (``last``).

    A generation in flight (a ``start`` event) is charged to its case, a model load to
    every case of that model; nothing in flight gives no rows.
    """
    if last is None:
        return []
    message = (
        f"the session process exited with {_exit_description(returncode)} while running this case"
    )
    if last["event"] == "start":
        cases = [Case(**last["case"])]
    else:
        load_key = (last["model"], last["backend"], last["dtype"], last.get("attn_implementation"))
        cases = [c for c in spec.cases() if c.load_key == load_key]
    return [
        error_row(run_id, c, session, None, error_type="WorkerCrash", message=message, trace="")
        for c in cases
    ]


def _set_parent_death_signal() -> None:
    """On Linux, have the kernel SIGKILL this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - best effort only
        pass


def _start_worker(
    run_dir: Path,
    session: int,
    deadline: float | None,
    lock_fd: int | None,
    child_env: Mapping[str, str] | None,
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "collectors.worker",
        str(run_dir),
        "--session",
        str(session),
        "--parent-pid",
        str(os.getpid()),
    ]
    if deadline is not None:
        command += ["--deadline", repr(deadline)]
    # The child must import this very source tree, installed or not.
    env = dict(os.environ if child_env is None else child_env)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        pass_fds=(lock_fd,) if lock_fd is not None else (),
        preexec_fn=_set_parent_death_signal if sys.platform.startswith("linux") else None,
    )


def _stop(child: subprocess.Popen[str]) -> None:
    """Ask a worker to stop as Ctrl-C would; kill it if it does not within 30 s."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _run_worker(
    run_dir: Path,
    session: int,
    deadline: float | None,
    lock_fd: int | None,
    sink: Progress,
    child_env: Mapping[str, str] | None,
) -> tuple[int, Event | None]:
    """Run a session in a fresh process; return its exit status and what was in flight.

    What was in flight is the event that began a model load or a generation the
    process did not finish (``None`` if it was between them).
    """
    child = _start_worker(run_dir, session, deadline, lock_fd, child_env)
    in_flight: Event | None = None
    try:
        assert child.stdout is not None
        for line in child.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = None
            if not isinstance(event, dict) or "event" not in event:
                sink.write(line.rstrip("\n"))
                continue
            if event["event"] in ("start", "load", "stopped"):
                in_flight = event
            elif event["event"] in ("trial", "profiled", "skip"):
                in_flight = None
            sink(event)
        return child.wait(), in_flight
    except BaseException:
        _stop(child)
        raise


def run_process_session(
    pending: dict[int, SweepSpec],
    session: int,
    writer: RunWriter,
    deadline: float | None,
    lock_fd: int | None,
    sink: Progress,
    messages: list[str],
    child_env: Mapping[str, str] | None = None,
) -> str:
    """Run one session in fresh processes until its plan is empty; return a status.

    ``pending`` maps the sessions of this call, in order, to their specs; the
    progress total is recounted over ``session`` and those after it. A process that
    dies mid-case is charged to that case (a ``WorkerCrash`` error row) and a new
    process takes over the rest of the session; every relaunch therefore removes at
    least one case, so this ends. ``child_env`` is the session processes' environment
    (default: this process's).
    """
    spec = pending[session]
    later = list(pending)[list(pending).index(session) :]
    statuses = {code: status for status, code in EXIT_CODES.items() if status != "failed"}
    while True:
        returncode, in_flight = _run_worker(
            writer.path, session, deadline, lock_fd, sink, child_env
        )
        if returncode in statuses:
            return statuses[returncode]
        if in_flight is not None and in_flight["event"] == "stopped":
            messages.append(
                f"session {session} stopped: {in_flight['message']} (every trial written "
                "before it is kept: rerun the same command to resume)"
            )
            return "failed"
        rows = crash_error_rows(writer.run_id, spec, session, in_flight, returncode)
        if not rows:
            messages.append(
                f"session {session}: the session process exited with status {returncode} "
                "outside any case (see its output above)"
            )
            return "failed"
        writer.write_errors(rows)
        for row in rows:
            case = {k: row[k] for k in CASE_FIELDS}
            sink(error_event(session, case, row["error_type"], row["error"]))
        state = RunState.read(writer)
        left = {k: sum(generations_left(pending[k], k, state).values()) for k in later}
        sink.retotal(sink.done + sum(left.values()))
        if not left[session]:
            return "complete"
