"""Profiled sweeps on a fleet: the ``ops`` table comes back and is merged like the trials.

An in-process client on a Dask ``LocalCluster`` (one worker process) runs real sweeps of
tiny-gpt2 on this CPU; the profiled one with a slowdown injected (synthetic timings).
"""

from __future__ import annotations

import json

import polars as pl
import pytest

import regimes
from collectors.spec import SweepSpec

pytest.importorskip("distributed")

BASE = {
    "models": ["tiny-gpt2"],
    "backends": ["cpu"],
    "warmup": 0,
    "isolation": "process",
    "engine": "loop",
    "attn_implementation": "sdpa",
}


def test_a_fleet_brings_the_profiles_back_once(local_cluster, tmp_path):
    from collectors.fleet import run_fleet_sweep

    spec = SweepSpec.from_dict(
        {**BASE, "budgets": [2, 4, 8], "trials": 1, "profile": {"budgets": [4, 8], "trials": 2}}
    )
    path = tmp_path / "run"
    result = run_fleet_sweep(spec, path, local_cluster, progress=False)
    assert result.status == "complete" and result.measured_on_disk == 3
    assert result.profiled == 4  # counted on the bar as they come back
    run = regimes.read_run(path)
    ops = run.ops
    generations = ops.select("budget", "session", "trial").unique().sort("budget", "trial")
    assert generations.rows() == [(4, 0, 0), (4, 0, 1), (8, 0, 0), (8, 0, 1)]
    assert set(ops.get_column("run_id")) == {run.meta["run_id"]}
    assert set(ops.get_column("host")) <= set(run.meta["fleet"]["hosts"])
    assert run.trials.height == 3  # no profiled generation among the trials
    again = run_fleet_sweep(spec, path, local_cluster, progress=False)  # nothing left
    assert again.status == "complete" and again.measured == 0
    assert regimes.read_run(path).ops.height == ops.height


def test_a_fleet_profiles_the_budgets_auto_chose(local_cluster, tmp_path):
    from collectors.fleet import run_fleet_sweep

    spec = SweepSpec.from_dict(
        {
            **BASE,
            "budgets": list(range(4, 40, 4)),
            "trials": 3,
            "inject": {"start": 16, "stop": 24, "factor": 5.0},
            "profile": {"budgets": "auto", "trials": 1, "min_ratio": 2.0},
        }
    )
    path = tmp_path / "run"
    result = run_fleet_sweep(spec, path, local_cluster, progress=False)
    assert result.status == "complete"
    budgets = json.loads((path / "meta.json").read_text())["profile_auto"]["budgets"]
    assert min(budgets) < 16 and max(budgets) > 24 and min(budgets) >= 8 and max(budgets) <= 32
    ops = regimes.load(path, table="ops")
    assert sorted(set(ops.get_column("budget"))) == budgets
    assert regimes.load(path).filter(~pl.col("warmup")).height == 27
    assert any(m.startswith('profile = "auto": profiling budgets') for m in result.messages)
