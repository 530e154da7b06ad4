"""The committed real runs: they load with the schema, carry their provenance, and
analyse as the published record says CPU and CUDA behave (smooth, no anomaly)."""

from pathlib import Path

import polars as pl
import pytest

import regimes

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
CUDA_RUN = DATA / "cuda-h200-gpt2"


@pytest.fixture(scope="module")
def cuda_run():
    return regimes.read_run(CUDA_RUN)


@pytest.mark.parametrize("run_dir", ["cuda-h200-gpt2", "cpu-distilgpt2"])
def test_run_loads_with_the_schema_exact_budgets_and_no_errors(run_dir):
    run = regimes.read_run(DATA / run_dir)
    assert run.trials.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    assert (run.trials["new_tokens"] == run.trials["budget"]).all()
    assert run.errors.height == 0


def test_cuda_run_has_both_sessions_of_every_cell(cuda_run):
    trials = cuda_run.trials
    assert set(trials["backend"]) == {"cuda"} and set(trials["device"]) == {"NVIDIA H200"}
    assert set(trials["use_cache"]) == {True, False}
    measured = trials.filter(~pl.col("warmup"))
    per_cell = measured.group_by("budget", "use_cache").len()["len"]
    assert per_cell.min() >= 4, "every cell holds session 0's three trials and at least one of session 1"
    assert measured.select("session", "budget", "use_cache", "trial").is_duplicated().sum() == 0


def test_cuda_run_carries_its_provenance(cuda_run):
    meta = cuda_run.meta
    environment = meta["environment"]
    assert environment["backends"]["cuda"]["device"] == "NVIDIA H200"
    assert environment["torch"].startswith("2.11") and environment["transformers"] == "5.17.0"
    assert "collect" in meta["command"] and meta["spec"]["models"] == ["gpt2"]
    assert meta["spec"]["weights"] == "random"


def test_cuda_latency_stays_smooth(cuda_run):
    report = regimes.detect_regimes(cuda_run.trials)
    assert report.anomalies.height == 0
    # The trend explains the medians: no cell sits more than 1.5x off it.
    ratios = report.curve["ratio"]
    assert ratios.min() > 1 / 1.5 and ratios.max() < 1.5


def test_cuda_latency_grows_with_budget(cuda_run):
    medians = (
        cuda_run.trials.filter(~pl.col("warmup"))
        .group_by("use_cache", "budget").agg(pl.col("latency_s").median())
        .sort("budget")
    )
    for _, curve in medians.group_by("use_cache"):
        first, last = curve["latency_s"][0], curve["latency_s"][-1]
        assert last > 10 * first  # 512 tokens against 16


CPU_RUN = DATA / "cpu-distilgpt2"


@pytest.fixture(scope="module")
def cpu_run():
    return regimes.read_run(CPU_RUN)


def test_cpu_run_is_complete_with_provenance(cpu_run):
    measured = cpu_run.trials.filter(~pl.col("warmup"))
    assert measured.group_by("budget", "use_cache").len()["len"].to_list() == [3] * 32
    assert cpu_run.meta["environment"]["env"]["OMP_NUM_THREADS"] == "1"
    assert cpu_run.meta["spec"]["models"] == ["distilgpt2"]


def test_cpu_latency_stays_smooth_and_the_cache_pays_off_more_with_budget(cpu_run):
    report = regimes.detect_regimes(cpu_run.trials)
    assert report.anomalies.height == 0
    speedup = regimes.cache_speedup(cpu_run.trials)
    assert speedup.collapses.height == 0
    by_budget = speedup.speedup.sort("budget")
    assert (by_budget["ci_low"] > 1).all()
    assert by_budget["speedup"][-1] > 1.5 * by_budget["speedup"][0]
