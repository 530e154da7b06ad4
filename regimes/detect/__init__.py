"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The model and its stages are described in ``docs/method.md``; :mod:`regimes.detect._pipeline`
runs them, :mod:`regimes.detect._result` holds the result.
"""

from regimes.detect._pipeline import CAVEATS, FDR_FAMILIES, MIN_CELLS, detect_regimes
from regimes.detect._result import RegimeReport, RegimeResult

__all__ = ["CAVEATS", "FDR_FAMILIES", "MIN_CELLS", "RegimeReport", "RegimeResult", "detect_regimes"]
