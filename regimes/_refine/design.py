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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from regimes._refine.brackets import Boundary
from regimes._refine.sprt import (
    LEFT,
    RIGHT,
    Thresholds,
    decide,
    log_likelihood_ratio,
    planned_trials,
    probe_variance,
)

__all__ = ["BoundaryState", "Evidence", "Probe"]


class Evidence:
    """Measured trials on the log scale, by curve and budget (what a probe can use).

    ``frame`` holds the group columns, ``budget``, ``_ly`` (log latency) and
    ``_session`` (the process a trial ran in).
    """

    def __init__(self, frame: pl.DataFrame, group_columns: list[str]):
        self.group_columns = group_columns
        self._cells: dict[tuple[tuple[Any, ...], int], tuple[np.ndarray, np.ndarray]] = {}
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
    between: bool = False
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
    probes: dict[int, Probe] = field(default_factory=dict)
    low: int = 0
    high: int = 0
    consistent: bool = True
    generations: int = 0
    tokens: int = 0
    stopped: str | None = None

    def __post_init__(self) -> None:
        self.low, self.high = self.boundary.low, self.boundary.high

    @property
    def resolved(self) -> bool:
        """Whether the bracket is at most ``resolution`` wide and consistent."""
        return self.consistent and self.high - self.low <= self.resolution

    def start(self, evidence: Evidence) -> None:
        """Take in the probes already measured inside the grid bracket (a rerun)."""
        b = self.boundary
        budgets: set[int] = set()
        for component in b.components:
            budgets.update(evidence.budgets(component.curve, b.low, b.high))
        for budget in sorted(budgets):
            self.probes[budget] = Probe(budget, on_disk=True)
        self.update(evidence)

    def update(self, evidence: Evidence) -> None:
        """Re-evaluate every probe from the evidence and move the bracket."""
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
        variance = probe_variance([c.noise for c in b.components], n, k) + b.line_var
        probe.llr = log_likelihood_ratio(probe.level, variance, probe.mu_left, probe.mu_right)
        decision = decide(probe.llr, self.thresholds)
        short = decision is not None and self._between(probe, decision, variance)
        # a median of fewer trials is not robust to a hiccup: no decision on it
        enough = min(n) >= self.min_trials
        probe.decision = decision if enough and not short else None
        probe.exhausted = probe.decision is None and min(n) >= self.max_trials
        # a level short of the chosen side is measured on: only at the cap is it partial
        probe.between = short and probe.exhausted

    def _between(self, probe: Probe, decision: str, variance: float) -> bool:
        """Whether the level lies between the two sides, off the one the test chose.

        Wald's test picks the nearer of two simple hypotheses even when neither holds.
        A level materially (a quarter of the step) and significantly (one-sided at
        ``error_rate``, with the levels' own uncertainty) short of the chosen side,
        towards the other, is measured on; still short at the cap, it is a partial
        level and no side is decided for it.
        """
        step = probe.mu_right - probe.mu_left
        if decision == RIGHT:
            short = (probe.mu_right - probe.level) * np.sign(step)
        else:
            short = (probe.level - probe.mu_left) * np.sign(step)
        scale = math.sqrt(variance)
        return bool(short >= 0.25 * abs(step) and short >= self.z_fit * scale)

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
            if not probe.between:  # a partial level says nothing about the side
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
        trials = planned_trials(
            mu_right - mu_left,
            [c.noise for c in b.components],
            probe.n // len(b.components),
            probe.sessions,
            self.thresholds,
            self.min_trials,
            self.max_trials,
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
