"""Environment metadata stored with every run.

Latency anomalies of the kind this project looks for depend on the software stack as
much as on the chip (an MPSGraph kernel choice, a driver version, an allocator
watermark), so a run records where it was measured: OS and hardware, Python, torch and
transformers versions, the device names and the driver/toolkit versions of the backends
used, and the environment variables known to change PyTorch's behaviour. Everything is
JSON-serialisable; a value that cannot be determined is ``None`` rather than an error,
because failing a sweep over a missing ``nvidia-smi`` would be worse than not knowing.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import psutil
import torch
import transformers

from ._attention import enabled_sdpa_backends
from .backends import cpu_name, get_backend, sysctl_value
from .spec import SDPA_BACKENDS

__all__ = ["ENV_VARS", "environment_metadata"]

ENV_VARS: tuple[str, ...] = (
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "PYTORCH_MPS_LOW_WATERMARK_RATIO",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
"""Environment variables that change how PyTorch runs; recorded as set (or ``None``)."""


def _regimes_version() -> str | None:
    try:
        from regimes import __version__
    except ImportError:  # pragma: no cover - the two packages ship together
        return None
    return __version__


def _nvidia_driver_version() -> str | None:
    # torch exposes the CUDA runtime it was built with, not the installed driver.
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def _cuda_details() -> dict[str, Any]:
    count = torch.cuda.device_count()
    return {
        "cuda_runtime": torch.version.cuda,
        "hip_runtime": getattr(torch.version, "hip", None),
        "driver": _nvidia_driver_version(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cudnn_enabled": bool(torch.backends.cudnn.enabled),
        # Which attention kernels SDPA may pick decides what a decode step costs (the
        # cuDNN one builds a plan per new KV length); a spec's sdpa_backends narrows
        # these per generation, and each trial records what was in effect.
        "sdpa_backends_enabled": {name: name in enabled_sdpa_backends() for name in SDPA_BACKENDS},
        "device_count": count,
        "devices": [
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                "total_memory_bytes": int(torch.cuda.get_device_properties(index).total_memory),
            }
            for index in range(count)
        ],
    }


def _mps_details() -> dict[str, Any]:
    return {
        "macos": platform.mac_ver()[0] or None,
        "chip": sysctl_value("machdep.cpu.brand_string"),
        "mps_built": bool(torch.backends.mps.is_built()),
    }


def _backend_entry(name: str) -> dict[str, Any]:
    backend = get_backend(name)
    entry: dict[str, Any] = {"available": backend.is_available()}
    if entry["available"]:
        entry["device"] = backend.device_name()
        if backend.name == "cuda":
            entry.update(_cuda_details())
        elif backend.name == "mps":
            entry.update(_mps_details())
    else:
        entry["reason"] = backend.unavailable_reason()
    return entry


def environment_metadata(backends: Iterable[str] = ()) -> dict[str, Any]:
    """Describe where and with what a run is measured, as a JSON-serialisable dict.

    A value that cannot be determined is ``None`` rather than an error.

    Parameters
    ----------
    backends : iterable of str, default ()
        Backend names whose devices to describe.

    Returns
    -------
    dict
        Top-level keys ``os``, ``os_release``, ``os_version``, ``platform``,
        ``machine``, ``python``, ``torch``, ``transformers``, ``regimes``, ``cpu``,
        ``cpu_count``, ``memory_bytes``, ``hostname``, ``timestamp_utc`` (ISO 8601),
        ``torch_threads``, ``torch_interop_threads``, ``env`` (:data:`ENV_VARS` to
        their values or ``None``) and ``backends``: for each requested backend its
        availability and either its device name plus details (CUDA: runtime, driver,
        cuDNN version and whether cuDNN is enabled, the SDPA kernels enabled
        (``sdpa_backends_enabled``), devices; MPS: macOS version, chip) or the reason
        it is unavailable.

    Raises
    ------
    ValueError
        For an unknown backend name.

    Examples
    --------
    >>> meta = environment_metadata(["cpu"])
    >>> meta["backends"]["cpu"]["available"], meta["env"]["CUDA_VISIBLE_DEVICES"] is None
    (True, True)
    """
    requested = list(dict.fromkeys(backends))
    return {
        "os": platform.system(),
        "os_release": platform.release(),
        "os_version": platform.version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "regimes": _regimes_version(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "hostname": socket.gethostname(),
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
        "backends": {name: _backend_entry(name) for name in requested},
    }
