"""memory_confound: memory that tracks a spike explains it; smooth memory does not.

All latency and memory data here are synthetic (seeded), with known ground truth.
"""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.explain.memory import memory_confound

BUDGETS = np.arange(128, 769, 64)
SPIKE = (448, 576)
SPIKE_RATIO = 8.0
MIB = 2**20


def synthetic_sweep(
    mechanism: str, seed: int = 0, trials: int = 5, budgets: np.ndarray = BUDGETS
) -> pl.DataFrame:
    """Synthetic MPS-like sweep with a spike over SPIKE and a memory reading per trial.

    ``tracked``: a memory-pressure variable drives latency everywhere (log latency rises
    by log(SPIKE_RATIO) per 800 MiB of pressure) and is high inside the spike, so memory
    accounts for the spike. ``smooth``: memory grows smoothly 1426 -> 1550 MiB (the
    published reading) and the spike is independent of it. ``collinear``: memory steps up
    by 500 MiB exactly where the spike is, with no effect of its own elsewhere.
    """
    rng = np.random.default_rng(seed)
    budget = np.repeat(budgets, trials)
    inside = (budget >= SPIKE[0]) & (budget <= SPIKE[1])
    noise = np.exp(0.1 * rng.standard_normal(budget.size))
    trend = 0.018 * budget
    smooth_mem = (1426 + (budget - 128) / 640 * 124) * MIB
    if mechanism == "tracked":
        pressure = np.where(
            inside, rng.normal(800, 80, budget.size), rng.uniform(0, 250, budget.size)
        )
        latency = trend * np.exp(np.log(SPIKE_RATIO) * pressure / 800) * noise
        memory = smooth_mem + pressure * MIB
    elif mechanism == "smooth":
        latency = trend * np.where(inside, SPIKE_RATIO, 1.0) * noise
        memory = smooth_mem + rng.normal(0, 2, budget.size) * MIB
    elif mechanism == "collinear":
        latency = trend * np.where(inside, SPIKE_RATIO, 1.0) * noise
        memory = smooth_mem + np.where(inside, 500, 0) * MIB + rng.normal(0, 0.5, budget.size) * MIB
    else:
        raise AssertionError(mechanism)
    return pl.DataFrame(
        {
            "backend": "mps",
            "model": f"synthetic-{mechanism}",
            "use_cache": True,
            "budget": budget,
            "trial": np.tile(np.arange(trials), budgets.size),
            "latency_s": latency,
            "mem_driver_bytes": memory.astype(np.int64),
        }
    )


def report_for(df: pl.DataFrame) -> SimpleNamespace:
    """A detection report holding the known spike of every model (ground truth)."""
    models = df.get_column("model").unique().sort()
    anomalies = pl.DataFrame(
        {
            "backend": "mps",
            "model": models,
            "use_cache": True,
            "start": SPIKE[0],
            "end": SPIKE[1],
        }
    )
    return SimpleNamespace(
        anomalies=anomalies,
        x="budget",
        y="latency_s",
        group_columns=["backend", "model", "use_cache"],
    )


@pytest.fixture(scope="module")
def both() -> pl.DataFrame:
    return pl.concat([synthetic_sweep("tracked", seed=1), synthetic_sweep("smooth", seed=2)])


def effect_of(result, mechanism: str) -> dict:
    return result.effects.filter(pl.col("model") == f"synthetic-{mechanism}").row(0, named=True)


def test_memory_that_tracks_the_spike_explains_it(both):
    result = memory_confound(both, report_for(both))
    row = effect_of(result, "tracked")
    assert row["ratio"] > 3  # the unadjusted spike is large ...
    assert row["adjusted_low"] < 1 < row["adjusted_high"]  # ... and gone with memory fixed
    assert row["memory_p_value"] < 1e-6
    assert row["explained_share"] > 0.8
    assert row["memory_step_mib"] > 400
    assert row["verdict"] == "explained"


def test_spike_independent_of_smooth_memory_survives(both):
    result = memory_confound(both, report_for(both))
    row = effect_of(result, "smooth")
    assert row["q_value"] < 1e-6
    assert row["adjusted_low"] < SPIKE_RATIO < row["adjusted_high"]
    assert abs(row["memory_step_mib"]) < 5
    assert abs(row["explained_share"]) < 0.1
    assert row["verdict"] == "survives"
    assert "survives" in result.summary() and "explained" in result.summary()


def test_detected_end_to_end():
    fine = np.arange(64, 1025, 32)
    df = pl.concat(
        [
            synthetic_sweep("tracked", seed=1, budgets=fine),
            synthetic_sweep("smooth", seed=2, budgets=fine),
        ]
    )
    report = regimes.detect_regimes(df, n_boot=200)
    smooth = report.anomalies.filter(pl.col("model") == "synthetic-smooth")
    assert smooth.select("start", "end").rows() == [SPIKE]
    verdicts = dict(memory_confound(df, report).effects.select("model", "verdict").iter_rows())
    assert verdicts["synthetic-smooth"] == "survives"
    assert verdicts.get("synthetic-tracked", "explained") == "explained"


def test_memory_that_moves_only_with_the_spike_is_inconclusive():
    df = synthetic_sweep("collinear", seed=3)
    row = memory_confound(df, report_for(df)).effects.row(0, named=True)
    assert row["collinearity"] > 0.95
    assert row["verdict"] == "inconclusive"


def test_fraction_of_null_readings_is_counted_not_hidden(both):
    holes = both.with_columns(
        pl.when(pl.int_range(pl.len()) % 7 == 0)
        .then(None)
        .otherwise(pl.col("mem_driver_bytes"))
        .alias("mem_driver_bytes")
    )
    result = memory_confound(holes, report_for(holes))
    counted = result.effects.get_column("n_missing_memory").sum()
    assert counted == holes.get_column("mem_driver_bytes").null_count() > 0
    assert (
        result.effects.get_column("n") + result.effects.get_column("n_missing_memory")
        == BUDGETS.size * 5
    ).all()


def test_invariant_to_latency_scale_and_row_order(both):
    base = memory_confound(both, report_for(both)).effects
    scaled = both.with_columns(pl.col("latency_s") * 1000).sample(
        fraction=1.0, shuffle=True, seed=5
    )
    moved = memory_confound(scaled, report_for(scaled)).effects
    for column in ("adjusted_ratio", "p_value", "memory_coef", "explained_share"):
        np.testing.assert_allclose(moved[column].to_numpy(), base[column].to_numpy(), rtol=1e-8)


def test_cluster_by_session_runs_and_keeps_the_estimate(both):
    sessions = both.with_columns((pl.col("trial") % 2).alias("session"))
    hc3 = memory_confound(sessions, report_for(sessions)).effects
    clustered = memory_confound(sessions, report_for(sessions), cov_type="cluster").effects
    np.testing.assert_allclose(clustered["adjusted_ratio"], hc3["adjusted_ratio"])
    assert not np.allclose(clustered["adjusted_high"], hc3["adjusted_high"])


def test_no_anomalies_gives_an_empty_result(both):
    empty = SimpleNamespace(anomalies=report_for(both).anomalies.clear(), x="budget")
    result = memory_confound(both, empty)
    assert result.effects.height == 0
    assert "no anomalies" in result.summary()


def test_missing_memory_column_is_a_clear_error(both):
    with pytest.raises(RegimesInputError, match="memory column 'rss_bytes' is missing"):
        memory_confound(both, report_for(both), memory="rss_bytes")


def test_all_null_memory_is_a_clear_error(both):
    nulls = both.with_columns(pl.lit(None, dtype=pl.Int64).alias("mem_driver_bytes"))
    with pytest.raises(RegimesInputError, match="null in every row"):
        memory_confound(nulls, report_for(nulls))


def test_not_a_report_is_a_clear_error(both):
    with pytest.raises(RegimesInputError, match="detection report"):
        memory_confound(both, both)


def test_public_name():
    assert regimes.memory_confound is memory_confound


def test_result_follows_the_protocol(result_protocol):
    df = synthetic_sweep("smooth", seed=2)
    result = memory_confound(df, report_for(df))
    result_protocol(result, regimes.MemoryResult, "MemoryConfound")
    assert result.params["memory"] == "mem_driver_bytes" and result.params["level"] == 0.95
    # the former fields stay readable
    assert (result.memory, result.alpha, result.cov_type) == ("mem_driver_bytes", 0.05, "HC3")


def test_level_is_the_interval_and_alpha_only_the_verdict():
    df = synthetic_sweep("smooth", seed=2)
    report = report_for(df)
    base = memory_confound(df, report).effects
    stricter = memory_confound(df, report, alpha=0.2).effects
    for column in ("ratio_low", "ratio_high", "adjusted_low", "memory_coef_high"):
        np.testing.assert_array_equal(stricter[column], base[column])
    narrower = memory_confound(df, report, level=0.8).effects
    assert (narrower["adjusted_low"] > base["adjusted_low"]).all()
    assert (narrower["adjusted_high"] < base["adjusted_high"]).all()
    with pytest.raises(RegimesInputError, match="level must lie in"):
        memory_confound(df, report, level=95)


def test_without_a_report_the_anomalies_are_detected_with_the_same_options():
    df = synthetic_sweep("smooth", seed=2)
    report = regimes.detect_regimes(df, n_boot=200, seed=1, level=0.9)
    given = memory_confound(df, report, level=0.9)
    detected = memory_confound(df, n_boot=200, seed=1, level=0.9)
    assert detected.effects.equals(given.effects)
    assert detected.params["level"] == 0.9 and detected.params["x"] == "budget"
    with pytest.raises(RegimesInputError, match="apply only when no report is given"):
        memory_confound(df, report, n_boot=500)


def test_group_without_readings_is_untested_not_an_error(both):
    holes = both.with_columns(
        pl.when(pl.col("model") == "synthetic-tracked")
        .then(None)
        .otherwise(pl.col("mem_driver_bytes"))
        .alias("mem_driver_bytes")
    )
    result = memory_confound(holes, report_for(holes))
    assert result.effects.get_column("model").to_list() == ["synthetic-smooth"]
    assert result.untested.select("model", "anomaly").rows() == [("synthetic-tracked", 1)]
    assert "null in every row of the group" in result.status
    assert "not testable here" in result.summary()
