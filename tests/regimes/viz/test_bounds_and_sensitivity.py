"""The detection's bounds drawn and written, and what a negative result could have seen.

Every table here is synthetic (:func:`regimes.simulate_sweep`).
"""

from __future__ import annotations

import dataclasses
import io
import json

import polars as pl
import pytest

import regimes
from regimes._findings import anomaly_findings, hygiene_warnings, sensitivity_findings
from regimes.analysis import analyze
from regimes.cli import main
from regimes.data.io import RunWriter
from regimes.viz.html import build_report, headlines

GRID = dict(n_budgets=16, trials=3, sessions=2)

HYGIENE = ["load average 5.2 over the last minute on 2 CPUs", "3 busy processes"]


@pytest.fixture(scope="module")
def spiky():
    trials = regimes.simulate_sweep(1, anomaly="spike", ratio=3.0, seed=1, **GRID).trials
    rep = regimes.detect_regimes(trials, n_boot=100)
    assert rep.anomalies.select("start", "end").rows() == [(48, 64)]
    wide = rep.anomalies.with_columns(
        start_low=pl.lit(32), start_high=pl.lit(48), end_low=pl.lit(64), end_high=pl.lit(80)
    )
    return trials, dataclasses.replace(rep, anomalies=wide)


@pytest.fixture(scope="module")
def smooth():
    trials = regimes.simulate_sweep(2, seed=3, **GRID).trials
    rep = regimes.detect_regimes(trials, n_boot=100)
    assert rep.anomalies.height == 0
    return trials, rep


def _with_ratios(rep, ratios: dict[str, float]):
    """``rep`` with its width-2 detectable ratios (by model) and statuses set."""
    status = pl.when(pl.col("detectable_ratio") > 3).then(pl.lit("inconclusive"))
    table = rep.sensitivity.with_columns(
        pl.when(pl.col("width") == 2)
        .then(pl.col("model").replace_strict(ratios, return_dtype=pl.Float64))
        .otherwise(pl.col("detectable_ratio"))
        .alias("detectable_ratio")
    ).with_columns(status.otherwise(pl.lit("tested")).alias("status"))
    return dataclasses.replace(rep, sensitivity=table)


def _spec_rows(chart) -> pl.DataFrame:
    spec = chart.to_dict()
    data = spec["data"]
    values = spec["datasets"][data["name"]] if "name" in data else data["values"]
    return pl.read_csv(io.StringIO(values), infer_schema_length=None)


def test_latency_chart_brackets_each_boundary_between_its_bounds(spiky):
    trials, rep = spiky
    chart = regimes.plot.latency_chart(rep, trials)
    rows = _spec_rows(chart).filter(pl.col("part") == "bounds")
    assert rows.select("boundary", "bound_low", "bound_high").rows() == [
        ("onset", 32, 48),
        ("end", 64, 80),
    ]
    layers = chart.to_dict()["vconcat"][0]["spec"]["layer"]
    drawn = [
        layer
        for layer in layers
        if any("'bounds'" in str(t.get("filter", "")) for t in layer.get("transform", []))
    ]
    rule = next(layer for layer in drawn if layer["mark"]["type"] == "rule")
    assert rule["encoding"]["x"]["field"] == "bound_low"
    assert rule["encoding"]["x2"]["field"] == "bound_high"
    assert {layer["mark"]["type"] for layer in drawn} == {"rule", "tick"}


def test_a_result_without_bounds_draws_no_bracket(spiky):
    trials, rep = spiky
    bare = dataclasses.replace(
        rep, anomalies=rep.anomalies.drop("start_low", "start_high", "end_low", "end_high")
    )
    rows = _spec_rows(regimes.plot.latency_chart(bare, trials))
    assert rows.filter(pl.col("part") == "bounds").height == 0


def test_the_findings_name_the_bounds_of_an_uncertain_boundary(spiky):
    _, rep = spiky
    (line,) = anomaly_findings(rep)
    assert "at budgets 48..64 (onset within budgets 32..48, end within budgets 64..80) is" in line
    sharp = rep.anomalies.with_columns(start_low=pl.col("start"), end_high=pl.col("end"))
    (plain,) = anomaly_findings(dataclasses.replace(rep, anomalies=sharp))
    assert "within" not in plain


def test_the_report_draws_and_writes_the_bounds(spiky):
    trials, rep = spiky
    report = build_report(analyze(trials, detection=rep))
    rows = _spec_rows(dict(report.figures())["latency"]).filter(pl.col("part") == "bounds")
    assert rows.height == 2
    assert any("onset within budgets 32..48" in line for line in report.findings())


def test_sensitivity_sentences_for_tested_and_inconclusive_curves(smooth):
    _, rep = smooth
    models = rep.groups.get_column("model").to_list()
    shaped = _with_ratios(rep, {models[0]: 1.326, models[1]: 4.04})
    assert sensitivity_findings(shaped) == [
        f"{models[0]}: no anomaly; spikes of 1.4x or more over 2 budgets would have been found",
        f"{models[1]}: inconclusive: only spikes of 4.1x or more over 2 budgets could have "
        "been found",
    ]
    # the negative headline is the sensitivity, not "follows its smooth trend"
    assert headlines(shaped) == sensitivity_findings(shaped)


def test_a_curve_with_an_anomaly_gets_no_negative_sentence(spiky):
    _, rep = spiky
    model = rep.groups.get_column("model")[0]
    assert sensitivity_findings(_with_ratios(rep, {model: 1.3})) == []
    (line,) = sensitivity_findings(_with_ratios(rep, {model: 3.5}))
    assert (
        line
        == "beside its anomaly, only spikes of 3.5x or more over 2 budgets could have been found"
    )
    (line,) = sensitivity_findings(_with_ratios(rep, {model: float("inf")}))
    assert "over 10x over 2 budgets" in line and "or more" not in line


def test_hygiene_warnings_are_read_from_a_local_and_a_fleet_run():
    assert hygiene_warnings({"hygiene": {"warnings": HYGIENE}}) == HYGIENE
    fleet = {"fleet": {"hosts": {"a": {"hygiene": {"warnings": ["on battery"]}}, "b": {}}}}
    assert hygiene_warnings(fleet) == ["host a: on battery"]
    assert hygiene_warnings({}) == [] and hygiene_warnings({"hygiene": None}) == []


@pytest.fixture()
def smooth_run(smooth, tmp_path):
    trials, _ = smooth
    path = tmp_path / "run"
    meta = {"source": "synthetic", "hygiene": {"warnings": HYGIENE}}
    RunWriter(path, meta).write_trials(
        trials.select([c for c in regimes.TRIAL_SCHEMA if c in trials.columns])
    )
    return path


def test_cli_analyze_prints_the_sensitivity_and_the_hygiene_warnings(smooth_run, capsys):
    assert main(["analyze", str(smooth_run), "--n-boot", "100"]) == 0
    out = capsys.readouterr().out
    assert "no anomaly; spikes of " in out
    assert "x or more over 2 budgets would have been found" in out
    assert "follows its smooth trend in every group" not in out
    assert all(warning in out for warning in HYGIENE)


def test_the_report_prints_the_sensitivity_and_the_hygiene_warnings(smooth_run):
    report = build_report(analyze(smooth_run, n_boot=100))
    findings = report.findings()
    assert sum("would have been found" in line for line in findings) == 2
    assert any(HYGIENE[0] in line for line in findings)
    assert any("would have been found" in line for line in report.headlines())
    assert json.dumps(HYGIENE[1])[1:-1] in report.to_html()
