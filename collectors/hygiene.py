"""Measurement hygiene: whether this machine is quiet enough to time anything on it.

A latency sweep measures the machine as much as the model: another busy process, a
CPU frequency governor that scales the clock with load, a second process on the GPU, a
laptop on battery or throttled by heat all shift latencies, and some of them only now
and then, which looks like a budget effect. :func:`machine_state` looks at what can be
seen from user space without privileges; every run records it in ``meta.json``
(``hygiene``, with the full ``torch.utils.collect_env`` report under ``collect_env``),
and ``regimes collect`` prints its warnings before it starts measuring.

Each probe is guarded: a source that does not exist here (``os.getloadavg`` on
Windows, ``/sys`` outside Linux, ``nvidia-smi`` without an NVIDIA driver, ``pmset``
outside macOS) gives ``None``, never an error.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

__all__ = ["BUSY_CPU_PERCENT", "collect_env_text", "hygiene_warnings", "machine_state"]

BUSY_CPU_PERCENT = 10.0
"""A process using at least this share of one CPU during the sample counts as busy."""

_MAX_LOAD_PER_CPU = 0.5
"""A 1-minute load average above this many runnable tasks per CPU (and above 1) is
not quiet: the sweep's own process will have to share a CPU."""


def _load_average() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except (AttributeError, OSError):  # Windows has no load average
        return None


def _busy_processes(sample_s: float, processes: Iterable[Any] | None = None) -> list[dict]:
    """Other processes using at least :data:`BUSY_CPU_PERCENT` of a CPU over ``sample_s``."""
    procs = list(psutil.process_iter(["name"]) if processes is None else processes)
    for proc in procs:
        try:
            proc.cpu_percent(None)  # the first call starts the process's sample
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    time.sleep(sample_s)
    mine = {os.getpid(), os.getppid()}
    busy = []
    for proc in procs:
        try:
            share = float(proc.cpu_percent(None))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if proc.pid not in mine and share >= BUSY_CPU_PERCENT:
            name = (getattr(proc, "info", None) or {}).get("name") or "?"
            busy.append({"pid": proc.pid, "name": name, "cpu_percent": round(share, 1)})
    return sorted(busy, key=lambda p: -p["cpu_percent"])[:10]


def _cpu_governors(root: Path) -> dict[str, str] | None:
    """``scaling_governor`` of every CPU under a sysfs ``cpu`` directory (Linux)."""
    found = {}
    for path in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            found[path.parent.parent.name] = path.read_text().strip()
        except OSError:
            continue
    return found or None


def _run(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _gpu_processes() -> list[dict] | None:
    """List processes holding an NVIDIA GPU (``nvidia-smi``); ``None`` where it is absent."""
    query = "--query-compute-apps=pid,process_name,used_memory"
    out = _run(["nvidia-smi", query, "--format=csv,noheader,nounits"])
    if out is None:
        return None
    apps = []
    for line in out.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            memory = int(fields[2]) if fields[2].isdigit() else None
            apps.append({"pid": int(fields[0]), "name": fields[1], "used_memory_mib": memory})
    return apps


def _macos_power() -> tuple[str | None, dict[str, Any] | None]:
    """Power source (``pmset -g batt``) and thermal limits (``pmset -g therm``) on macOS."""
    if platform.system() != "Darwin":
        return None, None
    batt = _run(["pmset", "-g", "batt"])
    match = re.search(r"drawing from '([^']+)'", batt or "")
    therm = _run(["pmset", "-g", "therm"])
    thermal: dict[str, Any] | None = None
    if therm is not None:
        limits = re.findall(r"^\s*(\w+)\s*=\s*(\d+)\s*$", therm, flags=re.M)
        thermal = {key: int(value) for key, value in limits}
        # The lines that are not "key = number" ("No thermal warning level has been
        # recorded", a warning level) are kept as said.
        thermal["text"] = therm.strip()
    return (match.group(1) if match else None), thermal


@functools.cache
def collect_env_text() -> str | None:
    """Return PyTorch's own environment report (``python -m torch.utils.collect_env``).

    Computed once per process (it runs a few commands); ``None`` if it fails.
    """
    try:
        from torch.utils import collect_env

        return str(collect_env.get_pretty_env_info())
    except Exception:  # a report about the environment must never stop a sweep
        return None


def hygiene_warnings(state: dict[str, Any]) -> list[str]:
    """Say, one line each, what in ``state`` makes the machine not quiet.

    Parameters
    ----------
    state : dict
        As returned by :func:`machine_state`.

    Returns
    -------
    list of str
        Empty when nothing was seen that would disturb a measurement.

    Examples
    --------
    >>> hygiene_warnings({"load_average": [6.0, 5.0, 4.0], "cpu_count": 4})
    ['load average 6.0 over 4 CPU(s) in the last minute: other work competes for the CPU']
    >>> hygiene_warnings({"cpu_governors": {"cpu0": "performance"}, "power_source": "AC Power"})
    []
    """
    found = []
    load, cpus = state.get("load_average"), state.get("cpu_count") or 1
    if load is not None and load[0] > max(1.0, _MAX_LOAD_PER_CPU * cpus):
        found.append(
            f"load average {load[0]:.1f} over {cpus} CPU(s) in the last minute: "
            "other work competes for the CPU"
        )
    busy = state.get("busy_processes") or []
    if busy:
        names = ", ".join(
            f"{p['name']} (pid {p['pid']}, {p['cpu_percent']:.0f}%)" for p in busy[:3]
        )
        found.append(f"{len(busy)} other busy process(es): {names}")
    governors = state.get("cpu_governors") or {}
    scaling = sorted({g for g in governors.values() if g != "performance"})
    if scaling:
        found.append(
            f"CPU frequency governor {'/'.join(scaling)} on "
            f"{sum(g != 'performance' for g in governors.values())} of {len(governors)} CPU(s): "
            "the clock follows the load (steady: cpupower frequency-set -g performance)"
        )
    gpu = [p for p in state.get("gpu_processes") or [] if p["pid"] != os.getpid()]
    if gpu:
        names = ", ".join(f"{p['name']} (pid {p['pid']})" for p in gpu[:3])
        found.append(f"{len(gpu)} other process(es) on the GPU: {names}")
    found.extend(_macos_warnings(state))
    return found


def _macos_warnings(state: dict[str, Any]) -> list[str]:
    found = []
    if state.get("power_source") not in (None, "AC Power"):
        found.append(f"running on {state['power_source']}: macOS may lower clocks; plug in")
    limit = (state.get("thermal") or {}).get("CPU_Speed_Limit")
    if limit is not None and limit < 100:
        found.append(f"thermal throttling: CPU speed limited to {limit}%")
    return found


def machine_state(
    *, sample_s: float = 0.2, sysfs_cpu: str | os.PathLike[str] = "/sys/devices/system/cpu"
) -> dict[str, Any]:
    """Look at how quiet this machine is now, as a JSON-serialisable dict.

    Parameters
    ----------
    sample_s : float, default 0.2
        How long to watch other processes' CPU use.
    sysfs_cpu : str or os.PathLike, default "/sys/devices/system/cpu"
        Where Linux lists CPUs and their frequency governors.

    Returns
    -------
    dict
        ``load_average`` (1, 5 and 15 minutes), ``cpu_count``, ``busy_processes``
        (other processes above :data:`BUSY_CPU_PERCENT`, busiest first),
        ``cpu_governors`` (CPU to governor, Linux), ``gpu_processes`` (processes on an
        NVIDIA GPU, from ``nvidia-smi``), ``power_source`` and ``thermal`` (macOS,
        from ``pmset``), each ``None`` where it cannot be known here, and ``warnings``
        (:func:`hygiene_warnings`).

    See Also
    --------
    collect_env_text : PyTorch's environment report, recorded beside it.

    Examples
    --------
    >>> state = machine_state(sample_s=0.01)
    >>> sorted(state)[:3], isinstance(state["warnings"], list)
    (['busy_processes', 'cpu_count', 'cpu_governors'], True)
    """
    load = _load_average()
    power_source, thermal = _macos_power()
    state: dict[str, Any] = {
        "load_average": list(load) if load is not None else None,
        "cpu_count": os.cpu_count(),
        "busy_processes": _busy_processes(sample_s),
        "cpu_governors": _cpu_governors(Path(sysfs_cpu)),
        "gpu_processes": _gpu_processes(),
        "power_source": power_source,
        "thermal": thermal,
    }
    state["warnings"] = hygiene_warnings(state)
    return state
