"""A simulated probe oracle: latency from a known curve with an injected slow interval.

The stand-in for a collector in tests and benchmarks. Latency is drawn on the log scale
as a smooth curve (``intercept_s + per_token_s * budget``; with the cache off the cost
per token grows with the budget) times ``factor`` on the budgets ``start..stop``
(inclusive, like the collectors' ``inject`` key), times a per-session factor (every call
is one fresh session), times lognormal trial noise, with rare hiccups that slow one trial
1.5-3x. Every row is labelled synthetic (``run_id`` ``synthetic-refine-<seed>``, a
``source`` column ``synthetic``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

__all__ = ["DEFAULT_CASE", "SimulatedProbe"]

DEFAULT_CASE: dict[str, Any] = {
    "backend": "cpu",
    "device": "synthetic",
    "model": "synthetic-refine",
    "dtype": "float32",
    "use_cache": True,
    "prompt_tokens": 65,
}
"""The case columns of the simulated curve (cache on)."""


class SimulatedProbe:
    """A probe oracle with a known injected interval (synthetic data).

    Parameters
    ----------
    start, stop : int
        The injected interval of budgets, both inclusive.
    factor : float
        The slowdown inside it (latency times ``factor``).
    cv : float, default 0.05
        Trial noise (log-scale standard deviation).
    session_cv : float, default 0.02
        Per-session factor (log-scale standard deviation).
    hiccup_rate : float, default 0.01
        Share of trials slowed 1.5-3x by a hiccup.
    intercept_s, per_token_s : float, default 0.02, 0.001
        The smooth curve with the cache on.
    warmup : int, default 1
        Warm-up generations per case and session (stored, counted as generations).
    inject_cache : sequence of bool, default (True, False)
        Cache settings the injection slows (``(True,)`` makes the speedup collapse).
    seed : int, default 0
        Seed of the generator; the same calls give the same trials.
    """

    def __init__(
        self,
        start: int,
        stop: int,
        factor: float,
        *,
        cv: float = 0.05,
        session_cv: float = 0.02,
        hiccup_rate: float = 0.01,
        intercept_s: float = 0.02,
        per_token_s: float = 0.001,
        warmup: int = 1,
        inject_cache: Sequence[bool] = (True, False),
        seed: int = 0,
    ):
        self.start, self.stop, self.factor = int(start), int(stop), float(factor)
        self.cv, self.session_cv, self.hiccup_rate = cv, session_cv, hiccup_rate
        self.intercept_s, self.per_token_s = intercept_s, per_token_s
        self.warmup = int(warmup)
        self.inject_cache = tuple(bool(c) for c in inject_cache)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._session = 0
        self._order = 0

    def latency(self, budget: np.ndarray, case: Mapping[str, Any]) -> np.ndarray:
        """Return the noiseless latency (s) at ``budget`` for ``case``, injection included.

        Override it for other curves (the case holds ``use_cache``, ``prompt_tokens``...).
        """
        x = np.asarray(budget, dtype=float)
        use_cache = bool(case["use_cache"])
        per_token = self.per_token_s * (1.0 if use_cache else 1.0 + x / 256.0)
        inside = (x >= self.start) & (x <= self.stop) & (use_cache in self.inject_cache)
        return (self.intercept_s + per_token * x) * np.where(inside, self.factor, 1.0)

    def sweep(
        self,
        budgets: Sequence[int],
        trials: int = 3,
        sessions: int = 1,
        use_cache: Sequence[bool] = (True,),
        prompt_tokens: Sequence[int] = (65,),
    ) -> pl.DataFrame:
        """Measure a coarse grid: every budget (cache setting, prompt) in each session."""
        cases = [
            DEFAULT_CASE | {"use_cache": bool(c), "prompt_tokens": int(p)}
            for c in use_cache
            for p in prompt_tokens
        ]
        frames = [
            self._session_rows([(case, int(b), trials) for case in cases for b in budgets])
            for _ in range(sessions)
        ]
        return pl.concat(frames, how="vertical")

    def __call__(self, requests: Sequence[Any]) -> pl.DataFrame:
        """Measure ``requests`` in one fresh session; return the rows, warm-ups included.

        Each request has ``case``, ``budget`` and ``trials``.
        """
        return self._session_rows([(r.case, r.budget, r.trials) for r in requests])

    def _session_rows(self, work: Sequence[tuple[Mapping[str, Any], int, int]]) -> pl.DataFrame:
        rng = self._rng
        session, self._session = self._session, self._session + 1
        session_factor = rng.normal(0.0, self.session_cv)
        parts = []
        for case, budget, trials in work:
            case = DEFAULT_CASE | dict(case)
            total = self.warmup + trials
            log_y = (
                np.log(self.latency(np.full(total, budget), case))
                + session_factor
                + rng.normal(0.0, self.cv, total)
            )
            hiccup = rng.random(total) < self.hiccup_rate
            log_y += np.where(hiccup, np.log(rng.uniform(1.5, 3.0, total)), 0.0)
            warm = np.arange(total) < self.warmup
            parts.append(
                pl.DataFrame(
                    {
                        **{k: [v] * total for k, v in case.items()},
                        "budget": [budget] * total,
                        "trial": np.where(warm, np.arange(total), np.arange(total) - self.warmup),
                        "warmup": warm,
                        "latency_s": np.exp(log_y),
                    }
                )
            )
        frame = pl.concat(parts, how="vertical")
        order = np.arange(self._order, self._order + frame.height)
        self._order += frame.height
        return frame.with_columns(
            pl.lit(f"synthetic-refine-{self.seed}").alias("run_id"),
            pl.lit(session, dtype=pl.Int64).alias("session"),
            pl.Series("order", order, dtype=pl.Int64),
            pl.col("budget", "trial", "prompt_tokens").cast(pl.Int64),
            pl.col("budget").alias("new_tokens"),
            pl.lit(False).alias("instrumented"),
            pl.lit("synthetic").alias("source"),
        )
