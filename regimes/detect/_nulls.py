r"""P-values after selection, from the largest statistics of a curve's null draws.

Every null draw of a curve is fitted as the data are; per draw and per width class of
its selected regimes (:func:`regimes.detect._regimes.width_class`), the largest TREAT
``z`` is kept. A regime is compared with the draws of its own class, and its p-value
multiplied by the number of classes the grid holds (docs/method.md, section 4).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from regimes.detect._regimes import WIDTH_CLASSES

__all__ = ["STAGES", "class_maxima", "class_p", "settled", "stages", "t_sf", "threshold"]

_EXACT_COUNT = 10
"""Draws at least as extreme below which a p-value comes from the fitted tail."""

STAGES = (20, 50)
"""Null draws a curve is tested on before all ``n_boot`` (:func:`stages`)."""

_SETTLED_BELOW = 0.01
"""Share of ``alpha`` under which a p-value of any stage is settled."""

_SETTLED_ABOVE = 0.5
"""P-value at or above which one of a stage of :data:`_ABOVE_FROM` draws or more is settled.

On a grid of three width classes it is a count of at least 8 in 50 draws (more on one
of fewer), where a p-value significant after Bonferroni (under ``alpha / 3`` per class)
expects under 1: a chance of 1.7e-6 at ``alpha`` 0.05.
"""

_ABOVE_FROM = 50
"""Fewest draws that settle a p-value above :data:`_SETTLED_ABOVE`: in 20 draws it is a
count of 3, which a p-value significant after Bonferroni reaches with a chance of 4e-3."""


def class_maxima(z: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Per row, the largest of ``z`` ``(rows, K)`` in each width class ``(rows, C)``."""
    return np.stack(
        [
            np.where(classes == c, z, -np.inf).max(axis=1, initial=-np.inf)
            for c in range(WIDTH_CLASSES)
        ],
        axis=1,
    )


def t_sf(z: float, df: float) -> float:
    """``scipy.stats.t.sf(z, df)``, to the bit, without its checks' cost on one value."""
    # what scipy.stats.t.sf computes for df > 0 (every df here holds the prior's 4)
    return float(special.stdtr(df, -z))


def _tail_p(value: float, maxima: np.ndarray) -> float:
    """P(max >= value) from the draws' maxima, their Gumbel tail where draws run out.

    With fewer than :data:`_EXACT_COUNT` draws at least as extreme, the finite maxima are
    fitted by a Gumbel law (by moments: the law of a maximum) and its tail, times the
    share of draws that selected anything, is used; never more than the count allows.
    """
    finite = maxima[np.isfinite(maxima)]
    b = maxima.size
    count = int(np.sum(finite >= value))
    exact = (count + 1) / (b + 1)
    if count >= _EXACT_COUNT or finite.size < 10:
        return min(1.0, exact)
    beta = max(float(np.std(finite)) * np.sqrt(6.0) / np.pi, 1e-9)
    mu = float(np.mean(finite)) - 0.5772156649 * beta
    tail = -np.expm1(-np.exp(-(value - mu) / beta)) * finite.size / b
    return float(min(exact, max(tail, count / (b + 1), 1e-300)))


def class_p(value: float, maxima: np.ndarray, c: int, scanned: np.ndarray) -> float:
    """P(largest ``z`` of width class ``c`` >= value), from the draws' maxima ``(B, C)``.

    A class's largest ``z`` never exceeds a draw's largest over every class, so the
    tail of the latter bounds the class's from above, and the smaller of the class's
    own estimate and that bound is used. The bound matters where too few draws selected
    in the class for a tail fit of its own: the count alone then set a floor,
    3/(n_boot + 1) once multiplied by the classes, under regimes far beyond every draw
    (the published plateau 512..624 had p = 0.015). The class's own estimate keeps a
    regime below the single cells' largest ``z`` from being held to their bar.

    Beyond every draw's selected regimes, where the count leaves ``1/(B + 1)``, the
    tail of the class's largest ``z`` over every interval, selected or not
    (``scanned``, :mod:`regimes.detect._scan`), bounds it further: it exists in every
    draw, so its tail is fitted even where the draws select too rarely for their own.
    """
    overall = maxima.max(axis=1)
    p = min(_tail_p(value, maxima[:, c]), _tail_p(value, overall))
    if not np.any(overall >= value):
        p = min(p, _tail_p(value, scanned[:, c]))
    return p


def stages(n_boot: int) -> tuple[int, ...]:
    """Null draws a curve is tested on at each stage: :data:`STAGES` of up to half, then all."""
    return (*(size for size in STAGES if 2 * size <= n_boot), n_boot)


def settled(p_values: list[float], alpha: float, draws: int) -> bool:
    """Whether every p-value of a curve's stage of ``draws`` is far from ``alpha``, on either side.

    Under ``alpha`` times :data:`_SETTLED_BELOW` (more draws would move a tail fit's
    estimate, not the verdict), or, from :data:`_ABOVE_FROM` draws, at least
    :data:`_SETTLED_ABOVE` (a count; Besag and Clifford, 1991). Such a curve keeps the
    draws of its stage alone.
    """
    above = _SETTLED_ABOVE if draws >= _ABOVE_FROM else np.inf
    return all(p <= alpha * _SETTLED_BELOW or p >= above for p in p_values)


def threshold(maxima: np.ndarray, alpha: float) -> np.ndarray:
    """Per width class, the ``1 - alpha`` quantile of the null maxima (``-inf``: none)."""
    if not maxima.shape[0]:
        return np.full(WIDTH_CLASSES, -np.inf)
    return np.quantile(maxima, 1.0 - alpha, axis=0, method="higher")
