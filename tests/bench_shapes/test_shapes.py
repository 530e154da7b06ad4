"""The randomised sweep shapes of bench/shapes.py and the scores of bench/trust.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import shapes  # noqa: E402
import trust  # noqa: E402


@pytest.mark.parametrize("family", shapes.FAMILIES)
@pytest.mark.parametrize("variant", shapes.VARIANTS)
def test_every_curve_is_a_valid_synthetic_trial_table(family, variant):
    batch = shapes.make_family(family, variant, 12, seed=3)
    assert len(batch.frames) == len(batch.shapes) == batch.designs.height == 12
    assert batch.truth.height == (12 if variant == "anomaly" else 0)
    for frame, shape in zip(batch.frames, batch.shapes, strict=True):
        assert frame["run_id"].str.starts_with("synthetic-").all()
        assert (frame["device"] == "synthetic").all()
        assert frame["order"].to_list() == list(range(frame.height))
        assert frame["budget"].n_unique() == len(shape.budgets)
        assert 6 <= len(shape.budgets) <= (10 if family == "short_geometric" else 60)
        trials = frame.group_by("budget", "session").agg(pl.col("trial").sort())
        assert all(t.to_list() == list(range(len(t))) for t in trials["trial"])
        assert (frame["latency_s"] > 0).all()
    for row in batch.truth.iter_rows(named=True):
        grid = batch.shapes[int(row["curve"][-4:])].budgets
        assert row["start"] in grid and row["end"] in grid and row["start"] <= row["end"]


def test_fresh_processes_hold_one_budget_and_shared_ones_span_the_grid():
    rng = np.random.default_rng(0)
    base = shapes.draw_shape(rng, "first_trial")
    for processes, budgets_per_session in (("fresh", 1), ("shared", len(base.budgets))):
        shape = shapes.replace(base, processes=processes, sessions=2)
        frame = shapes.simulate(shape, [], rng, "c")
        per = frame.group_by("session").agg(pl.col("budget").n_unique())["budget"]
        assert (per == budgets_per_session).all()


def test_blocked_order_runs_budgets_in_turn():
    rng = np.random.default_rng(1)
    shape = shapes.replace(
        shapes.draw_shape(rng, "drift"), processes="shared", sessions=1, order="blocked"
    )
    frame = shapes.simulate(shape, [], rng, "c")
    assert frame["budget"].to_list() == sorted(frame["budget"].to_list())


def test_a_planted_anomaly_stays_inside_the_grid_interior():
    rng = np.random.default_rng(2)
    for t in (6, 9, 60):
        for _ in range(50):
            spike = shapes.place(rng, t, "spike", 2.0, int(rng.integers(1, 5)))
            assert spike.first >= 1 and spike.last <= t - 2
            step = shapes.place(rng, t, "step", 2.0)
            assert step.last == t - 1 and step.first >= 2


class _Pool:
    """Answers every calibration curve with the anomaly planted in it."""

    def map(self, function, jobs, chunksize=1):
        out = []
        for frame, _ in jobs:
            ratio = frame.group_by("budget").agg(pl.col("latency_s").median()).sort("budget")
            level = np.log(ratio["latency_s"].to_numpy())
            excess = level - np.interp(np.arange(level.size), [0, level.size - 1], level[[0, -1]])
            at = int(np.argmax(excess))
            budget = int(ratio["budget"][at])
            found = pl.DataFrame({"start": [budget], "end": [budget], "ratio": [2.0]})
            out.append(dict(error=None, anomalies=found, untested=False, detectable=None))
        return out


def test_scores_read_bounds_and_sensitivity_where_the_result_has_them():
    batch = shapes.make_family("mixed", "anomaly", 4, seed=5)
    outcomes = []
    for row in batch.truth.iter_rows(named=True):
        found = pl.DataFrame(
            {
                "start": [row["start"]],
                "end": [row["end"]],
                "ratio": [row["ratio"]],
                **{b: [row["start" if b.startswith("start") else "end"]] for b in trust.BOUNDS},
            }
        )
        outcomes.append(dict(error=None, anomalies=found, significant=0, untested=False))
    rows = {r["metric"]: r for r in trust.score_anomaly("mixed", "anomaly", batch, outcomes)}
    assert rows["recall"]["value"] == 1.0
    assert rows["exact boundaries (of found)"]["value"] == 1.0
    assert rows["bounds hold start and end"]["value"] == 1.0
    assert rows["start bound width (grid steps, median)"]["value"] == 0.0

    null = shapes.make_family("mixed", "null", 3, seed=5)
    reported = [dict(detectable=2.0), dict(detectable=float("inf")), dict(detectable=None)]
    rows = {r["metric"]: r for r in trust.calibration("mixed", null, reported, _Pool(), 0)}
    assert rows["detectable ratio over 3 (inconclusive)"]["n"] == 2
    assert rows["spike at width-2 detectable ratio found"]["n"] == 1


def test_a_call_that_raises_is_counted_not_fatal():
    frame = shapes.make_family("drift", "null", 1, seed=1).frames[0].drop("latency_s")
    outcome = trust.analyse((frame, "up"))
    assert outcome["error"] is not None
    rows = {r["metric"]: r for r in trust.score_null("drift", "null", [outcome])}
    assert rows["call raised"]["value"] == 1.0 and rows["any anomaly"]["n"] == 0
