"""Backends: where a generation runs, and how to time and observe it there.

A latency measurement on an accelerator is only meaningful between two device
synchronisations: kernels are queued asynchronously, so ``perf_counter`` alone measures
how fast the host can *enqueue* work, not how fast the device does it. Each backend
therefore knows how to

* synchronise the host with the device (``cpu``: nothing to wait for; ``cuda``:
  :func:`torch.cuda.synchronize`; ``mps``: :func:`torch.mps.synchronize`),
* read the allocator's memory counters (``mem_allocated_bytes`` = bytes held by live
  tensors, ``mem_driver_bytes`` = bytes the allocator holds from the driver, i.e. the
  cache included; ``None`` on the CPU, where PyTorch keeps no such counters — see
  :func:`rss_bytes` for the process as a whole),
* name the device (GPU or chip name), and say in a sentence why it is unavailable.

Backends only wrap PyTorch's documented public API; they keep no state besides a
per-dtype support cache, so creating one is cheap and never touches the device.
"""

from __future__ import annotations

import os
import platform
import subprocess

import psutil
import torch

from ._dtypes import torch_dtype

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "MpsBackend",
    "available_backends",
    "cpu_name",
    "get_backend",
    "rss_bytes",
    "sysctl_value",
]

BACKEND_NAMES: tuple[str, ...] = ("cpu", "cuda", "mps")

MEMORY_KEYS: tuple[str, str] = ("mem_allocated_bytes", "mem_driver_bytes")


def sysctl_value(key: str) -> str | None:
    """``sysctl -n KEY`` on macOS; ``None`` where sysctl is missing or says nothing."""
    try:
        result = subprocess.run(
            ["sysctl", "-n", key], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = result.stdout.strip()
    return value if result.returncode == 0 and value else None


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """Return the CPU model: ``/proc/cpuinfo`` "model name" on Linux, sysctl on macOS.

    Falls back to :func:`platform.processor` and then :func:`platform.machine`, which on
    Linux often say no more than ``x86_64``.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        brand = sysctl_value("machdep.cpu.brand_string")
        if brand:
            return brand
    return platform.processor() or platform.machine() or "unknown CPU"


def rss_bytes() -> int:
    """Resident set size of this process in bytes (psutil)."""
    return int(psutil.Process(os.getpid()).memory_info().rss)


class Backend:
    """A device PyTorch can run on, seen through what a latency measurement needs.

    Subclasses implement the device-specific calls; this base class supplies the
    dtype probe and a readable ``repr``. Creating a backend never touches the device.

    Attributes
    ----------
    name : str
        The backend's name in the trial table: ``cpu``, ``cuda`` or ``mps``.

    See Also
    --------
    get_backend : a backend by name.
    available_backends : the backends this process can run on.

    Examples
    --------
    >>> backend = get_backend("cpu")
    >>> backend.is_available(), backend.torch_device
    (True, device(type='cpu'))
    >>> backend.memory()
    {'mem_allocated_bytes': None, 'mem_driver_bytes': None}
    """

    name: str = ""

    def __init__(self) -> None:
        self._dtype_support: dict[str, bool] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.torch_device)!r})"

    def is_available(self) -> bool:
        """Whether this PyTorch build can run on the device in this process."""
        raise NotImplementedError

    def unavailable_reason(self) -> str:
        """Say in a sentence why :meth:`is_available` is False (``""`` when it is True)."""
        raise NotImplementedError

    @property
    def torch_device(self) -> torch.device:
        """The :class:`torch.device` that models and inputs are moved to."""
        raise NotImplementedError

    def device_name(self) -> str:
        """Chip or GPU name, e.g. ``NVIDIA H200`` or ``Apple M3 Max``."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block the host until every queued kernel on the device has finished."""
        raise NotImplementedError

    def memory(self) -> dict[str, int | None]:
        """Allocator counters: ``mem_allocated_bytes`` and ``mem_driver_bytes``."""
        raise NotImplementedError

    def empty_cache(self) -> None:
        """Return the allocator's cached, unused blocks to the driver."""
        raise NotImplementedError

    def supports_dtype(self, dtype: str) -> bool:
        """Whether a matrix product in ``dtype`` runs on this device.

        Support depends on the device, the driver and the OS (bfloat16 on MPS needs
        macOS 14, on CUDA compute capability 8.0), so rather than keep a table that goes
        stale, PyTorch is asked: a small matmul is run once per dtype and the answer
        cached. An unavailable backend supports nothing.

        Parameters
        ----------
        dtype : str
            ``float32``, ``float16`` or ``bfloat16``.

        Returns
        -------
        bool
            Whether the probe ran.

        Raises
        ------
        ValueError
            For an unknown dtype name.

        Examples
        --------
        >>> get_backend("cpu").supports_dtype("float32")
        True
        """
        target = torch_dtype(dtype)
        if dtype not in self._dtype_support:
            self._dtype_support[dtype] = self.is_available() and self._probe_dtype(target)
        return self._dtype_support[dtype]

    def _probe_dtype(self, dtype: torch.dtype) -> bool:
        try:
            a = torch.ones((4, 4), dtype=dtype, device=self.torch_device)
            (a @ a).sum().item()
        except (RuntimeError, TypeError, NotImplementedError):
            return False
        return True


class CpuBackend(Backend):
    """The host CPU. Always available; execution is synchronous, memory counters absent.

    See :func:`rss_bytes` for the memory of the process as a whole.
    """

    name = "cpu"

    def is_available(self) -> bool:
        """Return True: the CPU is always there."""
        return True

    def unavailable_reason(self) -> str:
        """Return ``""`` (the CPU is always available)."""
        return ""

    @property
    def torch_device(self) -> torch.device:
        """``torch.device("cpu")``."""
        return torch.device("cpu")

    def device_name(self) -> str:
        """Return the CPU model (:func:`cpu_name`)."""
        return cpu_name()

    def synchronize(self) -> None:
        """Do nothing: CPU kernels run synchronously on the calling thread."""
        return None

    def memory(self) -> dict[str, int | None]:
        """Both counters ``None``: PyTorch keeps no allocator counters on the CPU."""
        return dict.fromkeys(MEMORY_KEYS)

    def empty_cache(self) -> None:
        """Do nothing: the CPU allocator keeps no cache to return."""
        return None


class CudaBackend(Backend):
    """An NVIDIA (or ROCm) GPU through :mod:`torch.cuda`.

    Parameters
    ----------
    index : int, default 0
        Which visible device (sweeps use device 0; pick a GPU with
        ``CUDA_VISIBLE_DEVICES``).

    Raises
    ------
    ValueError
        For a negative index.
    """

    name = "cuda"

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        if index < 0:
            raise ValueError(f"CUDA device index must be >= 0, got {index}")
        self.index = index

    def is_available(self) -> bool:
        """Whether CUDA works and device ``index`` exists."""
        return bool(torch.cuda.is_available()) and self.index < torch.cuda.device_count()

    def unavailable_reason(self) -> str:
        """Say why CUDA device ``index`` cannot be used (``""`` when it can)."""
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return "this torch build has no CUDA support (torch.version.cuda is None)"
        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False (no driver or no visible GPU)"
        count = torch.cuda.device_count()
        if self.index >= count:
            return f"CUDA device {self.index} requested but torch.cuda.device_count() is {count}"
        return ""

    @property
    def torch_device(self) -> torch.device:
        """``torch.device("cuda", index)``."""
        return torch.device("cuda", self.index)

    def device_name(self) -> str:
        """Return the GPU's name, e.g. ``NVIDIA H200``."""
        return str(torch.cuda.get_device_name(self.index))

    def synchronize(self) -> None:
        """Wait for every kernel queued on the device (:func:`torch.cuda.synchronize`)."""
        torch.cuda.synchronize(self.index)

    def memory(self) -> dict[str, int | None]:
        """``memory_allocated`` and ``memory_reserved`` of the device."""
        return {
            "mem_allocated_bytes": int(torch.cuda.memory_allocated(self.index)),
            "mem_driver_bytes": int(torch.cuda.memory_reserved(self.index)),
        }

    def empty_cache(self) -> None:
        """Return cached blocks to the driver (:func:`torch.cuda.empty_cache`)."""
        torch.cuda.empty_cache()

    def supports_dtype(self, dtype: str) -> bool:
        """Whether ``dtype`` runs on the GPU (bfloat16 needs native support)."""
        # is_bf16_supported() knows the compute-capability rule (emulated bf16 on older
        # GPUs runs, but far slower, so it must not count as supported).
        if dtype == "bfloat16" and self.is_available():
            with torch.cuda.device(self.index):
                if not torch.cuda.is_bf16_supported():
                    return False
        return super().supports_dtype(dtype)


class MpsBackend(Backend):
    """Apple silicon GPUs through Metal Performance Shaders (:mod:`torch.mps`).

    The device name is the chip's (``Apple M3 Max``): on Apple silicon the CPU brand
    string names the whole chip, and :mod:`torch.mps` has no device-name query.
    """

    name = "mps"

    def is_available(self) -> bool:
        """Whether MPS works in this process (:func:`torch.backends.mps.is_available`)."""
        return bool(torch.backends.mps.is_available())

    def unavailable_reason(self) -> str:
        """Say whether the build or the machine lacks MPS (``""`` when it works)."""
        if not torch.backends.mps.is_built():
            return "this torch build has no MPS support (torch.backends.mps.is_built() is False)"
        if not torch.backends.mps.is_available():
            return (
                "torch.backends.mps.is_available() is False "
                "(MPS needs macOS 12.3 or later on Apple silicon or an AMD GPU)"
            )
        return ""

    @property
    def torch_device(self) -> torch.device:
        """``torch.device("mps")``."""
        return torch.device("mps")

    def device_name(self) -> str:
        """Return the chip's name, e.g. ``Apple M3 Max``."""
        # On Apple silicon the CPU brand string names the whole chip ("Apple M3 Max"),
        # which is also the GPU; torch.mps offers no device-name query.
        return (
            sysctl_value("machdep.cpu.brand_string") or platform.processor() or "Apple MPS device"
        )

    def synchronize(self) -> None:
        """Wait for every queued Metal command (:func:`torch.mps.synchronize`)."""
        torch.mps.synchronize()

    def memory(self) -> dict[str, int | None]:
        """``current_allocated_memory`` and ``driver_allocated_memory``."""
        return {
            "mem_allocated_bytes": int(torch.mps.current_allocated_memory()),
            "mem_driver_bytes": int(torch.mps.driver_allocated_memory()),
        }

    def empty_cache(self) -> None:
        """Return cached blocks to Metal (:func:`torch.mps.empty_cache`)."""
        torch.mps.empty_cache()


def get_backend(name: str) -> Backend:
    """Return the backend called ``name``: ``cpu``, ``cuda`` (or ``cuda:N``) or ``mps``.

    The backend is returned even when unavailable, so that callers can report
    :meth:`Backend.unavailable_reason`.

    Parameters
    ----------
    name : str
        ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (case and surrounding space ignored).

    Returns
    -------
    Backend
        A :class:`CpuBackend`, :class:`CudaBackend` or :class:`MpsBackend`.

    Raises
    ------
    ValueError
        For any other name.

    Examples
    --------
    >>> get_backend("cuda:1")
    CudaBackend(device='cuda:1')
    >>> get_backend("gpu")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'gpu'; valid names are cpu, cuda, mps (or cuda:N)
    """
    if not isinstance(name, str):
        raise ValueError(f"backend name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key == "cpu":
        return CpuBackend()
    if key == "mps":
        return MpsBackend()
    if key == "cuda":
        return CudaBackend()
    if key.startswith("cuda:") and key[5:].isdigit():
        return CudaBackend(int(key[5:]))
    raise ValueError(
        f"unknown backend {name!r}; valid names are {', '.join(BACKEND_NAMES)} (or cuda:N)"
    )


def available_backends() -> tuple[str, ...]:
    """Names of the backends this process can run on, in :data:`BACKEND_NAMES` order."""
    return tuple(name for name in BACKEND_NAMES if get_backend(name).is_available())
