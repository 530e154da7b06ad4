"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The model and its stages are described in ``docs/method.md``: trial-level terms
(:mod:`regimes.detect._trials`), the regime model of each curve, tested after selection
and resampled (:mod:`regimes.detect._model`), the tables
(:mod:`regimes.detect._tables`) and the result (:mod:`regimes.detect._result`).
"""

from regimes.detect._pipeline import DIRECTIONS, FDR_FAMILIES, MIN_CELLS, detect_regimes
from regimes.detect._result import RegimeReport, RegimeResult

__all__ = [
    "DIRECTIONS",
    "FDR_FAMILIES",
    "MIN_CELLS",
    "RegimeReport",
    "RegimeResult",
    "detect_regimes",
]
