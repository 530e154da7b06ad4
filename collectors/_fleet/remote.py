"""The worker side of a fleet sweep: describe this machine, run one unit of work on it.

Both functions run inside a ``dask worker`` process. :func:`probe` is sent with
``Client.run`` to every worker; :func:`run_unit` is one submitted task: one session of
one backend, run in a fresh process (:mod:`collectors._process`) over a temporary run
directory seeded with what the client's run already holds of that session, each new
parquet part sent back through a :class:`distributed.Queue` as soon as it is written.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import RunWriter

from .._events import Event
from .._progress import Progress
from .._session import host_name

__all__ = [
    "TABLES",
    "UnitOrder",
    "offered_backends",
    "probe",
    "probe_workers",
    "run_unit",
    "session_environment",
]

TABLES: tuple[str, ...] = ("trials", "steps", "errors", "ops")
"""The run tables a unit sends back, in the order a trial writes them (``ops``: a
profiled generation's operators, spec key ``profile``)."""


def offered_backends() -> tuple[str, ...]:
    """Backends this worker offers: those it can run, cut to ``$REGIMES_BACKENDS`` if set.

    ``REGIMES_BACKENDS`` (a comma list) keeps a backend off a machine that has it,
    e.g. the CPU of a CUDA box whose CPU timings would compete with the GPU's.
    """
    from ..backends import available_backends

    available = available_backends() + _endpoint_client()
    wanted = os.environ.get("REGIMES_BACKENDS", "")
    names = {name.strip() for name in wanted.split(",") if name.strip()}
    return tuple(b for b in available if b in names) if names else available


def _endpoint_client() -> tuple[str, ...]:
    """``("endpoint",)`` where the ``serve`` extra is installed: this host can send requests."""
    try:
        import httpx  # noqa: F401
        import httpx_sse  # noqa: F401
    except ImportError:
        return ()
    from ..endpoint._config import BACKEND

    return (BACKEND,)


def _under_nanny() -> bool:
    """Whether this code runs in a Dask worker that a nanny started."""
    from distributed import get_worker

    try:
        return get_worker().nanny is not None
    except ValueError:  # not inside a worker
        return False


def session_environment(nannied: bool | None = None) -> tuple[dict[str, str], list[str]]:
    """Return the environment of a session process started here, and what it unpins.

    A Dask nanny starts its worker with ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
    ``OPENBLAS_NUM_THREADS`` set to 1 (``distributed.nanny.pre-spawn-environ``), which
    suits many tasks in one process and would make every CPU timing of a fleet sweep
    single-threaded. Under a nanny (``nannied``; default: found out), a session process
    gets them removed where they hold exactly the nanny's value, so that it times what a
    sweep started on that machine by hand would. Any other value is kept, and so is
    every value in a worker started with ``--no-nanny``: the way to pin threads.
    """
    import dask.config

    env = dict(os.environ)
    if not (_under_nanny() if nannied is None else nannied):
        return env, []
    pinned = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    unpinned = [
        name
        for name, value in pinned.items()
        if name.endswith("_NUM_THREADS") and env.get(name) == str(value)
    ]
    for name in unpinned:
        del env[name]
    return env, sorted(unpinned)


def probe() -> dict[str, Any]:
    """Describe this worker's machine: host name, backends offered, devices, environment.

    The environment is the one a session process gets (:func:`session_environment`):
    thread variables the nanny pinned are shown unset and listed under
    ``unpinned_by_fleet``; the worker's own torch thread counts are left out, since they
    describe the worker process, not the sessions. ``hygiene`` is how quiet the machine
    is (:func:`collectors.hygiene.machine_state`), as a local sweep records it.
    """
    from ..backends import BACKEND_NAMES
    from ..environment import environment_metadata
    from ..hygiene import machine_state

    offered = offered_backends()
    environment = environment_metadata([b for b in offered if b in BACKEND_NAMES])
    host = host_name()
    environment["hostname"] = host
    _, unpinned = session_environment()
    environment["env"].update({name: None for name in unpinned})
    environment["unpinned_by_fleet"] = unpinned
    for key in ("torch_threads", "torch_interop_threads"):
        environment.pop(key, None)
    environment["hygiene"] = machine_state()
    devices = {b: environment["backends"].get(b, {}).get("device") for b in offered}
    return {"host": host, "backends": list(offered), "devices": devices, "environment": environment}


def probe_workers(client: Any, workers: list[str]) -> dict[str, dict[str, Any]]:
    """Run :func:`probe` on each of ``workers`` as a task; map each address to its answer.

    A task, not ``Client.run``: the probe imports torch, which would block the worker's
    event loop (and its heartbeats) for seconds. A worker whose probe fails is left out
    with a line on stderr.
    """
    futures = {
        w: client.submit(probe, workers=[w], allow_other_workers=False, pure=False) for w in workers
    }
    out: dict[str, dict[str, Any]] = {}
    for worker, future in futures.items():
        try:
            out[worker] = future.result()
        except Exception as exc:  # a worker without torch or regimes: say so, go on
            print(f"fleet: worker {worker} left out: {exc!r}", file=sys.stderr)
    return out


@dataclass(frozen=True)
class UnitOrder:
    """What the client sends with one unit: the session to run and where to report.

    Attributes
    ----------
    meta : dict
        The temporary run's ``meta.json``: the client's ``run_id`` and the spec cut to
        the unit's backend.
    session : int
        The session to run.
    seed_parts : dict
        Table name to parquet bytes: what the client holds of this session.
    queue : str
        Name of the :class:`distributed.Queue` the parts go to.
    stop : str
        Name of the :class:`distributed.Event` that asks the unit to stop.
    unit : str
        The unit's label, sent with every part.
    deadline : float or None
        Unix time after which the session stops cleanly.
    """

    meta: dict[str, Any]
    session: int
    seed_parts: dict[str, bytes]
    queue: str
    stop: str
    unit: str
    deadline: float | None


class _Shipper(Progress):
    """A silent progress sink that sends every new part of the run and honours ``stop``."""

    def __init__(self, run_dir: Path, order: UnitOrder):
        from distributed import Event as DaskEvent
        from distributed import Queue

        super().__init__(0, False)
        self.run_dir, self.order = run_dir, order
        self.queue, self.stop = Queue(order.queue), DaskEvent(order.stop)
        self.sent: set[Path] = set(self._parts())

    def _parts(self) -> list[Path]:
        return [
            p
            for table in TABLES
            for p in sorted((self.run_dir / table).glob("*.parquet"), key=os.path.getmtime)
            if not p.name.startswith(".")
        ]

    def flush(self) -> None:
        """Send the parts not yet sent, trials before the steps, errors and ops written after."""
        for part in self._parts():
            if part not in self.sent:
                message = {"unit": self.order.unit, "table": part.parent.name}
                self.queue.put({**message, "host": host_name(), "data": part.read_bytes()})
                self.sent.add(part)

    def write(self, line: str) -> None:
        self.queue.put({"unit": self.order.unit, "host": host_name(), "line": line})

    def __call__(self, event: Event) -> None:
        self.flush()
        if self.stop.is_set():
            # raised here, it makes the session runner stop its process as Ctrl-C would
            raise KeyboardInterrupt


def run_unit(order: UnitOrder) -> dict[str, Any]:
    """Run one session of one backend here; send each part back as it is written.

    Parameters
    ----------
    order : UnitOrder
        The unit, and where to report.

    Returns
    -------
    dict
        ``status`` (as :func:`collectors.sweep.run_sweep`'s), ``messages`` and ``host``.
    """
    from .._process import run_process_session
    from ..spec import SweepSpec

    with tempfile.TemporaryDirectory(prefix="regimes-fleet-") as tmp:
        writer = RunWriter(Path(tmp) / "run", order.meta)
        for table, data in order.seed_parts.items():
            # Through the writer: in a format-2 run every part carries its checksum and
            # the run's id, or the session runner would refuse the seed as foreign.
            getattr(writer, f"write_{table}")(pl.read_parquet(io.BytesIO(data)))
        shipper = _Shipper(writer.path, order)
        spec = SweepSpec.from_dict(order.meta["spec"], check_available=False)
        messages: list[str] = []
        child_env, _ = session_environment()
        try:
            status = run_process_session(
                {order.session: spec},
                order.session,
                writer,
                order.deadline,
                None,
                shipper,
                messages,
                child_env,
            )
        except KeyboardInterrupt:
            status = "interrupted"
        shipper.flush()
    return {"status": status, "messages": messages, "host": host_name()}
