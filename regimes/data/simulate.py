"""Synthetic sweeps with known ground truth, for tests and benchmarks.

Every frame made here is labelled synthetic: ``run_id`` starts with ``synthetic-`` and a
``source`` column says ``synthetic``. Latency is generated on the log scale as

.. math::

    \\log y = \\log \\mu(x) + a(x) + s_{\\text{session}} + c_{\\text{session},x}
              + \\varepsilon + h

with a smooth trend :math:`\\mu(x) = a_0 + b x\\,(+\\,c x^2)` (seconds; the per-token
cost can rise past a budget), an anomaly :math:`a(x)` (spike, plateau or step: a log
ratio on an interval), a per-session factor, an optional per-(session, budget) wobble
(a process picking a different kernel), lognormal trial noise :math:`\\varepsilon` with
the chosen coefficient of variation, and rare single-trial hiccups :math:`h` that slow
one trial by 1.5-3x.

Arguments given as a ``(low, high)`` pair are drawn uniformly per curve (integers for
counts), so one call can span a whole range of conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

__all__ = [
    "ANOMALY_KINDS",
    "PUBLISHED_GPT2_MEDIUM",
    "PUBLISHED_GPT2_MEDIUM_CACHE",
    "Sweep",
    "published_gpt2_medium",
    "published_gpt2_medium_cache",
    "simulate_sweep",
]

ANOMALY_KINDS = ("none", "spike", "plateau", "step", "slope", "slow_process")
"""``spike``/``plateau``/``step`` are anomalies; ``slope`` (the per-token cost rises past
a budget) and ``slow_process`` (one session slow at one budget) are not."""

PUBLISHED_GPT2_MEDIUM: dict[int, float] = {
    480: 9.2,
    496: 9.5,
    512: 89.2,
    528: 83.2,
    544: 97.0,
    560: 110.1,
    576: 99.9,
    592: 99.2,
    608: 98.9,
    624: 94.4,
    640: 8.8,
    656: 8.2,
}
"""Mean latency (s) of gpt2-medium on MPS (M3 Max, cache on) by budget, as published in
arXiv 2605.08913; anomalous from 512 to 624."""

PUBLISHED_GPT2_MEDIUM_CACHE: dict[int, tuple[float, float]] = {
    128: (1.4, 6.8),
    256: (2.9, 20.6),
    384: (5.1, 42.7),
    512: (83.2, 161.6),
    640: (8.8, 139.0),
    768: (9.7, 196.6),
}
"""Mean latency (s) of gpt2-medium on MPS by budget, ``(cache on, cache off)``, as
published in arXiv 2605.08913; the speedup collapses at 512 (1.9 against 4.9-20.3)."""

Range = float | tuple[float, float]
IntRange = int | tuple[int, int]


class Sweep(NamedTuple):
    """A synthetic trial table and its ground truth (one row per curve)."""

    trials: pl.DataFrame
    truth: pl.DataFrame


def _draw(rng: np.random.Generator, value: Range) -> float:
    if isinstance(value, tuple):
        return float(rng.uniform(value[0], value[1]))
    return float(value)


def _draw_int(rng: np.random.Generator, value: IntRange) -> int:
    if isinstance(value, tuple):
        return int(rng.integers(value[0], value[1] + 1))
    return int(value)


def _labelled(columns: dict[str, np.ndarray | list], run_id: str) -> pl.DataFrame:
    frame = pl.DataFrame(columns)
    return frame.with_columns(
        pl.lit(run_id).alias("run_id"),
        pl.lit("synthetic").alias("source"),
        pl.lit(False).alias("warmup"),
        pl.lit(False).alias("instrumented"),
        pl.col("budget").alias("new_tokens"),
    )


def simulate_sweep(
    n_curves: int = 1,
    *,
    anomaly: str = "none",
    n_budgets: IntRange = 24,
    budget_step: int = 16,
    budgets: Sequence[int] | None = None,
    trials: IntRange = 5,
    sessions: IntRange = 1,
    session_design: str = "shared",
    cv: Range = 0.05,
    hiccup_rate: Range = 0.01,
    hiccup_ratio: tuple[float, float] = (1.5, 3.0),
    session_cv: Range = 0.05,
    cell_cv: Range = 0.0,
    trend: str = "linear",
    intercept_s: Range = (0.02, 0.2),
    per_token_s: Range = (0.002, 0.02),
    ratio: Range = (2.0, 4.0),
    width: IntRange = 2,
    slope_factor: Range = (1.3, 2.0),
    slow_ratio: Range = (2.0, 3.0),
    seed: int = 0,
) -> Sweep:
    """Simulate ``n_curves`` synthetic latency curves with known anomalies.

    Parameters
    ----------
    anomaly : one of :data:`ANOMALY_KINDS`. ``spike`` multiplies ``width`` consecutive
        budgets by ``ratio`` (at least two normal budgets on each side); ``plateau`` is a
        spike over 30-60 % of the grid; ``step`` multiplies every budget from one in the
        middle third to the end; ``slope`` multiplies the per-token cost by
        ``slope_factor`` past a budget in the middle third (continuous, not an anomaly);
        ``slow_process`` slows one session at one budget by ``slow_ratio`` (needs
        ``sessions >= 2``; not an anomaly).
    n_budgets, budget_step, budgets : the grid, ``budget_step * (1..n_budgets)`` unless
        ``budgets`` is given.
    trials : trials per session per budget.
    sessions, session_design : processes per curve. ``shared``: each session runs every
        budget (its factor is common to the whole curve); ``per_cell``: every budget
        gets its own fresh sessions (a fresh process per case).
    cv, hiccup_rate, hiccup_ratio, session_cv, cell_cv : trial noise (coefficient of
        variation), share of trials slowed by a hiccup and by how much, per-session
        factor and per-(session, budget) wobble (log-scale standard deviations).
    trend, intercept_s, per_token_s : ``linear`` or ``quadratic`` smooth latency;
        the quadratic term reaches 0.5-2 times the linear one at the largest budget.
    seed : seed of the numpy ``Generator``; the same seed gives the same sweep.

    Returns
    -------
    Sweep
        ``trials``: the trial table (model ``synthetic-0000``, ... one per curve) and
        ``truth``: per model the anomaly ``kind``, ``is_anomaly``, ``start``, ``end``
        (budgets, inclusive), ``ratio``, ``recovered`` and the drawn conditions.
    """
    if anomaly not in ANOMALY_KINDS:
        raise ValueError(f"anomaly must be one of {ANOMALY_KINDS}, got {anomaly!r}")
    if trend not in ("linear", "quadratic"):
        raise ValueError(f"trend must be 'linear' or 'quadratic', got {trend!r}")
    if session_design not in ("shared", "per_cell"):
        raise ValueError(f"session_design must be 'shared' or 'per_cell', got {session_design!r}")
    rng = np.random.default_rng(seed)
    parts: list[dict[str, np.ndarray]] = []
    truth_rows: list[dict[str, object]] = []
    session_offset = 0
    order_offset = 0
    for curve in range(n_curves):
        grid = (
            np.asarray(budgets, dtype=np.int64)
            if budgets is not None
            else budget_step * np.arange(1, _draw_int(rng, n_budgets) + 1, dtype=np.int64)
        )
        t = grid.size
        n_trials = _draw_int(rng, trials)
        n_sessions = _draw_int(rng, sessions)
        if anomaly == "slow_process" and n_sessions < 2:
            raise ValueError("anomaly='slow_process' needs sessions >= 2")
        noise_sd = float(np.sqrt(np.log1p(_draw(rng, cv) ** 2)))
        p_hiccup = _draw(rng, hiccup_rate)
        s_cv, c_cv = _draw(rng, session_cv), _draw(rng, cell_cv)
        a0, b = _draw(rng, intercept_s), _draw(rng, per_token_s)
        x = grid.astype(float)
        mu = a0 + b * x
        if trend == "quadratic":
            mu = mu + _draw(rng, (0.5, 2.0)) * b * x / x.max() * x
        log_shift = np.zeros(t)
        start = end = None
        size = float("nan")
        if anomaly in ("spike", "plateau"):
            w = (
                _draw_int(rng, width)
                if anomaly == "spike"
                else int(round(_draw(rng, (0.3, 0.6)) * t))
            )
            w = max(1, min(w, t - 4))
            first = int(rng.integers(2, t - 2 - w + 1))
            start, end = first, first + w - 1
        elif anomaly == "step":
            start, end = int(rng.integers(t // 3, 2 * t // 3 + 1)), t - 1
        if start is not None:
            size = _draw(rng, ratio)
            log_shift[start : end + 1] = np.log(size)
        kink = None
        if anomaly == "slope":
            kink = int(rng.integers(t // 3, 2 * t // 3 + 1))
            factor = _draw(rng, slope_factor)
            mu = mu + (factor - 1.0) * b * np.maximum(0.0, x - x[kink])
        # one row per (session, budget, trial)
        if session_design == "shared":
            session_of = np.tile(np.repeat(np.arange(n_sessions), n_trials), t)
        else:
            session_of = np.repeat(np.arange(t * n_sessions), n_trials)
        budget_index = np.repeat(np.arange(t), n_sessions * n_trials)
        rows = budget_index.size
        n_ids = n_sessions if session_design == "shared" else t * n_sessions
        session_factor = rng.normal(0.0, s_cv, n_ids)[session_of]
        wobble = rng.normal(0.0, c_cv, (t, n_ids))[budget_index, session_of] if c_cv > 0 else 0.0
        log_y = (
            np.log(mu)[budget_index]
            + log_shift[budget_index]
            + session_factor
            + wobble
            + rng.normal(0.0, noise_sd, rows)
        )
        hiccup = rng.random(rows) < p_hiccup
        log_y = log_y + np.where(hiccup, np.log(rng.uniform(*hiccup_ratio, rows)), 0.0)
        slow = None
        if anomaly == "slow_process":
            slow_budget = int(rng.integers(2, t - 2))
            slow_session = int(rng.integers(0, n_sessions))
            local = session_of - (0 if session_design == "shared" else budget_index * n_sessions)
            hit = (budget_index == slow_budget) & (local == slow_session)
            log_y = log_y + np.where(hit, np.log(_draw(rng, slow_ratio)), 0.0)
            slow = int(grid[slow_budget])
        trial_index = np.tile(np.arange(n_trials), t * n_sessions)
        order = order_offset + rng.permutation(rows)
        order_offset += rows
        parts.append(
            {
                "model": np.full(rows, f"synthetic-{curve:04d}"),
                "session": session_offset + session_of,
                "budget": grid[budget_index],
                "trial": trial_index,
                "order": order,
                "latency_s": np.exp(log_y),
            }
        )
        session_offset += n_ids
        is_anomaly = anomaly in ("spike", "plateau", "step")
        truth_rows.append(
            {
                "model": f"synthetic-{curve:04d}",
                "kind": anomaly,
                "is_anomaly": is_anomaly,
                "start": int(grid[start]) if start is not None else None,
                "end": int(grid[end]) if end is not None else None,
                "ratio": size if is_anomaly else None,
                "recovered": (anomaly != "step") if is_anomaly else None,
                "kink_x": int(grid[kink]) if kink is not None else None,
                "slow_x": slow,
                "n_budgets": t,
                "trials": n_trials,
                "sessions": n_sessions,
                "cv": float(np.sqrt(np.expm1(noise_sd**2))),
                "hiccup_rate": p_hiccup,
                "session_cv": s_cv,
                "cell_cv": c_cv,
            }
        )
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    trials_frame = _labelled(columns, f"synthetic-{seed}").with_columns(
        pl.lit("synthetic").alias("backend"),
        pl.lit("synthetic").alias("device"),
        pl.lit("float32").alias("dtype"),
        pl.lit(True).alias("use_cache"),
        pl.lit(65, dtype=pl.Int64).alias("prompt_tokens"),
        pl.col("session", "budget", "trial", "order").cast(pl.Int64),
    )
    truth = pl.DataFrame(
        truth_rows,
        schema_overrides={
            "start": pl.Int64,
            "end": pl.Int64,
            "ratio": pl.Float64,
            "recovered": pl.Boolean,
            "kink_x": pl.Int64,
            "slow_x": pl.Int64,
        },
    )
    return Sweep(trials_frame, truth)


def published_gpt2_medium(trials: int = 5, cv: float = 0.10, seed: int = 0) -> Sweep:
    """Synthetic trials around the published gpt2-medium MPS means (DESIGN.md).

    Each budget runs in its own process (a fresh server per case, as the authors did)
    with ``trials`` lognormal trials of coefficient of variation ``cv`` whose mean is the
    published mean. Labelled synthetic: the means are published, the trials are not.
    The truth is one anomaly from 512 to 624; its ``ratio`` is the geometric mean of the
    plateau's published means over the straight line (in log budget, log latency)
    through the four flank means.
    """
    if trials < 2:
        raise ValueError("trials must be at least 2")
    rng = np.random.default_rng(seed)
    grid = np.asarray(list(PUBLISHED_GPT2_MEDIUM), dtype=np.int64)
    means = np.asarray(list(PUBLISHED_GPT2_MEDIUM.values()))
    sd = float(np.sqrt(np.log1p(cv**2)))
    budget_index = np.repeat(np.arange(grid.size), trials)
    # lognormal with mean equal to the published mean
    log_y = np.log(means)[budget_index] - sd**2 / 2 + rng.normal(0.0, sd, budget_index.size)
    frame = _labelled(
        {
            "session": budget_index.astype(np.int64),
            "budget": grid[budget_index],
            "trial": np.tile(np.arange(trials), grid.size).astype(np.int64),
            "order": rng.permutation(budget_index.size).astype(np.int64),
            "latency_s": np.exp(log_y),
        },
        f"synthetic-published-gpt2-medium-{seed}",
    ).with_columns(
        pl.lit("mps").alias("backend"),
        pl.lit("Apple M3 Max (synthetic, from published means)").alias("device"),
        pl.lit("gpt2-medium").alias("model"),
        pl.lit("float32").alias("dtype"),
        pl.lit(True).alias("use_cache"),
        pl.lit(65, dtype=pl.Int64).alias("prompt_tokens"),
    )
    inside = (grid >= 512) & (grid <= 624)
    u, level = np.log(grid), np.log(means)
    slope, intercept = np.polyfit(u[~inside], level[~inside], 1)
    ratio = float(np.exp(np.mean(level[inside] - (intercept + slope * u[inside]))))
    truth = pl.DataFrame(
        {
            "model": ["gpt2-medium"],
            "kind": ["plateau"],
            "is_anomaly": [True],
            "start": [512],
            "end": [624],
            "ratio": [ratio],
            "recovered": [True],
        }
    )
    return Sweep(frame, truth)


def published_gpt2_medium_cache(trials: int = 5, cv: float = 0.10, seed: int = 0) -> pl.DataFrame:
    """Synthetic trials around the published gpt2-medium MPS cache-on/off means.

    Every (budget, cache state) runs in its own process with ``trials`` lognormal trials
    of coefficient of variation ``cv`` whose mean is the published mean (cache-on cells
    drawn first). Labelled synthetic: the means are published, the trials are not.
    """
    if trials < 2:
        raise ValueError("trials must be at least 2")
    rng = np.random.default_rng(seed)
    grid = np.asarray(list(PUBLISHED_GPT2_MEDIUM_CACHE), dtype=np.int64)
    sd = float(np.sqrt(np.log1p(cv**2)))
    index = np.repeat(np.arange(grid.size), trials)
    frames = []
    for use_cache, column in ((True, 0), (False, 1)):
        means = np.asarray([pair[column] for pair in PUBLISHED_GPT2_MEDIUM_CACHE.values()])
        frames.append(
            _labelled(
                {
                    "session": (index * 2 + int(use_cache)).astype(np.int64),
                    "budget": grid[index],
                    "trial": np.tile(np.arange(trials), grid.size).astype(np.int64),
                    "use_cache": np.full(index.size, use_cache),
                    "latency_s": means[index] * np.exp(rng.normal(-(sd**2) / 2, sd, index.size)),
                },
                f"synthetic-published-gpt2-medium-cache-{seed}",
            )
        )
    return pl.concat(frames).with_columns(
        pl.lit("mps").alias("backend"),
        pl.lit("Apple M3 Max (synthetic, from published means)").alias("device"),
        pl.lit("gpt2-medium").alias("model"),
        pl.lit("float32").alias("dtype"),
        pl.lit(65, dtype=pl.Int64).alias("prompt_tokens"),
    )
