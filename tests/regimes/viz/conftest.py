"""Fixtures of the chart and report tests (all data synthetic)."""

from __future__ import annotations

import polars as pl
import pytest


@pytest.fixture(scope="session")
def two_backend_trials(synthetic_run) -> pl.DataFrame:
    """The cache-on curves, and the same cases on a second (synthetic) backend where
    the spiky model is smooth; memory grows smoothly with the budget (no step where
    the spike is).
    """
    base = synthetic_run.trials(instrumented=False, both_cache=False)
    other = base.filter(pl.col("model") == "synthetic-smooth")
    other = pl.concat([other, other.with_columns(pl.lit("synthetic-spiky").alias("model"))])
    trials = pl.concat([base, other.with_columns(pl.lit("synthetic-b").alias("backend"))])
    return trials.with_columns((pl.col("budget") * 4096 + 10**9).alias("mem_driver_bytes"))
