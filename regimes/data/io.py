"""Runs on disk: the public names of :mod:`regimes.data.runs`, under their first path.

A run is a directory of parquet parts written atomically (temp file + rename) and
verified against a checksum on load; :mod:`regimes.data.runs` holds the code, one
module per concern (``parts``, ``scan``, ``read``, ``write``). This module is the import
path that the collectors, the command line and user code have always used
(``from regimes.data.io import RunWriter, read_run``); it re-exports and defines
nothing.
"""

from __future__ import annotations

from regimes.data.runs.parts import FORMAT_VERSION, REQUIRED_ON_DISK, OnDamaged, read_meta
from regimes.data.runs.read import Run, load, read_run
from regimes.data.runs.scan import scan
from regimes.data.runs.write import TRIAL_KEY, RunWriter, save, upgrade_run

__all__ = [
    "FORMAT_VERSION",
    "REQUIRED_ON_DISK",
    "TRIAL_KEY",
    "OnDamaged",
    "Run",
    "RunWriter",
    "load",
    "read_meta",
    "read_run",
    "save",
    "scan",
    "upgrade_run",
]
