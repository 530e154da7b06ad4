"""End to end: a sweep through a real `transformers serve` on loopback, then analysed."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import regimes
from collectors.spec import SweepSpec
from collectors.sweep import run_sweep


def test_a_sweep_through_transformers_serve_is_collected_and_analysed(
    transformers_server, tmp_path
):
    url, model = transformers_server
    spec = SweepSpec.from_dict(
        {
            "endpoint": {"url": url, "model": model},
            "budgets": [4, 8, 12, 16],
            "prompt_tokens": [10],
            "trials": 2,
            "warmup": 1,
        }
    )
    result = run_sweep(spec, tmp_path / "run", progress=False, hygiene={})
    assert result.status == "complete" and result.measured_on_disk == 8
    run = regimes.read_run(tmp_path / "run")
    assert run.errors.height == 0
    trials = run.trials.filter(~pl.col("warmup"))
    assert (trials["new_tokens"] == trials["budget"]).all()
    assert trials["prefill_s"].is_not_null().all()
    assert run.meta["endpoint"]["identity"]["server"] == "uvicorn"
    # transformers serve refuses ignore_eos; the tiny model has no EOS, so nothing is short
    assert any(e["event"] == "refused ignore_eos" for e in run.meta["endpoint_log"])
    steps = run.steps.filter(~pl.col("warmup")).group_by("budget", "trial").len()
    assert (steps["len"] == steps["budget"]).all()
    report = regimes.detect_regimes(regimes.load(tmp_path / "run"))
    assert report.curve.height == 4
    assert set(report.curve["backend"]) == {"endpoint"}


def test_the_committed_endpoint_run_carries_its_provenance_and_is_smooth():
    path = Path(__file__).resolve().parents[3] / "examples" / "data" / "cpu-transformers-serve"
    run = regimes.read_run(path)
    endpoint = run.meta["endpoint"]
    assert endpoint["url"] == "http://127.0.0.1:8000/v1" and "@" not in endpoint["url"]
    assert endpoint["identity"]["server"] == "uvicorn" and endpoint["client"]["httpx-sse"]
    assert run.meta["spec"]["endpoint"]["model"] == "build/tiny-served"
    assert run.steps.height == int(run.trials["budget"].sum())
    report = regimes.detect_regimes(regimes.load(path))
    assert report.anomalies.height == 0 and report.curve.height == 12
