"""The fleet as the client sees it: hosts, what each offers, and the units of work.

A *host* is a machine, named by what its workers report (``$REGIMES_HOST`` or the host
name); several workers of one host are one host, since timing jobs must never share a
machine. A *unit* is one session of one backend: it runs wholly on one host.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from regimes.data.io import RunWriter
from regimes.errors import RegimesInputError

from ..spec import SweepSpec

__all__ = [
    "FleetError",
    "Host",
    "SchedulerLost",
    "Unit",
    "group_hosts",
    "make_units",
    "record_hosts",
    "unit_spec",
    "validate_fleet",
]


class FleetError(RegimesInputError):
    """A fleet that cannot run the sweep (no workers, a backend no host offers)."""


class SchedulerLost(FleetError):
    """The connection to the fleet's Dask scheduler was lost while the sweep ran."""


@dataclass
class Host:
    """One machine of the fleet: its workers' addresses, backends, devices, environment."""

    name: str
    workers: list[str]
    backends: tuple[str, ...]
    devices: dict[str, str | None]
    environment: dict[str, Any] = field(repr=False)

    def describe(self) -> str:
        """Name the host and what it offers, e.g. ``mac-a (mps: Apple M2, cpu: ...)``."""
        offered = ", ".join(f"{b}: {self.devices.get(b) or '?'}" for b in self.backends)
        return f"{self.name} ({offered or 'no backend'})"


@dataclass(frozen=True)
class Unit:
    """One session of one backend; ``host`` binds it to a host (``every-host`` sessions)."""

    backend: str
    session: int
    host: str | None = None

    @property
    def label(self) -> str:
        """The unit's name in messages and task keys."""
        return f"{self.backend}/session-{self.session}"


def group_hosts(probes: dict[str, dict[str, Any]]) -> dict[str, Host]:
    """Group worker probes (address to :func:`~collectors._fleet.remote.probe`) by host."""
    hosts: dict[str, Host] = {}
    for address, seen in sorted(probes.items()):
        host = hosts.get(seen["host"])
        if host is None:
            hosts[seen["host"]] = Host(
                seen["host"],
                [address],
                tuple(seen["backends"]),
                dict(seen["devices"]),
                seen["environment"],
            )
        else:
            host.workers.append(address)
            # workers of one host may be started with different REGIMES_BACKENDS
            host.backends = tuple(dict.fromkeys([*host.backends, *seen["backends"]]))
            host.devices.update(seen["devices"])
    return hosts


def validate_fleet(spec: SweepSpec, hosts: dict[str, Host], address: str) -> None:
    """Raise :class:`FleetError` unless every backend of ``spec`` is offered by some host."""
    if not hosts:
        raise FleetError(
            f"no worker is connected to the scheduler at {address}; start one on each "
            f"machine with: dask worker {address}"
        )
    offered = {b for host in hosts.values() for b in host.backends}
    missing = [b for b in spec.backends if b not in offered]
    if missing:
        seen = "; ".join(host.describe() for host in hosts.values())
        raise FleetError(
            f"backend(s) {missing} offered by no host of the fleet at {address} "
            f"(hosts seen: {seen}); start a worker on a machine with {missing[0]!r}, "
            "or remove it from the spec's backends"
        )


def record_hosts(writer: RunWriter, hosts: dict[str, Host], address: str) -> list[str]:
    """Store each host's environment in ``meta.json``; return the run's stable host order.

    ``meta["fleet"]["host_order"]`` only ever grows (new hosts at the end, sorted), so
    the session numbers of ``every-host`` sweeps, which follow it, never change.
    """
    fleet = writer.meta.setdefault("fleet", {})
    order: list[str] = fleet.setdefault("host_order", [])
    order.extend(sorted(h for h in hosts if h not in order))
    fleet.setdefault("hosts", {}).update({h: host.environment for h, host in hosts.items()})
    fleet.setdefault("schedulers", [])
    if address not in fleet["schedulers"]:
        fleet["schedulers"].append(address)
    meta_path = Path(writer.path) / "meta.json"
    tmp = meta_path.with_name(f".meta.json.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(writer.meta, indent=2, default=str))
    os.replace(tmp, meta_path)
    return list(order)


def make_units(spec: SweepSpec, hosts: dict[str, Host], host_order: list[str]) -> list[Unit]:
    """List the units of a sweep on this fleet.

    ``shared``: session ``k`` of each backend, once. ``every-host``: host number ``r`` of
    ``host_order`` runs sessions ``r * sessions + k``, so that every trial's key stays
    unique while the host column says which host ran it.
    """
    if spec.fleet_sessions == "shared":
        return [Unit(b, k) for b in spec.backends for k in range(spec.sessions)]
    return [
        Unit(b, rank * spec.sessions + k, name)
        for b in spec.backends
        for rank, name in enumerate(host_order)
        if name in hosts and b in hosts[name].backends
        for k in range(spec.sessions)
    ]


def unit_spec(spec: SweepSpec, unit: Unit) -> SweepSpec:
    """Return the spec a unit runs: its backend only, sessions enough for its number."""
    return replace(spec, backends=(unit.backend,), sessions=max(spec.sessions, unit.session + 1))
