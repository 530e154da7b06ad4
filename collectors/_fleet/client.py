"""The client side of a fleet sweep: hand units to hosts, write what comes back.

Scheduling is done here, not by Dask: a host runs at most one unit at a time however
many workers or threads it has, and a unit goes to the worker it was submitted to
(``workers=[address]``, ``allow_other_workers=False``). Every part a unit writes comes
back through a :class:`distributed.Queue` and is written into the run directory by the
one :class:`~regimes.data.io.RunWriter` of the run, after dropping any trial key it
already holds (so a part sent twice cannot duplicate a trial) and renumbering ``order``
in arrival order (it is the run's global execution order).

A worker that disappears (killed, its machine gone) loses its unit's trial in flight:
the unit goes back to the queue of work, planned again from what is on disk, and runs
on the same host once it has a worker again, or on another eligible host.
"""

from __future__ import annotations

import io
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import polars as pl

from regimes.data.io import TRIAL_KEY, RunWriter

from .._progress import Progress
from .._schedule import generations_left
from .._state import CASE_FIELDS, RunState
from ..spec import SweepSpec
from .hosts import Host, Unit, group_hosts, record_hosts, unit_spec
from .remote import UnitOrder, probe_workers, run_unit

__all__ = ["FleetRun"]

_ERROR_KEY = (*CASE_FIELDS, "session")
_OPS_KEY = (*CASE_FIELDS, "session", "trial", "attn_implementation")
"""One profiled generation: its operator rows are one part, sent whole."""
_MAX_ATTEMPTS = 3
"""Task failures (not lost workers) a unit is given before the sweep calls it failed."""
_WAIT_FOR_HOSTS_S = 15.0
"""How long work may wait with no host able to take it (a worker restarting) before the
sweep ends incomplete."""


@dataclass
class _Busy:
    unit: Unit
    future: Any
    worker: str


def _keys(frame: pl.DataFrame, columns: tuple[str, ...]) -> set[tuple[Any, ...]]:
    return set(frame.select(columns).iter_rows()) if frame.height else set()


class FleetRun:
    """One call's fleet sweep: the work left, the hosts, what is busy, what came back."""

    def __init__(
        self,
        client: Any,
        spec: SweepSpec,
        writer: RunWriter,
        hosts: dict[str, Host],
        units: list[Unit],
        deadline: float | None,
        progress: bool,
    ):
        from distributed import Event, Queue

        self.client, self.spec, self.writer, self.hosts = client, spec, writer, hosts
        self.deadline, self.address = deadline, client.scheduler.address
        self.progress = progress
        token = f"regimes-{writer.run_id}-{uuid.uuid4().hex[:8]}"
        self.queue = Queue(f"{token}-parts", client=client)
        self.stop_name = f"{token}-stop"
        self.stop = Event(self.stop_name, client=client)
        self._read_disk()
        self.units = units
        self.pending = [u for u in units if self.left(u)]
        self.busy: dict[str, _Busy] = {}
        self.attempts = Counter[Unit]()
        self.counts: dict[str, Counter[str]] = {}
        self.messages: list[str] = []
        self.failed = False
        self.stopped: str | None = None
        self.bar = Progress(sum(self.left(u) for u in self.pending), progress)

    def _read_disk(self) -> None:
        run = self.writer.existing()
        self.state = RunState.read(self.writer)
        self.trials_seen = _keys(run.trials, TRIAL_KEY)
        self.steps_seen = _keys(run.steps, TRIAL_KEY)
        self.errors_seen = _keys(run.errors, _ERROR_KEY)
        self.ops_seen = _keys(run.ops, _OPS_KEY)
        self.order = self.state.next_order
        last = run.trials.sort("order").unique(["backend", "session"], keep="last")
        self.unit_host: dict[tuple[str, int], str | None] = {
            (b, s): h for b, s, h in last.select("backend", "session", "host").iter_rows()
        }

    def left(self, unit: Unit) -> int:
        """Count the generations (warm-ups included) ``unit`` has left, from what is on disk."""
        return sum(generations_left(unit_spec(self.spec, unit), unit.session, self.state).values())

    # -- what comes back -------------------------------------------------------------

    def drain(self) -> int:
        """Write every part waiting in the queue; return how many messages there were."""
        messages = self.queue.get(batch=True)
        for message in messages:
            if "line" in message:
                self.bar.write(f"[{message['host']}] {message['line']}")
            else:
                frame = pl.read_parquet(io.BytesIO(message["data"]))
                getattr(self, f"_ingest_{message['table']}")(frame, message["host"])
        return len(messages)

    def _ingest_trials(self, frame: pl.DataFrame, host: str) -> None:
        keys = list(frame.select(TRIAL_KEY).iter_rows())
        keep = [k not in self.trials_seen for k in keys]
        frame = frame.filter(pl.Series(keep, dtype=pl.Boolean))
        if not frame.height:
            return
        frame = frame.with_columns(
            pl.int_range(self.order, self.order + frame.height).alias("order")
        )
        self.writer.write_trials(frame)
        self.order += frame.height
        self.trials_seen.update(k for k, new in zip(keys, keep, strict=True) if new)
        counts = self.counts.setdefault(host, Counter())
        for backend, session, warmup in frame.select("backend", "session", "warmup").iter_rows():
            self.unit_host[(backend, session)] = host
            kind = "warmups" if warmup else "measured"
            counts[kind] += 1
            self.bar.counts[kind] += 1
        self.bar.bar.set_postfix_str(self._per_host(), refresh=False)
        self.bar.bar.update(frame.height)

    def _per_host(self) -> str:
        return ", ".join(
            f"{h}: {c['measured'] + c['warmups'] + c['profiled']}"
            for h, c in sorted(self.counts.items())
        )

    def _ingest_steps(self, frame: pl.DataFrame, host: str) -> None:
        key = next(frame.select(TRIAL_KEY).iter_rows(), None)
        if key is not None and key not in self.steps_seen:
            self.writer.write_steps(frame)
            self.steps_seen.add(key)

    def _ingest_ops(self, frame: pl.DataFrame, host: str) -> None:
        """Write a profiled generation's operators, once (a part sent twice is dropped)."""
        key = next(frame.select(_OPS_KEY).iter_rows(), None)
        if key is None or key in self.ops_seen:
            return
        self.writer.write_ops(frame)
        self.ops_seen.add(key)
        backend, session = frame.select("backend", "session").row(0)
        self.unit_host[(backend, session)] = host
        self.counts.setdefault(host, Counter())["profiled"] += 1
        self.bar.counts["profiled"] += 1
        self.bar.bar.set_postfix_str(self._per_host(), refresh=False)
        self.bar.bar.update(1)

    def _ingest_errors(self, frame: pl.DataFrame, host: str) -> None:
        keys = list(frame.select(_ERROR_KEY).iter_rows())
        keep = [k not in self.errors_seen for k in keys]
        frame = frame.filter(pl.Series(keep, dtype=pl.Boolean))
        if frame.height:
            self.writer.write_errors(frame)
            self.errors_seen.update(keys)
            self.bar.counts["errors"] += frame.height
            for row in frame.iter_rows(named=True):
                self.bar.write(f"error on {host}: {row['error_type']}: {row['error']}")

    # -- handing out units -----------------------------------------------------------

    def _preferred(self, unit: Unit) -> str | None:
        """Name the host a unit belongs on: its bound host, else the host that began it."""
        return unit.host or self.unit_host.get((unit.backend, unit.session))

    def _pick(self, host: Host) -> Unit | None:
        """Choose the next unit for an idle ``host``: one it began, else one nobody holds."""
        eligible = [u for u in self.pending if u.backend in host.backends]
        mine = [u for u in eligible if self._preferred(u) == host.name]
        if mine:
            return mine[0]
        # a unit begun on another host waits for it while it is in the fleet, so that
        # a session stays on one machine unless that machine is gone
        free = [
            u
            for u in eligible
            if u.host is None
            and (self._preferred(u) is None or self._preferred(u) not in self.hosts)
        ]
        return free[0] if free else None

    def _seed(self, unit: Unit) -> dict[str, bytes]:
        """Return what the run holds of ``unit``'s session, as parquet bytes per table."""
        run = self.writer.existing()
        out: dict[str, bytes] = {}
        mine = (pl.col("backend") == unit.backend) & (pl.col("session") == unit.session)
        for table in ("trials", "errors", "ops"):
            frame = getattr(run, table).filter(mine)
            if frame.height:
                buffer = io.BytesIO()
                frame.write_parquet(buffer)
                out[table] = buffer.getvalue()
        return out

    def assign(self) -> None:
        """Give each idle host of the fleet the next unit it may run."""
        for name, host in sorted(self.hosts.items()):
            if name in self.busy or not self.pending:
                continue
            unit = self._pick(host)
            if unit is None:
                continue
            self.pending.remove(unit)
            meta = {"run_id": self.writer.run_id, "spec": unit_spec(self.spec, unit).to_dict()}
            order = UnitOrder(
                meta,
                unit.session,
                self._seed(unit),
                self.queue.name,
                self.stop_name,
                unit.label,
                self.deadline,
            )
            worker = host.workers[0]
            future = self.client.submit(
                run_unit,
                order,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
                key=f"regimes-unit-{unit.label}-{uuid.uuid4().hex[:8]}",
            )
            self.busy[name] = _Busy(unit, future, worker)

    # -- watching the fleet ----------------------------------------------------------

    def refresh_hosts(self) -> None:
        """Drop workers that left, probe workers that joined; requeue units of lost ones."""
        live = set(self.client.scheduler_info(n_workers=-1)["workers"])
        known = {w for host in self.hosts.values() for w in host.workers}
        for name, busy in list(self.busy.items()):
            if busy.worker not in live:
                busy.future.cancel()
                del self.busy[name]
                self.drain()
                self.messages.append(
                    f"{busy.unit.label}: the worker {busy.worker} on {name} left mid-session; "
                    "the rest of the session runs again from what is on disk"
                )
                self.bar.write(self.messages[-1])
                self.pending.insert(0, busy.unit)
        for host in self.hosts.values():
            host.workers = [w for w in host.workers if w in live]
        self.hosts = {n: h for n, h in self.hosts.items() if h.workers}
        joined = sorted(live - known)
        if joined:
            probes = probe_workers(self.client, joined)
            for name, host in group_hosts(probes).items():
                if name in self.hosts:
                    self.hosts[name].workers.extend(host.workers)
                else:
                    self.hosts[name] = host
            record_hosts(self.writer, self.hosts, self.address)

    def collect(self) -> None:
        """Take in the units that ended: done, to run again, or a reason to stop."""
        for name, busy in list(self.busy.items()):
            if not busy.future.done():
                continue
            del self.busy[name]
            self.drain()
            self.state = RunState.read(self.writer)
            if busy.future.status == "error":
                self._task_failed(busy, repr(busy.future.exception()))
                continue
            outcome = busy.future.result()
            self.messages.extend(f"{busy.unit.label} on {name}: {m}" for m in outcome["messages"])
            if outcome["status"] == "failed":
                self._task_failed(busy, "the session process failed outside any case")
            elif outcome["status"] != "complete":
                self.stopped = outcome["status"]
            elif self.left(busy.unit):  # pragma: no cover - a session that did not drain
                self.pending.append(busy.unit)
        self._retotal()

    def _retotal(self) -> None:
        units = self.pending + [b.unit for b in self.busy.values()]
        self.bar.retotal(self.bar.done + sum(self.left(u) for u in units))

    def _task_failed(self, busy: _Busy, why: str) -> None:
        self.attempts[busy.unit] += 1
        self.messages.append(f"{busy.unit.label}: failed ({why})")
        self.bar.write(self.messages[-1])
        if self.attempts[busy.unit] < _MAX_ATTEMPTS:
            self.pending.append(busy.unit)
        else:
            self.failed = True

    # -- the loop --------------------------------------------------------------------

    def _idle_since(self, since: float | None) -> float | None:
        """When the fleet began to have work but no host able to take it (None: busy)."""
        if self.busy or not self.pending:
            return None
        return since if since is not None else time.monotonic()

    def run(self) -> str:
        """Run every unit left; return the sweep's status (as :func:`run_sweep`'s)."""
        checked, idle = 0.0, None
        try:
            while self.busy or (self.pending and self.stopped is None and not self.failed):
                if time.monotonic() - checked >= 1.0:
                    self.refresh_hosts()
                    checked = time.monotonic()
                if self.stopped is None and not self.failed and not self._past_deadline():
                    self.assign()
                self.collect()
                idle = self._idle_since(idle)
                if idle is not None and (
                    self._past_deadline() or time.monotonic() - idle > _WAIT_FOR_HOSTS_S
                ):
                    break
                if not self.drain():
                    time.sleep(0.1)
        except KeyboardInterrupt:
            self.stop_all()
            return "interrupted"
        finally:
            self.bar.close()
        return self._status()

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def _status(self) -> str:
        if self.failed:
            return "failed"
        if self.stopped is not None:
            return self.stopped
        if self.pending:
            if not self._past_deadline():
                waiting = sorted({u.host or u.backend for u in self.pending})
                self.messages.append(
                    f"{len(self.pending)} unit(s) found no host to run them (waiting for: "
                    f"{', '.join(waiting)}); start those workers and rerun"
                )
            return "incomplete"
        return "complete"

    def stop_all(self) -> None:
        """Ask every unit to stop (after its generation in flight) and keep what they wrote."""
        self.stop.set()
        give_up = time.monotonic() + 30
        while self.busy and time.monotonic() < give_up:
            self.drain()
            for name, busy in list(self.busy.items()):
                if busy.future.done():
                    del self.busy[name]
            time.sleep(0.1)
        self.drain()
        for busy in self.busy.values():
            busy.future.cancel()
