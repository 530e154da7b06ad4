"""Fixtures shared across the test suite.

Test modules never import each other (pytest runs with ``--import-mode=importlib``, so
test files of the same basename may live in different folders). What several modules
need lives here, as fixtures.

All data built here is synthetic (``regimes.data.simulate``; run ids and model names
start with ``synthetic-``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from regimes.data.simulate import Sweep, simulate_sweep


class SyntheticRun:
    """A small synthetic sweep with one known spike, as trials or as a run directory.

    ``synthetic-spiky`` has a 4-budget spike of ``spike_ratio`` with the cache on; every
    other curve is smooth. Cache-off latency grows faster (quadratic), as without a KV
    cache. The spike covers budgets 96-144 (the sweep's truth).
    """

    grid = 16
    spike_ratio = 6.0
    spike_seed = 2

    def sweeps(self, *, both_cache: bool = True) -> list[tuple[str, bool, Sweep]]:
        """The synthetic curves of the run: ``(model, use_cache, sweep)``."""
        common: dict[str, Any] = dict(n_budgets=self.grid, trials=4, sessions=2)
        spiky = simulate_sweep(
            1, anomaly="spike", width=4, ratio=self.spike_ratio, seed=self.spike_seed, **common
        )
        curves = [
            ("synthetic-spiky", True, spiky),
            ("synthetic-smooth", True, simulate_sweep(1, seed=11, **common)),
        ]
        if both_cache:
            curves += [
                (
                    name,
                    False,
                    simulate_sweep(1, trend="quadratic", per_token_s=0.06, seed=seed, **common),
                )
                for name, seed in (("synthetic-spiky", 12), ("synthetic-smooth", 13))
            ]
        return curves

    @property
    def truth(self) -> dict[str, Any]:
        """The planted spike: ``start``, ``end``, ``ratio`` ..."""
        return self.sweeps()[0][2].truth.row(0, named=True)

    def trials(self, *, instrumented: bool = True, both_cache: bool = True) -> pl.DataFrame:
        """The trial table of :meth:`sweeps`, with phase times when instrumented."""
        trials = pl.concat(
            [
                sweep.trials.with_columns(
                    pl.lit(model).alias("model"), pl.lit(cache).alias("use_cache")
                )
                for model, cache, sweep in self.sweeps(both_cache=both_cache)
            ]
        ).drop("source")  # not a trial-table column; run_id still says synthetic
        if instrumented:
            # About 10 ms of prefill with 5% noise, never more than 30% of the latency.
            noise = np.random.default_rng(0).lognormal(0.0, 0.05, trials.height)
            prefill = pl.min_horizontal(pl.col("latency_s") * 0.3, pl.lit(noise) * 0.01)
            trials = trials.with_columns(
                prefill.alias("prefill_s"),
                (pl.col("latency_s") - prefill).alias("decode_s"),
                pl.lit(True).alias("instrumented"),
            )
        return trials

    def meta(self) -> dict[str, Any]:
        """The run metadata written next to the trials."""
        return {
            "name": "synthetic-report-test",
            "environment": {"os": "Linux (synthetic)", "torch": "synthetic", "chip": "none"},
            "env_vars": {"PYTORCH_ENABLE_MPS_FALLBACK": "1"},
            "spec": {"budgets": [16 * i for i in range(1, self.grid + 1)], "trials": 4},
        }

    def write(self, path: Path, *, instrumented: bool = True, both_cache: bool = True) -> Path:
        """Write :meth:`trials` as a run directory with metadata; return ``path``."""
        from regimes import RunWriter

        trials = self.trials(instrumented=instrumented, both_cache=both_cache)
        RunWriter(path, self.meta()).write_trials(trials)
        return path


@pytest.fixture(scope="session")
def synthetic_run() -> SyntheticRun:
    """The synthetic run shared by the report, chart, browser and CLI tests."""
    return SyntheticRun()
