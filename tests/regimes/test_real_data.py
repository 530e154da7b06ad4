"""The committed real runs: they load with the schema, are complete, carry their
provenance, and analyse as the published record says CPU and CUDA behave (smooth, no
anomaly, no KV-cache collapse)."""

from pathlib import Path

import polars as pl
import pytest

import regimes

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
CUDA_RUNS = [
    "cuda-h200-gpt2",
    "cuda-h200-opt125m",
    "cuda-h200-instrumented",
    "cuda-h200-gpt2-medium-window",
    "cuda-h200-gpt2-rerun",
]
ALL_RUNS = [*CUDA_RUNS, "cpu-distilgpt2"]


@pytest.fixture(scope="module", params=ALL_RUNS)
def run(request):
    return regimes.read_run(DATA / request.param)


@pytest.fixture(scope="module", params=CUDA_RUNS)
def cuda_run(request):
    return regimes.read_run(DATA / request.param)


def test_run_loads_with_the_schema_exact_budgets_and_no_errors(run):
    assert run.trials.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    assert (run.trials["new_tokens"] == run.trials["budget"]).all()
    assert run.errors.height == 0


def test_run_is_complete_every_cell_holds_every_trial_of_every_session(run):
    spec = run.meta["spec"]
    measured = run.trials.filter(~pl.col("warmup"))
    assert measured.select("session", "budget", "use_cache", "trial").is_duplicated().sum() == 0
    per_cell = measured.group_by("budget", "use_cache").len()["len"]
    assert per_cell.to_list() == [spec["trials"] * spec["sessions"]] * (
        len(spec["budgets"]) * len(spec["use_cache"])
    )
    assert set(measured["budget"]) == set(spec["budgets"])
    assert set(measured["session"]) == set(range(spec["sessions"]))


@pytest.mark.parametrize("run_dir", ["cuda-h200-gpt2", "cuda-h200-opt125m", "cuda-h200-gpt2-rerun"])
def test_fresh_process_sessions_ran_in_distinct_processes(run_dir):
    run = regimes.read_run(DATA / run_dir)
    assert run.meta["spec"]["isolation"] == "process" and run.meta["spec"]["sessions"] == 2
    measured = run.trials.filter(~pl.col("warmup"))
    processes = measured.group_by("session").agg(pl.col("process_id").unique())
    first, second = (set(ids) for ids in processes["process_id"])
    assert not first & second, "no process served two sessions"


def test_cuda_run_carries_its_provenance(cuda_run):
    meta = cuda_run.meta
    environment = meta["environment"]
    assert set(cuda_run.trials["backend"]) == {"cuda"}
    assert set(cuda_run.trials["device"]) == {"NVIDIA H200"}
    assert environment["backends"]["cuda"]["device"] == "NVIDIA H200"
    assert environment["torch"].startswith("2.11") and environment["transformers"] == "5.17.0"
    assert "collect" in meta["command"] and meta["spec"]["weights"] == "random"


def test_cuda_latency_stays_smooth_and_the_cache_never_collapses(cuda_run):
    report = regimes.detect_regimes(cuda_run.trials)
    assert report.anomalies.height == 0
    # The trend explains the medians: no cell sits more than 1.5x off it.
    ratios = report.curve["ratio"]
    assert ratios.min() > 1 / 1.5 and ratios.max() < 1.5
    if set(cuda_run.trials["use_cache"]) == {True, False}:
        assert regimes.cache_speedup(cuda_run.trials).collapses.height == 0


def test_the_published_mps_window_is_smooth_on_cuda():
    """gpt2-medium over 480..656, where the published MPS run is 9-12x slower from 512 to
    624 than around it: on the H200 no budget there sits far off the trend."""
    from regimes.data.simulate import PUBLISHED_GPT2_MEDIUM

    run = regimes.read_run(DATA / "cuda-h200-gpt2-medium-window")
    assert set(run.trials["budget"]) == set(PUBLISHED_GPT2_MEDIUM)
    assert run.meta["spec"]["models"] == ["gpt2-medium"] and run.meta["spec"]["use_cache"] == [True]
    report = regimes.detect_regimes(run.trials)
    assert report.anomalies.height == 0 and report.change_points.height == 0
    window = report.curve.filter(pl.col("budget").is_between(512, 624))
    assert window["ratio"].max() < 1.5


def test_cuda_latency_grows_with_budget(cuda_run):
    medians = (
        cuda_run.trials.filter(~pl.col("warmup"))
        .group_by("use_cache", "budget")
        .agg(pl.col("latency_s").median())
        .sort("budget")
    )
    budgets = medians["budget"]
    for _, curve in medians.group_by("use_cache"):
        first, last = curve["latency_s"][0], curve["latency_s"][-1]
        # Host-bound decoding on the GPU: latency close to proportional to the budget.
        assert last > 0.5 * (budgets.max() / budgets.min()) * first


def test_instrumented_run_splits_every_trial_into_prefill_and_one_step_per_token():
    run = regimes.read_run(DATA / "cuda-h200-instrumented")
    trials = run.trials
    assert trials["instrumented"].all()
    assert (trials["prefill_s"] + trials["decode_s"] - trials["latency_s"]).abs().max() < 1e-6
    assert (trials["prefill_s"] > 0).all() and (trials["decode_s"] > 0).all()
    keys = ["session", "use_cache", "budget", "trial", "warmup"]
    steps = run.steps.group_by(keys).agg(pl.len().alias("n_steps"), pl.col("step").max())
    joined = trials.join(steps, on=keys, how="left")
    assert joined["n_steps"].null_count() == 0, "every trial has its steps"
    assert (joined["n_steps"] == joined["budget"]).all()
    assert (joined["step"] == joined["budget"] - 1).all()


def test_cpu_run_ran_single_threaded_with_provenance():
    cpu_run = regimes.read_run(DATA / "cpu-distilgpt2")
    assert cpu_run.meta["environment"]["env"]["OMP_NUM_THREADS"] == "1"
    assert cpu_run.meta["spec"]["models"] == ["distilgpt2"]


def test_cpu_latency_stays_smooth_and_the_cache_pays_off_more_with_budget():
    cpu_run = regimes.read_run(DATA / "cpu-distilgpt2")
    report = regimes.detect_regimes(cpu_run.trials)
    assert report.anomalies.height == 0
    speedup = regimes.cache_speedup(cpu_run.trials)
    assert speedup.collapses.height == 0
    by_budget = speedup.speedup.sort("budget")
    assert (by_budget["ci_low"] > 1).all()
    assert by_budget["speedup"][-1] > 1.5 * by_budget["speedup"][0]


def test_the_h200_rerun_shows_a_uniform_shift_and_no_regime_change():
    """The same gpt2 sweep on the H200 a day later: no regime in either run, and the
    whole curve moved together (a significant uniform shift, both cache settings)."""
    res = regimes.compare_runs(DATA / "cuda-h200-gpt2", DATA / "cuda-h200-gpt2-rerun")
    assert res.changes.height == 0
    assert res.unmatched.height == 0
    shift = res.shift.sort("use_cache")
    assert shift.height == 2
    assert (shift["q_value"] < 0.05).all()
    assert (shift["shift_high"] < 1.0).all()  # the rerun is faster everywhere
    assert ((shift["shift"] > 0.7) & (shift["shift"] < 0.9)).all()
    assert not res.budgets["differs"].any()  # no budget departs from the shift
