"""regimes: find where decode latency leaves its smooth trend, with statistical rigour.

The statistics core. It never imports torch; measurement lives in :mod:`collectors`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .alignment import BoundaryAlignment, align_boundaries
from .confound import MemoryConfound, memory_confound
from .io import Run, RunWriter, load, read_run, save
from .schema import CASE_COLUMNS, TRIAL_SCHEMA, RegimesInputError, validate_trials

try:
    __version__ = version("regimes")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "BoundaryAlignment",
    "CASE_COLUMNS",
    "MemoryConfound",
    "Run",
    "RunWriter",
    "RegimesInputError",
    "TRIAL_SCHEMA",
    "__version__",
    "align_boundaries",
    "load",
    "memory_confound",
    "read_run",
    "save",
    "validate_trials",
]
