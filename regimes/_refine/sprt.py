r"""Deciding one probe budget: Wald's sequential probability ratio test between two levels.

A probe at budget ``b`` asks one question: is the level there the one of the boundary's
left side (``mu_left(b)``: the normal trend for an onset) or of its right side
(``mu_right(b)``: the anomalous level for an onset)? On the log scale of latency the
probe's trials are modelled as

.. math::

    y_{ij} = \mu_h + c + s_i + e_{ij}, \quad c \sim N(0, \tau^2),\;
    s_i \sim N(0, \sigma_s^2),\; e_{ij} \sim N(0, \sigma_w^2),

with a cell effect ``c`` (the curve's wobble around its smooth trend, shared by every
trial at the budget), a session effect ``s_i`` (every batch of a probe runs in a fresh
process) and trial noise ``e``. The probe's level is the median of its ``n`` log trials
from ``k`` sessions, with variance

.. math::  v(n, k) = \tau^2 + \sigma_s^2 / k + \kappa(n)\,\sigma_w^2 / n,

:math:`\kappa(n)` the variance factor of a median (robust to a hiccup among three
trials). Given the variances, the log-likelihood ratio of everything measured at the
probe is that of its level,

.. math::  \Lambda = \frac{(\mu_R - \mu_L)\,(\ell - (\mu_L + \mu_R)/2)}{v(n, k)},

and the probe is decided *right* when :math:`\Lambda \ge \log((1-\beta)/\alpha)`,
*left* when :math:`\Lambda \le \log(\beta/(1-\alpha))`, and measured again (a new
batch in a fresh session) otherwise, up to a cap on its trials; a probe still between
the thresholds at the cap is *undecided*. Wald's bounds keep the two error rates near
``alpha`` and ``beta`` (both ``error_rate``). Because ``tau`` does not shrink with more
trials, a probe whose step is small against the wobble can never be decided; such a
boundary is reported as not refinable instead of probed in vain.

A speedup probe (cache off over cache on) is the difference of two curves' levels; its
variance is the sum of theirs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from regimes._stats.levels import VARIANCE_FLOOR, median_variance_factor

__all__ = [
    "LEFT",
    "RIGHT",
    "Noise",
    "Thresholds",
    "decide",
    "log_likelihood_ratio",
    "planned_trials",
    "probe_variance",
    "separable",
]

LEFT = "left"
RIGHT = "right"


@dataclass(frozen=True)
class Noise:
    """Noise scales of one curve on the log scale (standard deviations)."""

    sigma_w: float
    """Trial noise within a session."""
    sigma_s: float
    """Between fresh sessions (processes) at one budget."""
    tau: float
    """Cell-to-cell wobble of the curve around its smooth trend."""

    def level_variance(self, n: int, k: int) -> float:
        """Variance of the median of ``n`` log trials from ``k`` sessions at one budget."""
        kappa = float(median_variance_factor(np.asarray([max(n, 1)]))[0])
        return self.tau**2 + self.sigma_s**2 / max(k, 1) + kappa * self.sigma_w**2 / max(n, 1)


@dataclass(frozen=True)
class Thresholds:
    """Wald's decision thresholds on the log-likelihood ratio."""

    lower: float
    upper: float

    @classmethod
    def from_error_rate(cls, error_rate: float) -> Thresholds:
        """Thresholds for error rates ``alpha = beta = error_rate`` (Wald 1945, eq. 3.31)."""
        return cls(
            lower=math.log(error_rate / (1.0 - error_rate)),
            upper=math.log((1.0 - error_rate) / error_rate),
        )


def log_likelihood_ratio(level: float, variance: float, mu_left: float, mu_right: float) -> float:
    """Log-likelihood ratio of the right level over the left one, given the probe's level.

    The variance is floored at :data:`regimes._stats.levels.VARIANCE_FLOOR` (timers
    round; identical trials must not make a probe infinitely certain).
    """
    spread = max(variance, VARIANCE_FLOOR)
    return (mu_right - mu_left) * (level - 0.5 * (mu_left + mu_right)) / spread


def decide(llr: float, thresholds: Thresholds) -> str | None:
    """``"right"``, ``"left"`` or None (keep measuring) for a log-likelihood ratio."""
    if llr >= thresholds.upper:
        return RIGHT
    if llr <= thresholds.lower:
        return LEFT
    return None


def probe_variance(noises: Sequence[Noise], n: Sequence[int], k: Sequence[int]) -> float:
    """Variance of a probe's statistic: the sum over the curves it combines."""
    return float(sum(noise.level_variance(a, b) for noise, a, b in zip(noises, n, k, strict=True)))


def planned_trials(
    step: float,
    noises: Sequence[Noise],
    have: int,
    sessions: int,
    thresholds: Thresholds,
    min_trials: int,
    cap: int,
    extra: float = 0.0,
) -> int:
    """Trials the next batch of a probe needs (per curve), 0 when the cap is reached.

    The smallest batch after which a level at the hypothesised value would carry the
    log-likelihood ratio to twice the larger threshold (a margin for the noise of the
    level itself); failing that, to the threshold; failing that (more trials in one
    session cannot get there, more sessions may), ``min_trials``. ``extra`` is variance
    that trials do not reduce (the levels' own). At least ``min_trials`` (fewer when the
    cap leaves fewer), at most what the cap leaves.
    """
    room = cap - have
    if room <= 0:
        return 0
    bound = max(thresholds.upper, -thresholds.lower)
    k = [sessions + 1] * len(noises)
    reach = [
        step**2 / (2.0 * (probe_variance(noises, [have + b] * len(noises), k) + extra))
        for b in range(1, room + 1)
    ]
    smallest = min(min_trials, room)
    for target in (2.0 * bound, bound):
        for batch in range(smallest, room + 1):
            if reach[batch - 1] >= target:
                return batch
    return smallest


def separable(
    step: float,
    noises: Sequence[Noise],
    thresholds: Thresholds,
    min_trials: int,
    cap: int,
    extra: float = 0.0,
) -> bool:
    """Whether a probe at the hypothesised level could reach a threshold within the cap."""
    sessions = max(1, cap // max(min_trials, 1))
    variance = probe_variance(noises, [cap] * len(noises), [sessions] * len(noises)) + extra
    return step**2 / (2.0 * variance) >= max(thresholds.upper, -thresholds.lower)
