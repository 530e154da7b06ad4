"""regimes: find where decode latency leaves its smooth trend, with statistical rigour.

The statistics core. It never imports torch; measurement lives in :mod:`collectors`.

Public names are imported lazily (PEP 562): ``import regimes`` pulls in only polars and
pyarrow, so the collectors, which write runs through :mod:`regimes.io`, stay light on a
measurement machine where scipy, statsmodels, ruptures or altair may be missing.
To add a public name, add it to ``_LAZY`` (name -> submodule).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .io import Run, RunWriter, load, read_run, save
from .schema import CASE_COLUMNS, TRIAL_SCHEMA, RegimesInputError, RegimesWarning, validate_trials

try:
    __version__ = version("regimes")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

_LAZY: dict[str, str] = {
    "BackendComparison": "backends_compare",
    "compare_backends": "backends_compare",
    "BoundaryAlignment": "alignment",
    "align_boundaries": "alignment",
    "PhaseAttribution": "phases",
    "attribute_phases": "phases",
    "MemoryConfound": "confound",
    "memory_confound": "confound",
    "RegimeReport": "detect",
    "detect_regimes": "detect",
    "SpeedupResult": "speedup",
    "cache_speedup": "speedup",
    "published_gpt2_medium": "simulate",
    "simulate_sweep": "simulate",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .alignment import BoundaryAlignment, align_boundaries
    from .backends_compare import BackendComparison, compare_backends
    from .confound import MemoryConfound, memory_confound
    from .detect import RegimeReport, detect_regimes
    from .phases import PhaseAttribution, attribute_phases
    from .simulate import published_gpt2_medium, simulate_sweep
    from .speedup import SpeedupResult, cache_speedup


_SUBMODULES = ("plot", "report", "simulate")
"""Submodules reachable as attributes (``regimes.plot.latency_chart``) without an import."""


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'regimes' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


__all__ = [
    "CASE_COLUMNS",
    "RegimesInputError",
    "RegimesWarning",
    "Run",
    "RunWriter",
    "TRIAL_SCHEMA",
    "__version__",
    "load",
    "read_run",
    "save",
    "validate_trials",
    *_LAZY,
]
