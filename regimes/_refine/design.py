r"""One boundary's sequential design: its bracket, its probes and the next probe to measure.

The bracket is honest: it moves only on decided probes. With the left-side budgets
``L`` (the grid's ``low`` and every probe decided left) and the right-side ones ``R``,

.. math::  \text{low} = \max\{l \in L : l < \min R\}, \qquad
           \text{high} = \min\{r \in R : r > \max L\},

which is the plain bracket when the decisions are monotone and, when they are not (a
left decision above a right one: two crossings, or a wrong decision), the smallest
bracket that holds every crossing; the boundary is then reported inconsistent.

The next probe splits the remaining uncertainty. The boundary's position ``p`` (the
first budget on the right side) has, given the probes' log-likelihood ratios
:math:`\Lambda_m` (right over left), the posterior

.. math::  \log P(p \mid \text{data}) = \sum_{m \ge p} \Lambda_m + \text{const},
           \qquad \text{low} < p \le \text{high},

from a uniform prior: probabilistic bisection (Horstein 1963; Waeber, Frazier and
Henderson 2013). The next probe is the budget ``m`` whose ``P(p <= m)`` is closest to
one half. With decided probes only the posterior is uniform on the bracket and this is
plain bisection; an undecided probe's partial evidence moves the split away from it.
An unfinished probe (undecided, below the cap) is continued before a new one starts,
so a rerun after a crash resumes the probe it was measuring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from regimes._refine.brackets import Boundary
from regimes._refine.sprt import (
    LEFT,
    RIGHT,
    Noise,
    Thresholds,
    decide,
    log_likelihood_ratio,
    planned_trials,
    probe_variance,
    separable,
)
from regimes._stats.levels import median_variance_factor

__all__ = ["BoundaryState", "Evidence", "Probe"]


class Evidence:
    """Measured trials on the log scale, by curve and budget (what a probe can use).

    ``frame`` holds the group columns, ``budget``, ``_ly`` (log latency) and
    ``_session`` (the process a trial ran in).
    """

    def __init__(
        self,
        frame: pl.DataFrame,
        group_columns: list[str],
        noise: dict[tuple[Any, ...], Noise] | None = None,
    ):
        self.group_columns = group_columns
        self._cells: dict[tuple[tuple[Any, ...], int], tuple[np.ndarray, np.ndarray]] = {}
        self._noise = dict(noise or {})
        self._session_scale: dict[tuple[Any, ...], float] = {}
        self.add(frame)

    def add(self, frame: pl.DataFrame) -> None:
        """Add trials (e.g. a probe batch just measured)."""
        if frame.height == 0:
            return
        keys = [*self.group_columns, "budget"]
        for part in frame.partition_by(keys, maintain_order=True):
            first = part.row(0, named=True)
            cell = (tuple(first[c] for c in self.group_columns), int(first["budget"]))
            values = part.get_column("_ly").to_numpy()
            sessions = part.get_column("_session").cast(pl.String).to_numpy()
            old = self._cells.get(cell)
            if old is not None:
                values = np.concatenate([old[0], values])
                sessions = np.concatenate([old[1], sessions])
            self._cells[cell] = (values, sessions)
        self._session_scale.clear()

    def noise(self, curve: tuple[Any, ...]) -> Noise:
        """Return the curve's noise, with the between-session scale from the evidence.

        ``sigma_w`` and ``tau`` are the detection's; ``sigma_s`` is pooled from every
        cell of the curve measured in several sessions (the grid's and the probes'):
        the median of the cells' chi-square-scaled variances of session medians, less
        what trial noise explains (as :func:`regimes._stats.levels.cell_levels`
        pools it). Probes run later than the grid, in fresh processes: how much a
        process moves the level is measured on them, not assumed.
        """
        base = self._noise.get(curve, Noise(0.0, 0.0, 0.0))
        if curve not in self._session_scale:
            self._session_scale[curve] = self._between_sessions(curve, base.sigma_w)
        return replace(base, sigma_s=self._session_scale[curve])

    def _between_sessions(self, curve: tuple[Any, ...], sigma_w: float) -> float:
        scaled, sizes = [], []
        for (c, _), (values, sessions) in self._cells.items():
            ids = np.unique(sessions)
            if c != curve or ids.size < 2:
                continue
            parts = [values[sessions == i] for i in ids]
            df = ids.size - 1
            spread = float(np.var([np.median(p) for p in parts], ddof=1))
            scaled.append(spread * df / stats.chi2.median(df))
            sizes.append(float(np.median([p.size for p in parts])))
        if not scaled:
            return 0.0
        n = max(int(np.median(sizes)), 1)
        kappa = float(median_variance_factor(np.asarray([n]))[0])
        return math.sqrt(max(0.0, float(np.median(scaled)) - kappa * sigma_w**2 / n))

    def at(self, curve: tuple[Any, ...], budget: int) -> tuple[float, int, int]:
        """Median log value, trials and sessions at a budget (nan, 0, 0 when none)."""
        cell = self._cells.get((curve, budget))
        if cell is None:
            return float("nan"), 0, 0
        return float(np.median(cell[0])), int(cell[0].size), int(np.unique(cell[1]).size)

    def budgets(self, curve: tuple[Any, ...], low: int, high: int) -> list[int]:
        """Budgets of ``curve`` with trials strictly between ``low`` and ``high``."""
        return sorted(b for (c, b) in self._cells if c == curve and low < b < high)


@dataclass
class Probe:
    """A probe budget's evidence and decision."""

    budget: int
    n: int = 0
    sessions: int = 0
    level: float = float("nan")
    mu_left: float = float("nan")
    mu_right: float = float("nan")
    llr: float = 0.0
    decision: str | None = None
    misfit: str | None = None
    exhausted: bool = False
    on_disk: bool = False
    batches: int = 0


@dataclass
class BoundaryState:
    """A boundary being refined: its probes, its honest bracket, its spending."""

    boundary: Boundary
    thresholds: Thresholds
    min_trials: int
    max_trials: int
    resolution: int
    min_sessions: int = 1
    probes: dict[int, Probe] = field(default_factory=dict)
    low: int = 0
    high: int = 0
    consistent: bool = True
    generations: int = 0
    tokens: int = 0
    prior_generations: int = 0
    stopped: str | None = None
    evidence: Evidence | None = None

    def __post_init__(self) -> None:
        self.low, self.high = self.boundary.low, self.boundary.high

    def noises(self) -> list[Noise]:
        """Return the noise of each component curve, as the evidence now has it."""
        b = self.boundary
        if self.evidence is None:
            return [c.noise for c in b.components]
        return [self.evidence.noise(c.curve) for c in b.components]

    @property
    def resolved(self) -> bool:
        """Whether the bracket is at most ``resolution`` wide and consistent."""
        return self.consistent and self.high - self.low <= self.resolution

    def start(self, evidence: Evidence) -> None:
        """Take in the probes already measured inside the grid bracket (a rerun)."""
        b = self.boundary
        self.evidence = evidence
        budgets: set[int] = set()
        for component in b.components:
            budgets.update(evidence.budgets(component.curve, b.low, b.high))
        for budget in sorted(budgets):
            self.probes[budget] = Probe(budget, on_disk=True)
        self.update(evidence)

    def separable(self) -> bool:
        """Whether a probe at a hypothesised level could be decided within the cap."""
        b = self.boundary
        return separable(
            b.step(), self.noises(), self.thresholds, self.min_trials, self.max_trials, b.line_var
        )

    def update(self, evidence: Evidence) -> None:
        """Re-evaluate every probe from the evidence and move the bracket."""
        self.evidence = evidence
        for probe in self.probes.values():
            self._evaluate(probe, evidence)
        left = [self.boundary.low] + [p.budget for p in self.probes.values() if p.decision == LEFT]
        right = [self.boundary.high] + [
            p.budget for p in self.probes.values() if p.decision == RIGHT
        ]
        self.consistent = max(left) < min(right)
        self.low = max(x for x in left if x < min(right))
        self.high = min(x for x in right if x > max(left))

    def _evaluate(self, probe: Probe, evidence: Evidence) -> None:
        b = self.boundary
        stats = [evidence.at(c.curve, probe.budget) for c in b.components]
        n = [s[1] for s in stats]
        k = [s[2] for s in stats]
        probe.n, probe.sessions = int(sum(n)), int(min(k))
        probe.mu_left, probe.mu_right = b.levels(probe.budget)
        if min(n) == 0:
            return
        probe.level = float(sum(c.sign * s[0] for c, s in zip(b.components, stats, strict=True)))
        # the levels are estimates: their own variance enters the marginal likelihood
        variance = probe_variance(self.noises(), n, k) + b.line_var
        probe.llr = log_likelihood_ratio(probe.level, variance, probe.mu_left, probe.mu_right)
        decision = decide(probe.llr, self.thresholds)
        misfit = self._misfit(probe, decision, variance) if decision is not None else None
        # a median of fewer trials is not robust to a hiccup, nor one process to a
        # process that happened to be slow: no decision on either
        enough = min(n) >= self.min_trials and min(k) >= self.min_sessions
        probe.decision = decision if enough and misfit is None else None
        probe.exhausted = probe.decision is None and min(n) >= self.max_trials
        # a level that fits neither side is measured on: only at the cap is it a misfit
        probe.misfit = misfit if probe.exhausted else None

    def _misfit(self, probe: Probe, decision: str, variance: float) -> str | None:
        """Say whether the level fits neither side, though the test chose one.

        Wald's test picks the nearer of two simple hypotheses even when neither holds.
        A level significantly (one-sided at ``error_rate``, with the levels' own
        uncertainty) and materially off the chosen side is measured on, and still off at
        the cap it decides nothing: ``"between"`` when it falls short of the chosen side
        by a quarter of the step or more (a partial level), ``"beyond"`` when it lies
        past it by more than the whole step (the conditions changed since the grid, or
        the side's level is misjudged).
        """
        step = probe.mu_right - probe.mu_left
        chosen = probe.mu_right if decision == RIGHT else probe.mu_left
        towards_other = (chosen - probe.level) * np.sign(step) * (1 if decision == RIGHT else -1)
        significant = abs(towards_other) >= self.z_fit * math.sqrt(variance)
        if significant and towards_other >= 0.25 * abs(step):
            return "between"
        if significant and -towards_other >= abs(step):
            return "beyond"
        return None

    @property
    def z_fit(self) -> float:
        """One-sided normal quantile at the error rate (from Wald's upper threshold)."""
        error_rate = 1.0 / (1.0 + math.exp(self.thresholds.upper))
        return float(stats.norm.isf(error_rate))

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Candidate positions ``p`` in ``(low, high]`` and their posterior probabilities."""
        positions = np.arange(self.low + 1, self.high + 1)
        inside = [p for p in self.probes.values() if self.low < p.budget < self.high]
        log_post = np.zeros(positions.size)
        for probe in inside:
            if probe.misfit is None:  # a level that fits neither side says nothing
                log_post += np.where(positions <= probe.budget, probe.llr, 0.0)
        log_post -= log_post.max()
        weight = np.exp(log_post)
        return positions, weight / weight.sum()

    def next_request(self) -> tuple[int, int] | None:
        """``(budget, trials)`` to measure next, or None when the boundary is done."""
        if self.resolved or not self.consistent or self.stopped:
            return None
        budget = self._next_budget()
        if budget is None:
            return None
        probe = self.probes.setdefault(budget, Probe(budget))
        b = self.boundary
        mu_left, mu_right = b.levels(budget)
        have = probe.n // len(b.components)
        # leave room under the cap for the sessions a decision still needs
        sessions_left = max(1, self.min_sessions - probe.sessions)
        cap = have + max(self.min_trials, (self.max_trials - have) // sessions_left)
        trials = planned_trials(
            mu_right - mu_left,
            self.noises(),
            have,
            probe.sessions,
            self.thresholds,
            self.min_trials,
            min(cap, self.max_trials),
            b.line_var,
        )
        return (budget, trials) if trials > 0 else None

    def _next_budget(self) -> int | None:
        candidates = [
            m
            for m in range(self.low + 1, self.high)
            if not (m in self.probes and self.probes[m].exhausted)
        ]
        if not candidates:
            return None
        positions, prob = self.posterior()
        below = np.cumsum(prob)  # P(p <= positions[i])
        split = {int(m): abs(float(below[m - self.low - 1]) - 0.5) for m in candidates}
        unfinished = [m for m in candidates if m in self.probes and self.probes[m].n > 0]
        pool = unfinished or candidates
        middle = 0.5 * (self.low + self.high)
        return min(pool, key=lambda m: (split[m], abs(m - middle), m))
