"""Multiple testing: Benjamini-Hochberg false discovery rate control, in one place.

Every analysis that reports "significant" findings controls the false discovery rate
over its family of tests with the step-up procedure of Benjamini and Hochberg (1995),
as implemented by :func:`statsmodels.stats.multitest.multipletests` (``fdr_bh``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["benjamini_hochberg"]


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Return the Benjamini-Hochberg q-values of ``p``; empty in, empty out.

    References
    ----------
    Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery rate: a
    practical and powerful approach to multiple testing. *Journal of the Royal
    Statistical Society B* 57, 289-300.
    """
    p = np.asarray(p, dtype=float)
    if p.size == 0:
        return p
    from statsmodels.stats.multitest import multipletests

    return multipletests(p, method="fdr_bh")[1]
