"""Batches: sessions added to an existing run, with the run's spec narrowed.

A run's own sessions are ``0 .. spec.sessions - 1``. :func:`collectors.sweep.collect_budgets`
adds *batches*: fresh sessions, numbered after every session the run already has, that
run the run's spec with a few keys overridden (budgets, trials, warm-ups, isolation).
Each batch is recorded in ``meta.json`` under ``batches`` *before* any of its trials is
written, as ``{"batch": name, "sessions": [ids], "overrides": {key: value}}``, so that
every process (a session worker, a resumed call, a reader) can tell which spec governs
each session: :func:`session_specs`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from regimes.data.io import RunWriter
from regimes.data.io import read_meta as read_run_meta
from regimes.data.runs.parts import write_text_atomically

from ._profile_auto import resolved
from ._schedule import measured_left_per_case
from ._state import RunState
from .spec import SpecError, SweepSpec

__all__ = ["Batch", "claim_batch", "read_meta", "session_specs", "stored_spec"]


@dataclass(frozen=True)
class Batch:
    """Sessions of a run that share one (narrowed) spec."""

    name: str
    sessions: tuple[int, ...]
    spec: SweepSpec


def read_meta(run_dir: Path) -> dict[str, Any]:
    """Read ``meta.json`` of a run; a missing or unreadable one is a :class:`SpecError`."""
    path = run_dir / "meta.json"
    if not path.exists():
        raise SpecError(f"{str(run_dir)!r} is not a run directory (no meta.json)")
    meta = read_run_meta(path)  # one line naming the file for any damage
    if not isinstance(meta.get("spec"), dict):
        raise SpecError(f"{str(run_dir)!r} holds a run without a readable sweep spec")
    return meta


def stored_spec(meta: dict[str, Any]) -> SweepSpec:
    """Return the spec a run was created with."""
    return SweepSpec.from_dict(meta["spec"], check_available=False)


def _batch_spec(base: dict[str, Any], entry: dict[str, Any], check_available: bool) -> SweepSpec:
    sessions, overrides = entry.get("sessions"), entry.get("overrides")
    if not (
        isinstance(overrides, dict)
        and isinstance(sessions, list)
        and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in sessions)
    ):
        raise SpecError(
            f"a batch recorded in meta.json is damaged ({str(entry)[:80]}): it needs "
            "'overrides' (an object) and 'sessions' (whole numbers)"
        )
    data = {**base, **entry["overrides"], "sessions": len(entry["sessions"])}
    return SweepSpec.from_dict(data, check_available=check_available)


def session_specs(meta: dict[str, Any]) -> dict[int, SweepSpec]:
    """Map every session of a run to the spec that governs it.

    The run's own sessions first, then each batch's, in the order they were added.
    The run's own sessions profile the budgets ``profile = "auto"`` chose, once
    ``meta.json`` records them; a batch's sessions profile none under ``"auto"``.
    """
    base = resolved(stored_spec(meta), meta)  # profile = "auto": the budgets it chose
    specs = dict.fromkeys(range(base.sessions), base)
    for entry in meta.get("batches", []):
        spec = _batch_spec(meta["spec"], entry, check_available=False)
        specs.update(dict.fromkeys(entry["sessions"], spec))
    return specs


def measured_left(specs: dict[int, SweepSpec], state: RunState) -> int:
    """Count the measured trials the sessions ``specs`` still have to run (counted, not planned)."""
    return sum(sum(measured_left_per_case(s, k, state).values()) for k, s in specs.items())


def _write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    # atomically, naming meta.json and leaving no temporary file when the disk is full
    write_text_atomically(json.dumps(meta, indent=2, default=str), run_dir / "meta.json")


def _next_session(meta: dict[str, Any], state_sessions: set[int]) -> int:
    base = stored_spec(meta)
    known = set(range(base.sessions)) | state_sessions
    if base.fleet_sessions == "every-host":
        # a fleet gives host number r sessions r * sessions .. (see collectors.fleet)
        hosts = meta.get("fleet", {}).get("host_order", [])
        known.update(range(len(hosts) * base.sessions))
    for entry in meta.get("batches", []):
        known.update(entry["sessions"])
    return max(known, default=-1) + 1


def _resumable(
    meta: dict[str, Any], overrides: dict[str, Any], sessions: int, state: RunState
) -> dict[str, Any] | None:
    """Find the latest batch with these settings that has trials left, if any."""
    for entry in reversed(meta.get("batches", [])):
        if entry["overrides"] == overrides and len(entry["sessions"]) == sessions:
            spec = _batch_spec(meta["spec"], entry, check_available=False)
            if measured_left(dict.fromkeys(entry["sessions"], spec), state):
                return entry
    return None


def _named(meta: dict[str, Any], name: str, overrides: dict[str, Any], sessions: int) -> Any:
    for entry in meta.get("batches", []):
        if entry["batch"] == name:
            if entry["overrides"] != overrides or len(entry["sessions"]) != sessions:
                raise SpecError(
                    f"batch {name!r} was recorded with {entry['overrides']} over "
                    f"{len(entry['sessions'])} session(s), not {overrides} over {sessions}; "
                    "give it the same settings to resume it, or another name"
                )
            return entry
    return None


def claim_batch(run_dir: Path, overrides: dict[str, Any], sessions: int, name: str | None) -> Batch:
    """Find the batch to resume or record a new one; call with the run locked.

    A named batch that exists is resumed (its settings must match). Unnamed, the
    latest batch with the same settings and trials left is resumed (a rerun after a
    crash continues it), else a new batch takes fresh session numbers after every
    session the run has (in ``meta.json`` or on disk), so none collides.
    """
    meta = read_meta(run_dir)
    session_specs(meta)  # every recorded batch checked before any is looked up
    state = RunState.read(RunWriter(run_dir, None))
    entry = (
        _named(meta, name, overrides, sessions)
        if name is not None
        else _resumable(meta, overrides, sessions, state)
    )
    if entry is None:
        first = _next_session(meta, set(state.sessions))
        entry = {
            "batch": name or f"batch-{len(meta.get('batches', []))}",
            "sessions": list(range(first, first + sessions)),
            "overrides": overrides,
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        meta.setdefault("batches", []).append(entry)
        _write_meta(run_dir, meta)
    spec = _batch_spec(meta["spec"], entry, check_available=True)
    return Batch(entry["batch"], tuple(entry["sessions"]), spec)
