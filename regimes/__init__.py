"""regimes: find where decode latency leaves its smooth trend, with statistical rigour.

The statistics core. It never imports torch; measurement lives in :mod:`collectors`.

Layers, each a subpackage:

``regimes.data``
    the trial table's schema and validation, runs on disk, synthetic sweeps;
``regimes._stats``
    private numerics (bootstrap, cell levels, trends, segmentation, interval tests);
``regimes.detect``, ``regimes.speedup``
    the two primary analyses;
``regimes.explain``
    explanations of what was detected (phases, operators, memory, backends, alignment);
``regimes.options``, ``regimes.analysis``
    the detection options, declared once; every analysis of a run, computed once;
``regimes.viz``
    Altair charts and the offline HTML report, drawn from results (they run nothing);
``regimes.cli``
    the ``regimes`` command.

Public names are imported lazily (PEP 562): ``import regimes`` pulls in only polars and
pyarrow, so the collectors, which write runs through :mod:`regimes.data.io`, stay light
on a measurement machine where scipy, statsmodels, ruptures or altair may be missing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from regimes._deprecation import renamed
from regimes._version import project_version
from regimes.data.io import Run, RunWriter, load, read_run, save, scan
from regimes.data.schema import CASE_COLUMNS, TRIAL_SCHEMA, validate_trials
from regimes.errors import RegimesInputError, RegimesWarning

__version__ = project_version()
"""The running version (:func:`regimes._version.project_version`)."""

__all__ = [
    "CASE_COLUMNS",
    "TRIAL_SCHEMA",
    "AlignmentResult",
    "BackendResult",
    "ComparisonResult",
    "DetectionOptions",
    "HistoryResult",
    "MemoryResult",
    "OperatorResult",
    "PhaseResult",
    "RefineResult",
    "RegimeResult",
    "RegimesInputError",
    "RegimesWarning",
    "Run",
    "RunAnalysis",
    "RunWriter",
    "SpeedupResult",
    "__version__",
    "align_boundaries",
    "analyze",
    "attribute_operators",
    "attribute_phases",
    "cache_speedup",
    "compare_backends",
    "compare_runs",
    "detect_regimes",
    "history_effect",
    "load",
    "memory_confound",
    "published_gpt2_medium",
    "read_run",
    "refine_boundaries",
    "save",
    "scan",
    "simulate_sweep",
    "validate_trials",
]

_LAZY: dict[str, str] = {
    "RunAnalysis": "regimes.analysis",
    "analyze": "regimes.analysis",
    "DetectionOptions": "regimes.options",
    "BackendResult": "regimes.explain.backends",
    "compare_backends": "regimes.explain.backends",
    "AlignmentResult": "regimes.explain.alignment",
    "align_boundaries": "regimes.explain.alignment",
    "ComparisonResult": "regimes.compare",
    "compare_runs": "regimes.compare",
    "PhaseResult": "regimes.explain.phases",
    "attribute_phases": "regimes.explain.phases",
    "OperatorResult": "regimes.explain.operators",
    "attribute_operators": "regimes.explain.operators",
    "HistoryResult": "regimes.explain.history",
    "history_effect": "regimes.explain.history",
    "MemoryResult": "regimes.explain.memory",
    "memory_confound": "regimes.explain.memory",
    "RefineResult": "regimes.refine",
    "refine_boundaries": "regimes.refine",
    "RegimeResult": "regimes.detect",
    "detect_regimes": "regimes.detect",
    "SpeedupResult": "regimes.speedup",
    "cache_speedup": "regimes.speedup",
    "published_gpt2_medium": "regimes.data.simulate",
    "simulate_sweep": "regimes.data.simulate",
}
"""Where each lazily imported public name lives."""

_MODULES: dict[str, str] = {
    "plot": "regimes.viz.charts",
    "report": "regimes.viz.html",
    "simulate": "regimes.data.simulate",
}
"""Modules reachable as attributes (``regimes.plot.latency_chart``) without an import."""

_RENAMED: dict[str, str] = {
    "BackendComparison": "BackendResult",
    "BoundaryAlignment": "AlignmentResult",
    "MemoryConfound": "MemoryResult",
    "PhaseAttribution": "PhaseResult",
    "RegimeReport": "RegimeResult",
}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from regimes.analysis import RunAnalysis, analyze
    from regimes.compare import ComparisonResult, compare_runs
    from regimes.data.simulate import published_gpt2_medium, simulate_sweep
    from regimes.detect import RegimeResult, detect_regimes
    from regimes.explain.alignment import AlignmentResult, align_boundaries
    from regimes.explain.backends import BackendResult, compare_backends
    from regimes.explain.history import HistoryResult, history_effect
    from regimes.explain.memory import MemoryResult, memory_confound
    from regimes.explain.operators import OperatorResult, attribute_operators
    from regimes.explain.phases import PhaseResult, attribute_phases
    from regimes.options import DetectionOptions
    from regimes.refine import RefineResult, refine_boundaries
    from regimes.speedup import SpeedupResult, cache_speedup


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return import_module(_MODULES[name])
    if name in _RENAMED:
        return renamed(__name__, _RENAMED, name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'regimes' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_MODULES))
