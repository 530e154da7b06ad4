"""Fleet sweeps: one spec, many machines (Macs, CUDA boxes, CPU servers), one run.

``regimes collect SPEC -o RUN --cluster tcp://HOST:PORT`` runs a sweep on the workers of
a Dask scheduler (:func:`run_fleet_sweep`). Workers are started the ordinary way,
``dask worker tcp://HOST:PORT``, on machines with ``regimes[collect,fleet]`` installed;
each is probed for its host name, the backends it can time and their devices, and its
environment, which ``meta.json`` keeps under ``meta["fleet"]["hosts"][host]``.

Units of work. A unit is one session of one backend and runs wholly on one host, in a
fresh process as ``isolation = "process"`` runs it; a host runs one unit at a time,
however many workers or threads it has. The spec key ``fleet_sessions`` chooses how
sessions spread: ``"shared"`` (default) runs each session once, on any host that has
its backend; ``"every-host"`` runs every session on every such host, host number ``r``
of the run's host order (``meta["fleet"]["host_order"]``, which only ever grows) taking
session numbers ``r * sessions`` to ``r * sessions + sessions - 1`` so that trial keys
stay unique; the ``host`` column says which host ran which trial either way.

Streaming and crash safety. Every part a unit writes on its worker (trials, steps,
errors, and the ``ops`` of profiled generations) is sent back at once and written into
RUN by the client, atomically as always, a part sent twice written once; a worker that dies
loses at most the generation in flight, and its unit continues, from what RUN holds, on
the same host once it is back or on another eligible host (the trials' ``host`` and
``process_id`` show the continuation). Rerunning the command resumes as a local sweep
does, with no trial lost or repeated.

Environment variables read on a worker: ``REGIMES_HOST`` names the host (in probes and
in every trial's ``host``), ``REGIMES_BACKENDS`` (comma list) restricts the backends
it offers.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import RunWriter, read_run

from ._fleet.address import check_scheduler
from ._fleet.client import FleetRun
from ._fleet.hosts import (
    FleetError,
    Host,
    SchedulerLost,
    Unit,
    group_hosts,
    make_units,
    record_hosts,
    unit_spec,
    validate_fleet,
)
from ._fleet.remote import probe_workers
from ._lock import RunLock
from ._profile_auto import needs_choice, record_choice, resolved
from ._schedule import measured_left_per_case
from ._state import RunState, check_run_dir, remove_stale_temp_files
from .spec import SweepSpec
from .sweep import SweepResult, _finish

__all__ = ["FleetError", "Host", "SchedulerLost", "probe_fleet", "run_fleet_sweep"]


@contextmanager
def _quiet_dask_logs() -> Iterator[None]:
    """Silence ``distributed``'s loggers for the duration of a fleet run.

    A lost scheduler makes the client log every failed reconnection with a traceback
    (dozens of lines) before the call fails; the sweep says what happened in one
    line instead (:class:`SchedulerLost`), and the loggers stay quiet after it. Dask
    sets levels on some child loggers, so each existing one is raised, not only the
    parent.
    """
    import distributed  # noqa: F401  - importing it configures its loggers: first

    names = ["distributed"] + [
        name for name in logging.root.manager.loggerDict if name.startswith("distributed.")
    ]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    except SchedulerLost:
        # left quiet: the client's reconnection task, cancelled by close(), logs its
        # traceback from the event loop's thread after this call has returned
        raise
    except BaseException:
        _set_levels(loggers, levels)
        raise
    _set_levels(loggers, levels)


def _set_levels(loggers: list[logging.Logger], levels: list[int]) -> None:
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def _scheduler_lost(exc: BaseException, client: Any = None) -> bool:
    """Tell whether ``exc`` means the connection to the scheduler is gone.

    A closed comm always does; a timeout, a cancelled future or an OS error without an
    ``errno`` (a full disk has one, and is reported as such) does once the client is no
    longer running.
    """
    from concurrent.futures import CancelledError

    from distributed.comm.core import CommClosedError

    if isinstance(exc, CommClosedError):
        return True
    # a unit's future is cancelled when the scheduler that held it goes
    if isinstance(exc, (TimeoutError, CancelledError)) or (
        isinstance(exc, OSError) and exc.errno is None
    ):
        return client is None or getattr(client, "status", "running") != "running"
    return False


def _lost_message(cluster: str, exc: BaseException) -> SchedulerLost:
    """Build the one-line error of a scheduler lost mid-run."""
    # the reason in words only: Dask's class names (CommClosedError) mean nothing to a user
    reason = " ".join(str(exc).split())[-120:].rstrip(".") or "connection closed"
    return SchedulerLost(
        f"lost the Dask scheduler at {cluster} mid-run ({reason}); "
        "every trial written before it is kept: restart the scheduler and its workers, "
        "then rerun the same command to resume"
    )


def _connect(cluster: str, timeout_s: float) -> Any:
    from distributed import Client

    # A plain socket first: Client() at a wrong address can hang past its timeout.
    check_scheduler(cluster, timeout_s)

    try:
        return Client(cluster, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise FleetError(
            f"cannot reach the Dask scheduler at {cluster!r} ({exc}); start one with "
            "`dask scheduler` and pass the address it prints"
        ) from None


def probe_fleet(client: Any, wait_s: float = 10.0) -> dict[str, Host]:
    """Ask every worker of a Dask cluster what it can time, grouped by host.

    Parameters
    ----------
    client : distributed.Client
        A client connected to the fleet's scheduler.
    wait_s : float, default 10.0
        How long to wait for a first worker to connect.

    Returns
    -------
    dict of str to Host
        Each host's workers, backends offered, devices and environment.

    Raises
    ------
    FleetError
        No worker connected within ``wait_s``.

    See Also
    --------
    run_fleet_sweep : a sweep on the fleet.
    """
    address = client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=wait_s)
    except TimeoutError:
        raise FleetError(
            f"no worker connected to the scheduler at {address} within {wait_s:g} s; "
            f"start one on each machine with: dask worker {address}"
        ) from None
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    return group_hosts(probe_workers(client, workers))


def _fleet_meta(spec: SweepSpec, command: list[str] | None) -> dict[str, Any]:
    from .environment import environment_metadata

    meta = {
        "spec": spec.to_dict(),
        "command": command if command is not None else list(sys.argv),
        "environment": environment_metadata(()),
    }
    if spec.endpoint is not None:
        from .endpoint._provenance import endpoint_metadata

        meta["endpoint"] = endpoint_metadata(spec.endpoint)
    return meta


def _warn_noisy(hosts: dict[str, Host]) -> None:
    """Say, on stderr, what would disturb the timings on each host, as a local sweep does."""
    for name, host in hosts.items():
        for warning in (host.environment.get("hygiene") or {}).get("warnings", []):
            print(f"collect: warning: host {name} is not quiet: {warning}", file=sys.stderr)


def _measured(spec: SweepSpec, units: list[Unit], writer: RunWriter) -> tuple[int, int]:
    """Measured trials the units leave to run, and ask for in all."""
    state = RunState.read(writer)
    left = sum(
        sum(measured_left_per_case(unit_spec(spec, u), u.session, state).values()) for u in units
    )
    expected = sum(len(unit_spec(spec, u).cases()) * spec.trials for u in units)
    return left, expected


def _profile_chosen(fleet: FleetRun, spec: SweepSpec, units: list[Unit]) -> tuple[FleetRun, str]:
    """Choose the budgets of ``profile = "auto"`` and profile them on the fleet's units.

    As a local sweep does (:mod:`collectors._profile_auto`): the choice is recorded in
    ``meta.json`` first, and each unit's session is resumed with those budgets profiled.
    """
    choice = record_choice(fleet.writer, spec)
    messages = [*fleet.messages, choice.message()]
    if not choice.budgets:
        fleet.messages = messages
        return fleet, "complete"
    chosen = resolved(spec, fleet.writer.meta)
    more = FleetRun(
        fleet.client, chosen, fleet.writer, fleet.hosts, units, fleet.deadline, fleet.progress
    )
    status = more.run()
    more.bar.counts.update(fleet.bar.counts)
    more.messages = [*messages, *more.messages]
    return more, status


def run_fleet_sweep(
    spec: SweepSpec,
    run_dir: str | os.PathLike[str],
    cluster: str,
    *,
    max_seconds: float | None = None,
    progress: bool = True,
    compact: bool = True,
    command: list[str] | None = None,
    lock_wait_s: float = 10.0,
    connect_timeout_s: float = 10.0,
) -> SweepResult:
    """Run (or resume) ``spec`` into ``run_dir`` on the workers of a Dask scheduler.

    The spec is checked against the fleet, not this machine: each backend must be
    offered by some host. Parts are written into ``run_dir`` here as units send them;
    rerunning the same call resumes (see the module docstring).

    Parameters
    ----------
    spec : SweepSpec
        What to measure (read with ``check_available=False``: this machine need not
        have its backends).
    run_dir : str or os.PathLike
        The run directory on this machine: created if new, resumed if it holds a run of
        ``spec``.
    cluster : str
        The scheduler's address, e.g. ``"tcp://10.0.0.5:8786"``.
    max_seconds : float, optional
        Stop cleanly once this much wall time has passed.
    progress : bool, default True
        Show one progress bar, with the generations of each host.
    compact : bool, default True
        Merge each table's parts into one when the sweep completes.
    command : list of str, optional
        The command line recorded in ``meta.json`` (default ``sys.argv``).
    lock_wait_s : float, default 10.0
        How long to wait for another process still writing to ``run_dir``.
    connect_timeout_s : float, default 10.0
        How long to wait for the scheduler, and for a first worker.

    Returns
    -------
    SweepResult
        As :func:`collectors.sweep.run_sweep`'s; ``incomplete`` also when a unit found
        no host to run it (a bound host that left).

    Raises
    ------
    FleetError
        The scheduler cannot be reached, has no worker, or no host offers one of the
        spec's backends (the message names it and the hosts seen).
    SpecError
        ``run_dir`` holds a run of another spec, or something that is not a run.
    RunBusyError
        Another process is writing to ``run_dir``.

    See Also
    --------
    collectors.sweep.run_sweep : the same sweep on this machine.
    regimes.load : read the trial table back (``host`` says which machine ran a trial).

    Examples
    --------
    >>> run_fleet_sweep(SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"],
    ...     "budgets": [2]}), "/tmp/never", "tcp://127.0.0.1:1", connect_timeout_s=0.5)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    collectors._fleet.hosts.FleetError: cannot reach the Dask scheduler at 'tcp://127.0.0.1:1' ...
    """
    started = time.monotonic()
    deadline = time.time() + max_seconds if max_seconds is not None else None
    target = Path(run_dir)
    options = {
        "progress": progress,
        "compact": compact,
        "command": command,
        "lock_wait_s": lock_wait_s,
        "connect_timeout_s": connect_timeout_s,
    }
    with _quiet_dask_logs():
        client = _connect(cluster, connect_timeout_s)
        try:
            return _run_on(client, spec, target, cluster, started, deadline, options)
        except Exception as exc:
            if _scheduler_lost(exc, client):
                raise _lost_message(cluster, exc) from None
            raise
        finally:
            _close(client)


def _close(client: Any) -> None:
    """Close the client; with the scheduler gone that fails, and only the cause matters."""
    try:
        client.close(timeout=2)
    except (OSError, TimeoutError):
        pass


def _run_on(
    client: Any,
    spec: SweepSpec,
    target: Path,
    cluster: str,
    started: float,
    deadline: float | None,
    options: dict[str, Any],
) -> SweepResult:
    """Run the sweep on the connected fleet; see :func:`run_fleet_sweep`."""
    progress, compact, command = options["progress"], options["compact"], options["command"]
    lock_wait_s, connect_timeout_s = options["lock_wait_s"], options["connect_timeout_s"]
    hosts = probe_fleet(client, connect_timeout_s)
    validate_fleet(spec, hosts, cluster)
    _warn_noisy(hosts)
    check_run_dir(spec, target)
    target.mkdir(parents=True, exist_ok=True)
    with RunLock(target, lock_wait_s):
        check_run_dir(spec, target)  # again under the lock: another writer may have begun
        remove_stale_temp_files(target)
        writer = RunWriter(target, _fleet_meta(spec, command))
        units = make_units(spec, hosts, record_hosts(writer, hosts, cluster))
        fleet = FleetRun(
            client, resolved(spec, writer.meta), writer, hosts, units, deadline, progress
        )
        status = fleet.run()
        if status == "complete" and needs_choice(spec, writer.meta):
            fleet, status = _profile_chosen(fleet, spec, units)
        left, expected = _measured(spec, units, writer)
        status = _finish(writer, status, left, compact, fleet.messages)
    run = read_run(target)
    counts = fleet.bar.counts
    return SweepResult(
        run_dir=target,
        status=status,
        measured=counts["measured"],
        warmups=counts["warmups"],
        errors=counts["errors"],
        profiled=counts["profiled"],
        measured_on_disk=run.trials.filter(~pl.col("warmup")).height,
        measured_expected=expected,
        errors_on_disk=run.errors.height,
        elapsed_s=time.monotonic() - started,
        messages=fleet.messages,
    )
