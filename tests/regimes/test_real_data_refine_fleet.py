"""Two committed H200 runs: a refinement against a known injected slowdown, and a fleet.

``cuda-h200-inject``: gpt2 over budgets 64..256 step 16 with every generation at a
budget in 105..201 slowed 3x (synthetic latencies on real hardware), refined on the GPU
by ``regimes refine``; the probes are in the run, so the brackets are read back here
without a GPU (no new generation is asked for).

``cuda-h200-fleet``: a sweep through a Dask scheduler and one worker on the same box.
"""

from pathlib import Path

import polars as pl

import regimes

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"


def test_the_gpu_refinement_brackets_the_injected_interval_to_the_token() -> None:
    result = regimes.refine_boundaries(DATA / "cuda-h200-inject", max_generations=0)
    brackets = result.boundaries.select("kind", "low", "high", "resolved").rows()
    assert sorted(brackets) == [("onset", 104, 105, True), ("recovery", 201, 202, True)]
    assert result.generations == 0  # read back, nothing measured here
    spent = int(result.boundaries["generations"].sum())
    assert spent / result.dense_generations <= 0.15


def test_the_injected_run_is_marked_synthetic_trial_by_trial() -> None:
    run = regimes.data.io.read_run(DATA / "cuda-h200-inject")
    assert run.meta["synthetic"] is True and run.meta["inject"]["factor"] == 3.0
    factor = run.trials.select(
        (pl.col("budget").is_between(105, 201) == (pl.col("injected_factor") == 3.0)).all()
    ).item()
    assert factor


def test_the_fleet_run_records_its_host_and_finds_nothing() -> None:
    run = regimes.data.io.read_run(DATA / "cuda-h200-fleet")
    assert set(run.trials["host"].unique()) == {"vm"}
    assert run.meta["fleet"]["hosts"]["vm"]["backends"]["cuda"]["device"] == "NVIDIA H200"
    assert run.trials.filter(~pl.col("warmup")).height == 24
    assert regimes.detect_regimes(run.trials).anomalies.height == 0
