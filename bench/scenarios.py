"""Synthetic latency curves with known truth, for the accuracy and coverage benchmarks.

Every frame made here is synthetic (``run_id`` starts with ``synthetic-``). One curve is
one model; its log latency is

    log y = log mu(x) + a(x) + s_session + c_(session, x) + k_(session, x) + e

with a smooth trend mu (linear, quadratic or a power of the budget), anomalies a(x)
(any list of spikes, plateaus, steps, dips and down-steps, at any position, edges
included), a per-session factor s, a per-(session, budget) wobble c, an optional slow
kernel k drawn per (session, budget) with a given probability, and trial noise e that
is normal, Student t or normal with rare hiccups (a trial slowed 1.5-3x).

A :class:`Design` gives every condition as a value or a ``(low, high)`` range drawn per
curve; :func:`make_curves` returns one trial frame per curve and the truth: one row per
anomaly (curve, kind, start, end, ratio) and the cell-level truth (the true median of
every cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

Range = float | tuple[float, float]


@dataclass(frozen=True)
class Anomaly:
    """One planted anomaly.

    ``kind``: ``spike`` (``width`` budgets, ``ratio`` > 1), ``dip`` (the same below the
    trend), ``step`` (from ``at`` to the end of the grid), ``downstep`` (a step below).
    ``where``: ``interior`` (at least ``margin`` normal budgets on either side),
    ``start`` or ``end`` (touching that end of the grid), ``after`` (right after the
    previous anomaly) or ``inside`` (inside the previous anomaly, away from its ends).
    """

    kind: str
    ratio: Range
    width: Range = 2
    where: str = "interior"
    margin: int = 2
    region: tuple[float, float] = (0.0, 1.0)


@dataclass(frozen=True)
class Design:
    """The conditions of one scenario (ranges are drawn per curve)."""

    anomalies: Sequence[Anomaly] = ()
    n_budgets: Range = (12, 40)
    budget_step: int = 16
    trials: Range = (3, 10)
    sessions: Range = (1, 3)
    session_design: str = "mixed"
    noise: str = "normal"
    sigma: Range = (0.02, 0.15)
    t_df: float = 3.0
    hiccup_rate: Range = (0.0, 0.03)
    hiccup_ratio: tuple[float, float] = (1.5, 3.0)
    session_sd: Range = (0.0, 0.10)
    cell_sd: Range = (0.0, 0.03)
    kernel_rate: Range = 0.0
    kernel_ratio: tuple[float, float] = (2.0, 3.0)
    trend: str = "mixed"
    slope_factor: Range = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Design:
        """Return the same design with some conditions changed."""
        return replace(self, **changes)


def _draw(rng: np.random.Generator, value: Range) -> float:
    if isinstance(value, tuple):
        return float(rng.uniform(value[0], value[1]))
    return float(value)


def _draw_int(rng: np.random.Generator, value: Range) -> int:
    if isinstance(value, tuple):
        return int(rng.integers(int(value[0]), int(value[1]) + 1))
    return int(value)


def _trend(rng: np.random.Generator, x: np.ndarray, kind: str, slope_factor: float) -> np.ndarray:
    kind = rng.choice(["linear", "quadratic", "power"]) if kind == "mixed" else kind
    a0, b = rng.uniform(0.02, 0.2), rng.uniform(0.002, 0.02)
    if kind == "linear":
        mu = a0 + b * x
    elif kind == "quadratic":
        mu = a0 + b * x + rng.uniform(0.5, 2.0) * b * x * x / x.max()
    else:
        mu = a0 * (x / x[0]) ** rng.uniform(0.3, 1.2)
    if slope_factor != 1.0:
        # the slope after the kink is slope_factor times the trend's own slope there
        # (not the linear coefficient b: a power trend is far flatter than b by then)
        at = int(rng.integers(x.size // 3, 2 * x.size // 3 + 1))
        slope = float(np.gradient(mu, x)[at])
        mu = mu + (slope_factor - 1.0) * slope * np.maximum(0.0, x - x[at])
    return np.log(mu)


def _place(
    rng: np.random.Generator, t: int, anomaly: Anomaly, previous: tuple[int, int] | None
) -> tuple[int, int]:
    """Cell indices ``(start, end)`` of one anomaly on a grid of ``t`` cells."""
    if anomaly.kind in ("step", "downstep"):
        if anomaly.where == "after" and previous is not None:
            return min(previous[1] + _draw_int(rng, anomaly.width), t - 3), t - 1
        return int(rng.integers(t // 3, 2 * t // 3 + 1)), t - 1
    width = max(1, min(_draw_int(rng, anomaly.width), t - 2))
    if anomaly.where == "start":
        return 0, width - 1
    if anomaly.where == "end":
        return t - width, t - 1
    if anomaly.where == "inside" and previous is not None:
        lo, hi = previous[0] + anomaly.margin, previous[1] - anomaly.margin - width + 1
        first = int(rng.integers(lo, max(lo, hi) + 1))
        return first, first + width - 1
    if anomaly.where == "after" and previous is not None:
        return previous[1] + 1, previous[1] + width
    width = min(width, t - 2 * anomaly.margin)
    lo = max(anomaly.margin, int(anomaly.region[0] * t))
    hi = min(t - anomaly.margin, int(anomaly.region[1] * t)) - width
    first = int(rng.integers(lo, max(lo, hi) + 1))
    return first, first + width - 1


def _noise(rng: np.random.Generator, design: Design, sigma: float, size: int) -> np.ndarray:
    if design.noise == "t":
        # scaled so that the interquartile range matches a normal of this sigma
        scale = sigma * 0.6745 / float(np.quantile(rng.standard_t(design.t_df, 200_000), 0.75))
        return scale * rng.standard_t(design.t_df, size)
    return rng.normal(0.0, sigma, size)


def one_curve(
    design: Design, rng: np.random.Generator, name: str
) -> tuple[pl.DataFrame, list[dict[str, Any]], pl.DataFrame]:
    """One synthetic curve: trials, its anomalies and the true median of each cell."""
    t = _draw_int(rng, design.n_budgets)
    grid = design.budget_step * np.arange(1, t + 1)
    x = grid.astype(float)
    shift = np.zeros(t)
    truths, previous = [], None
    for anomaly in design.anomalies:
        start, end = _place(rng, t, anomaly, previous)
        ratio = _draw(rng, anomaly.ratio)
        shift[start : end + 1] += np.log(ratio)
        truths.append(
            dict(
                model=name,
                kind=anomaly.kind,
                start=int(grid[start]),
                end=int(grid[end]),
                ratio=ratio,
                first=start,
                last=end,
                n_budgets=t,
            )
        )
        previous = (start, end)
    log_mu = _trend(rng, x, design.trend, _draw(rng, design.slope_factor)) + shift
    n_trials, n_sessions = _draw_int(rng, design.trials), _draw_int(rng, design.sessions)
    shared = design.session_design == "shared" or (
        design.session_design == "mixed" and rng.random() < 0.5
    )
    if shared:
        session = np.tile(np.repeat(np.arange(n_sessions), n_trials), t)
    else:
        session = np.repeat(np.arange(t * n_sessions), n_trials)
    cell = np.repeat(np.arange(t), n_sessions * n_trials)
    n_ids = int(session.max()) + 1
    sigma = _draw(rng, design.sigma)
    log_y = log_mu[cell] + rng.normal(0.0, _draw(rng, design.session_sd), n_ids)[session]
    wobble = rng.normal(0.0, _draw(rng, design.cell_sd), (t, n_ids))
    slow = rng.random((t, n_ids)) < _draw(rng, design.kernel_rate)
    kernel = np.where(slow, np.log(rng.uniform(*design.kernel_ratio, (t, n_ids))), 0.0)
    log_y = log_y + wobble[cell, session] + kernel[cell, session]
    log_y = log_y + _noise(rng, design, sigma, cell.size)
    hiccup = rng.random(cell.size) < _draw(rng, design.hiccup_rate)
    log_y = log_y + np.where(hiccup, np.log(rng.uniform(*design.hiccup_ratio, cell.size)), 0.0)
    trials = pl.DataFrame(
        {
            "run_id": f"synthetic-{name}",
            "backend": "cpu",
            "model": name,
            "use_cache": True,
            "session": session,
            "budget": grid[cell],
            "trial": np.tile(np.arange(n_trials), t * n_sessions),
            "latency_s": np.exp(log_y),
        }
    )
    cells = pl.DataFrame(
        {"model": name, "budget": grid, "true_median": np.exp(log_mu), "shared": shared}
    )
    return trials, truths, cells


def make_curves(
    design: Design, n_curves: int, seed: int
) -> tuple[list[pl.DataFrame], pl.DataFrame, pl.DataFrame]:
    """``n_curves`` synthetic curves of one design: trial frames, anomalies, cells.

    The true median of a cell is the trend times its anomaly factor: noise, session
    factors and wobble are symmetric on the log scale (hiccups and slow kernels make
    the true median slightly higher; designs measuring coverage leave them out).
    """
    rng = np.random.default_rng(seed)
    frames, truths, cells = [], [], []
    for k in range(n_curves):
        trials, truth, cell = one_curve(design, rng, f"c{k:04d}")
        frames.append(trials)
        truths.extend(truth)
        cells.append(cell)
    schema = {
        "model": pl.String,
        "kind": pl.String,
        "start": pl.Int64,
        "end": pl.Int64,
        "ratio": pl.Float64,
        "first": pl.Int64,
        "last": pl.Int64,
        "n_budgets": pl.Int64,
    }
    return frames, pl.DataFrame(truths, schema=schema), pl.concat(cells)
