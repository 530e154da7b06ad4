r"""Synthetic sweeps with known ground truth, for tests and benchmarks.

Every frame made here is labelled synthetic: ``run_id`` starts with ``synthetic-`` and a
``source`` column says ``synthetic``. Latency is generated on the log scale as

.. math::

    \log y = \log \mu(x) + a(x) + s_{\text{session}} + c_{\text{session},x}
              + \varepsilon + h

with a smooth trend :math:`\mu(x) = a_0 + b x\,(+\,c x^2)` (seconds; the per-token
cost can rise past a budget), an anomaly :math:`a(x)` (spike, plateau or step: a log
ratio on an interval), a per-session factor, an optional per-(session, budget) wobble
(a process picking a different kernel), lognormal trial noise :math:`\varepsilon` with
the chosen coefficient of variation, and rare single-trial hiccups :math:`h` that slow
one trial by 1.5-3x.

Arguments given as a ``(low, high)`` pair are drawn uniformly per curve (integers for
counts), so one call can span a whole range of conditions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from regimes.errors import RegimesInputError

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


def _labelled(columns: Mapping[str, np.ndarray], run_id: str) -> pl.DataFrame:
    frame = pl.DataFrame(columns)
    return frame.with_columns(
        pl.lit(run_id).alias("run_id"),
        pl.lit("synthetic").alias("source"),
        pl.lit(False).alias("warmup"),
        pl.lit(False).alias("instrumented"),
        pl.col("budget").alias("new_tokens"),
    )


@dataclass(frozen=True)
class _SweepConfig:
    """The arguments of :func:`simulate_sweep` that shape every curve."""

    anomaly: str
    n_budgets: IntRange
    budget_step: int
    budgets: Sequence[int] | None
    trials: IntRange
    sessions: IntRange
    session_design: str
    cv: Range
    hiccup_rate: Range
    hiccup_ratio: tuple[float, float]
    session_cv: Range
    cell_cv: Range
    trend: str
    intercept_s: Range
    per_token_s: Range
    ratio: Range
    width: IntRange
    slope_factor: Range
    slow_ratio: Range


@dataclass
class _Curve:
    """One simulated curve: its grid, drawn conditions and log-scale mean per budget.

    Filled stage by stage (conditions, trend, anomaly, trials); every stage draws from
    the sweep's one generator in a fixed order, so a seed fixes the whole sweep.
    """

    grid: np.ndarray
    n_trials: int
    n_sessions: int
    noise_sd: float
    p_hiccup: float
    session_cv: float
    cell_cv: float
    mu: np.ndarray
    log_shift: np.ndarray
    start: int | None = None
    end: int | None = None
    size: float = float("nan")
    kink: int | None = None
    slow: int | None = None


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

    Arguments given as a ``(low, high)`` pair are drawn uniformly per curve (integers
    for counts); see the module docstring for the model.

    Parameters
    ----------
    n_curves : int, default 1
        Curves to simulate, one model each (``synthetic-0000``, ...).
    anomaly : str, default "none"
        One of :data:`ANOMALY_KINDS`. ``spike`` multiplies ``width`` consecutive
        budgets by ``ratio`` (at least two normal budgets on each side); ``plateau`` is
        a spike over 30-60 % of the grid; ``step`` multiplies every budget from one in
        the middle third to the end; ``slope`` multiplies the per-token cost by
        ``slope_factor`` past a budget in the middle third (continuous, not an
        anomaly); ``slow_process`` slows one session at one budget by ``slow_ratio``
        (needs ``sessions >= 2``; not an anomaly).
    n_budgets : int or (int, int), default 24
        Budgets per curve; the grid is ``budget_step * (1..n_budgets)``.
    budget_step : int, default 16
        Spacing of the grid.
    budgets : sequence of int, optional
        The grid itself, in place of ``n_budgets`` and ``budget_step``.
    trials : int or (int, int), default 5
        Trials per session per budget.
    sessions : int or (int, int), default 1
        Processes per curve.
    session_design : {"shared", "per_cell"}, default "shared"
        ``shared``: each session runs every budget (its factor is common to the whole
        curve); ``per_cell``: every budget gets its own fresh sessions (a fresh process
        per case).
    cv : float or (float, float), default 0.05
        Coefficient of variation of the lognormal trial noise.
    hiccup_rate : float or (float, float), default 0.01
        Share of trials slowed by a hiccup.
    hiccup_ratio : (float, float), default (1.5, 3.0)
        Range of a hiccup's slow-down factor.
    session_cv, cell_cv : float or (float, float), default 0.05 and 0.0
        Log-scale standard deviations of the per-session factor and of the
        per-(session, budget) wobble.
    trend : {"linear", "quadratic"}, default "linear"
        Smooth latency; the quadratic term reaches 0.5-2 times the linear one at the
        largest budget.
    intercept_s, per_token_s : float or (float, float)
        Intercept (s) and per-token cost (s) of the trend.
    ratio : float or (float, float), default (2.0, 4.0)
        Size of a spike, plateau or step.
    width : int or (int, int), default 2
        Budgets a spike covers.
    slope_factor, slow_ratio : float or (float, float)
        Factors of the ``slope`` and ``slow_process`` kinds.
    seed : int, default 0
        Seed of the numpy ``Generator``; the same seed gives the same sweep.

    Returns
    -------
    Sweep
        ``trials``: the trial table, labelled synthetic; ``truth``: per model the
        anomaly ``kind``, ``is_anomaly``, ``start``, ``end`` (budgets, inclusive),
        ``ratio``, ``recovered`` and the drawn conditions.

    Raises
    ------
    RegimesInputError
        For an unknown ``anomaly``, ``trend`` or ``session_design``, or
        ``anomaly="slow_process"`` with a single session.

    See Also
    --------
    published_gpt2_medium : trials around the published MPS means.

    Examples
    --------
    >>> sweep = simulate_sweep(2, anomaly="spike", ratio=3.0, seed=1)
    >>> sweep.trials.height, sweep.truth.select("is_anomaly", "ratio").row(0)
    (240, (True, 3.0))
    >>> sweep.trials["run_id"][0]
    'synthetic-1'
    """
    config = _SweepConfig(
        anomaly, n_budgets, budget_step, budgets, trials, sessions, session_design, cv,
        hiccup_rate, hiccup_ratio, session_cv, cell_cv, trend, intercept_s, per_token_s,
        ratio, width, slope_factor, slow_ratio,
    )  # fmt: skip
    _check_config(config)
    rng = np.random.default_rng(seed)
    parts: list[dict[str, np.ndarray]] = []
    truth_rows: list[dict[str, object]] = []
    session_offset = order_offset = 0
    for index in range(n_curves):
        curve = _draw_curve(rng, config)
        columns, n_ids = _draw_trials(rng, config, curve)
        columns["model"] = np.full(columns["budget"].size, f"synthetic-{index:04d}")
        columns["session"] = columns["session"] + session_offset
        columns["order"] = order_offset + rng.permutation(columns["budget"].size)
        order_offset += columns["budget"].size
        session_offset += n_ids
        parts.append(columns)
        truth_rows.append(_truth_row(f"synthetic-{index:04d}", config.anomaly, curve))
    return Sweep(_trial_table(parts, seed), _truth_table(truth_rows))


def _check_config(config: _SweepConfig) -> None:
    if config.anomaly not in ANOMALY_KINDS:
        raise RegimesInputError(f"anomaly must be one of {ANOMALY_KINDS}, got {config.anomaly!r}")
    if config.trend not in ("linear", "quadratic"):
        raise RegimesInputError(f"trend must be 'linear' or 'quadratic', got {config.trend!r}")
    if config.session_design not in ("shared", "per_cell"):
        raise RegimesInputError(
            f"session_design must be 'shared' or 'per_cell', got {config.session_design!r}"
        )


def _draw_curve(rng: np.random.Generator, config: _SweepConfig) -> _Curve:
    """Draw a curve's grid and conditions, its trend and its anomaly, in that order."""
    grid = (
        np.asarray(config.budgets, dtype=np.int64)
        if config.budgets is not None
        else config.budget_step * np.arange(1, _draw_int(rng, config.n_budgets) + 1, dtype=np.int64)
    )
    n_trials = _draw_int(rng, config.trials)
    n_sessions = _draw_int(rng, config.sessions)
    if config.anomaly == "slow_process" and n_sessions < 2:
        raise RegimesInputError("anomaly='slow_process' needs sessions >= 2")
    noise_sd = float(np.sqrt(np.log1p(_draw(rng, config.cv) ** 2)))
    p_hiccup = _draw(rng, config.hiccup_rate)
    s_cv, c_cv = _draw(rng, config.session_cv), _draw(rng, config.cell_cv)
    a0, b = _draw(rng, config.intercept_s), _draw(rng, config.per_token_s)
    x = grid.astype(float)
    mu = a0 + b * x
    if config.trend == "quadratic":
        mu = mu + _draw(rng, (0.5, 2.0)) * b * x / x.max() * x
    curve = _Curve(
        grid, n_trials, n_sessions, noise_sd, p_hiccup, s_cv, c_cv, mu, np.zeros(grid.size)
    )
    _place_anomaly(rng, config, curve)
    if config.anomaly == "slope":
        curve.kink = int(rng.integers(grid.size // 3, 2 * grid.size // 3 + 1))
        factor = _draw(rng, config.slope_factor)
        curve.mu = curve.mu + (factor - 1.0) * b * np.maximum(0.0, x - x[curve.kink])
    return curve


def _place_anomaly(rng: np.random.Generator, config: _SweepConfig, curve: _Curve) -> None:
    """Draw where a spike, plateau or step sits and how large it is."""
    t = curve.grid.size
    if config.anomaly in ("spike", "plateau"):
        w = (
            _draw_int(rng, config.width)
            if config.anomaly == "spike"
            else int(round(_draw(rng, (0.3, 0.6)) * t))
        )
        w = max(1, min(w, t - 4))
        first = int(rng.integers(2, t - 2 - w + 1))
        curve.start, curve.end = first, first + w - 1
    elif config.anomaly == "step":
        curve.start, curve.end = int(rng.integers(t // 3, 2 * t // 3 + 1)), t - 1
    if curve.start is not None and curve.end is not None:
        curve.size = _draw(rng, config.ratio)
        curve.log_shift[curve.start : curve.end + 1] = np.log(curve.size)


def _draw_trials(
    rng: np.random.Generator, config: _SweepConfig, curve: _Curve
) -> tuple[dict[str, np.ndarray], int]:
    """Draw one row per (session, budget, trial); return the columns and session count."""
    t, n_sessions, n_trials = curve.grid.size, curve.n_sessions, curve.n_trials
    if config.session_design == "shared":
        session_of = np.tile(np.repeat(np.arange(n_sessions), n_trials), t)
    else:
        session_of = np.repeat(np.arange(t * n_sessions), n_trials)
    budget_index = np.repeat(np.arange(t), n_sessions * n_trials)
    rows = budget_index.size
    n_ids = n_sessions if config.session_design == "shared" else t * n_sessions
    session_factor = rng.normal(0.0, curve.session_cv, n_ids)[session_of]
    wobble = (
        rng.normal(0.0, curve.cell_cv, (t, n_ids))[budget_index, session_of]
        if curve.cell_cv > 0
        else 0.0
    )
    log_y = (
        np.log(curve.mu)[budget_index]
        + curve.log_shift[budget_index]
        + session_factor
        + wobble
        + rng.normal(0.0, curve.noise_sd, rows)
    )
    hiccup = rng.random(rows) < curve.p_hiccup
    log_y = log_y + np.where(hiccup, np.log(rng.uniform(*config.hiccup_ratio, rows)), 0.0)
    if config.anomaly == "slow_process":
        slow_budget = int(rng.integers(2, t - 2))
        slow_session = int(rng.integers(0, n_sessions))
        local = session_of - (0 if config.session_design == "shared" else budget_index * n_sessions)
        hit = (budget_index == slow_budget) & (local == slow_session)
        log_y = log_y + np.where(hit, np.log(_draw(rng, config.slow_ratio)), 0.0)
        curve.slow = int(curve.grid[slow_budget])
    columns = {
        "session": session_of,
        "budget": curve.grid[budget_index],
        "trial": np.tile(np.arange(n_trials), t * n_sessions),
        "latency_s": np.exp(log_y),
    }
    return columns, n_ids


def _truth_row(model: str, anomaly: str, curve: _Curve) -> dict[str, object]:
    is_anomaly = anomaly in ("spike", "plateau", "step")
    grid = curve.grid
    return {
        "model": model,
        "kind": anomaly,
        "is_anomaly": is_anomaly,
        "start": int(grid[curve.start]) if curve.start is not None else None,
        "end": int(grid[curve.end]) if curve.end is not None else None,
        "ratio": curve.size if is_anomaly else None,
        "recovered": (anomaly != "step") if is_anomaly else None,
        "kink_x": int(grid[curve.kink]) if curve.kink is not None else None,
        "slow_x": curve.slow,
        "n_budgets": grid.size,
        "trials": curve.n_trials,
        "sessions": curve.n_sessions,
        "cv": float(np.sqrt(np.expm1(curve.noise_sd**2))),
        "hiccup_rate": curve.p_hiccup,
        "session_cv": curve.session_cv,
        "cell_cv": curve.cell_cv,
    }


def _trial_table(parts: list[dict[str, np.ndarray]], seed: int) -> pl.DataFrame:
    order = ("model", "session", "budget", "trial", "order", "latency_s")
    columns = {k: np.concatenate([p[k] for p in parts]) for k in order}
    return _labelled(columns, f"synthetic-{seed}").with_columns(
        pl.lit("synthetic").alias("backend"),
        pl.lit("synthetic").alias("device"),
        pl.lit("float32").alias("dtype"),
        pl.lit(True).alias("use_cache"),
        pl.lit(65, dtype=pl.Int64).alias("prompt_tokens"),
        pl.col("session", "budget", "trial", "order").cast(pl.Int64),
    )


def _truth_table(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema_overrides={
            "start": pl.Int64,
            "end": pl.Int64,
            "ratio": pl.Float64,
            "recovered": pl.Boolean,
            "kink_x": pl.Int64,
            "slow_x": pl.Int64,
        },
    )


def published_gpt2_medium(trials: int = 5, cv: float = 0.10, seed: int = 0) -> Sweep:
    """Synthetic trials around the published gpt2-medium MPS means.

    Each budget runs in its own process (a fresh server per case, as the authors did)
    with ``trials`` lognormal trials of coefficient of variation ``cv`` whose mean is the
    published mean (:data:`PUBLISHED_GPT2_MEDIUM`). Labelled synthetic: the means are
    published, the trials are not.

    Parameters
    ----------
    trials : int, default 5
        Trials per budget (at least 2).
    cv : float, default 0.10
        Coefficient of variation of the trials.
    seed : int, default 0
        Seed of the numpy ``Generator``.

    Returns
    -------
    Sweep
        ``trials`` (backend ``mps``, model ``gpt2-medium``, a device name saying
        synthetic) and ``truth``: one anomaly from 512 to 624 whose ``ratio`` is the
        geometric mean of the plateau's published means over the straight line (in log
        budget, log latency) through the four flank means.

    Raises
    ------
    RegimesInputError
        When ``trials`` is below 2.

    See Also
    --------
    simulate_sweep : synthetic sweeps of any shape.

    References
    ----------
    .. [1] arXiv 2605.08913, "Non-Monotonic Latency in Apple MPS Decoding: KV Cache
       Interactions and Execution Regimes" (the published means).

    Examples
    --------
    >>> sweep = published_gpt2_medium(seed=0)
    >>> sweep.trials.height, sweep.truth.select("start", "end").row(0)
    (60, (512, 624))
    """
    if trials < 2:
        raise RegimesInputError(f"trials must be at least 2, got {trials}")
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
        raise RegimesInputError(f"trials must be at least 2, got {trials}")
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
