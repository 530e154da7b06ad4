"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The model and its stages are described in ``docs/method.md``: trial-level terms
(:mod:`regimes.detect._trials`), the regime model of each curve, tested after selection
and resampled (:mod:`regimes.detect._model`), the tables
(:mod:`regimes.detect._tables`) and the result (:mod:`regimes.detect._result`).
"""

from typing import Any

from regimes._deprecation import renamed
from regimes.detect._pipeline import DIRECTIONS, FDR_FAMILIES, MIN_CELLS, detect_regimes
from regimes.detect._result import RegimeResult

__all__ = [
    "DIRECTIONS",
    "FDR_FAMILIES",
    "MIN_CELLS",
    "RegimeResult",
    "detect_regimes",
]

_RENAMED = {"RegimeReport": "RegimeResult"}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""


def __getattr__(name: str) -> Any:
    return renamed(__name__, _RENAMED, name)
