"""Synthetic sweeps: labelled synthetic, reproducible, and faithful to their truth."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from regimes import validate_trials
from regimes.data.simulate import PUBLISHED_GPT2_MEDIUM, published_gpt2_medium, simulate_sweep


def test_sweep_is_labelled_synthetic_and_valid() -> None:
    sweep = simulate_sweep(3, anomaly="spike", seed=4)
    trials = validate_trials(sweep.trials)
    assert (trials["source"] == "synthetic").all()
    assert trials["run_id"].str.starts_with("synthetic-").all()
    assert trials["model"].str.starts_with("synthetic-").all()
    assert sweep.truth.height == 3 and sweep.truth["is_anomaly"].all()
    assert (trials["new_tokens"] == trials["budget"]).all()


def test_same_seed_same_sweep_and_different_seed_differs() -> None:
    a = simulate_sweep(2, anomaly="step", trials=(3, 6), cv=(0.02, 0.1), seed=7)
    b = simulate_sweep(2, anomaly="step", trials=(3, 6), cv=(0.02, 0.1), seed=7)
    c = simulate_sweep(2, anomaly="step", trials=(3, 6), cv=(0.02, 0.1), seed=8)
    assert a.trials.equals(b.trials) and a.truth.equals(b.truth)
    assert not a.trials["latency_s"].equals(c.trials["latency_s"])


@pytest.mark.parametrize("kind", ["spike", "plateau", "step"])
def test_anomaly_multiplies_the_true_interval(kind: str) -> None:
    # noise-free: every cell's latency is the trend times the anomaly's ratio
    sweep = simulate_sweep(
        1,
        anomaly=kind,
        cv=0.0,
        hiccup_rate=0.0,
        session_cv=0.0,
        ratio=3.0,
        width=3,
        trials=2,
        n_budgets=24,
        seed=1,
    )
    truth = sweep.truth.row(0, named=True)
    cells = sweep.trials.group_by("budget").agg(pl.col("latency_s").first()).sort("budget")
    budgets, latency = cells["budget"].to_numpy(), cells["latency_s"].to_numpy()
    inside = (budgets >= truth["start"]) & (budgets <= truth["end"])
    assert inside.sum() >= 2
    # latency is a + b x outside; dividing inside by 3 must land on the same line
    corrected = np.where(inside, latency / 3.0, latency)
    slope, intercept = np.polyfit(budgets, corrected, 1)
    assert np.allclose(corrected, intercept + slope * budgets, rtol=1e-9)
    assert truth["recovered"] == (kind != "step")
    if kind == "step":
        assert truth["end"] == budgets.max()
    else:
        assert truth["start"] >= budgets[2] and truth["end"] <= budgets[-3]


def test_slope_change_is_continuous() -> None:
    sweep = simulate_sweep(
        1,
        anomaly="slope",
        cv=0.0,
        hiccup_rate=0.0,
        session_cv=0.0,
        slope_factor=2.0,
        trials=2,
        seed=3,
    )
    kink = sweep.truth["kink_x"][0]
    cells = sweep.trials.group_by("budget").agg(pl.col("latency_s").first()).sort("budget")
    per_token = np.diff(cells["latency_s"].to_numpy()) / np.diff(cells["budget"].to_numpy())
    before = per_token[cells["budget"].to_numpy()[1:] <= kink]
    after = per_token[cells["budget"].to_numpy()[:-1] >= kink]
    assert np.allclose(before, before[0]) and np.allclose(after, after[0])
    assert after[0] == pytest.approx(2.0 * before[0])  # cost doubles, no jump
    assert not sweep.truth["is_anomaly"][0]


def test_slow_process_hits_one_session_at_one_budget() -> None:
    sweep = simulate_sweep(
        1,
        anomaly="slow_process",
        sessions=3,
        cv=0.0,
        hiccup_rate=0.0,
        session_cv=0.0,
        slow_ratio=2.5,
        trials=2,
        seed=5,
    )
    slow_x = sweep.truth["slow_x"][0]
    per_session = sweep.trials.group_by("budget", "session").agg(pl.col("latency_s").first())
    at = per_session.filter(pl.col("budget") == slow_x).sort("latency_s")["latency_s"].to_numpy()
    assert at[-1] / at[0] == pytest.approx(2.5) and at[1] == pytest.approx(at[0])
    with pytest.raises(ValueError, match="sessions >= 2"):
        simulate_sweep(1, anomaly="slow_process", sessions=1)


def test_per_cell_sessions_are_fresh_processes() -> None:
    sweep = simulate_sweep(1, sessions=2, session_design="per_cell", n_budgets=10, seed=2)
    per_cell = sweep.trials.group_by("budget").agg(pl.col("session").n_unique())
    assert (per_cell["session"] == 2).all()
    assert sweep.trials["session"].n_unique() == 20


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="anomaly"):
        simulate_sweep(anomaly="bump")
    with pytest.raises(ValueError, match="trend"):
        simulate_sweep(trend="cubic")


def test_published_example_reproduces_the_means() -> None:
    sweep = published_gpt2_medium(trials=400, cv=0.10, seed=0)
    assert (sweep.trials["source"] == "synthetic").all()
    means = sweep.trials.group_by("budget").agg(pl.col("latency_s").mean()).sort("budget")
    published = np.array(list(PUBLISHED_GPT2_MEDIUM.values()))
    assert np.allclose(means["latency_s"].to_numpy(), published, rtol=0.03)
    # one process per budget, as the authors ran a fresh server per case
    assert sweep.trials.group_by("budget").agg(pl.col("session").n_unique())["session"].max() == 1
    truth = sweep.truth.row(0, named=True)
    assert (truth["start"], truth["end"]) == (512, 624) and 9.0 < truth["ratio"] < 13.0
