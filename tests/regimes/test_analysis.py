"""One analysis of a run: detected once, its options declared once, drawn without analysing."""

from __future__ import annotations

import functools
import inspect
import sys
from collections import Counter
from typing import Any

import polars as pl
import pytest

import regimes
from regimes.analysis import RunAnalysis, analyze
from regimes.cli import main
from regimes.options import PARAMETER_CONSTRAINTS, DetectionOptions, check_options

GRID = dict(n_budgets=12, trials=3, sessions=2, intercept_s=0.05, per_token_s=0.005)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Any, Any]:
    """A base run with a 3x spike and a new run without it, as trial files on disk."""
    folder = tmp_path_factory.mktemp("runs")
    base = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **GRID).trials
    new = regimes.simulate_sweep(seed=2, **GRID).trials
    base.with_columns(pl.lit("base").alias("run_id")).write_parquet(folder / "base.parquet")
    new.with_columns(pl.lit("new").alias("run_id")).write_parquet(folder / "new.parquet")
    return folder / "base.parquet", folder / "new.parquet"


def _count_detections(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every detection, by the run_id of the trials it is given.

    Each module that holds ``detect_regimes`` under that name gets the counting one, so
    a detection is counted whichever module calls it.
    """
    import regimes.detect

    real = regimes.detect.detect_regimes
    calls: Counter[str] = Counter()

    @functools.wraps(real)  # the options reach an analysis by its signature
    def counted(df: Any, *args: Any, **kwargs: Any) -> Any:
        calls[",".join(sorted(pl.DataFrame(df)["run_id"].unique().to_list()))] += 1
        return real(df, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("regimes") and getattr(module, "detect_regimes", None) is real:
            monkeypatch.setattr(module, "detect_regimes", counted)
    return calls


def test_a_report_against_a_base_run_detects_each_run_once(runs, tmp_path, monkeypatch):
    import regimes.compare  # noqa: F401  (its modules bind detect_regimes when imported)

    calls = _count_detections(monkeypatch)
    base, new = runs
    out = tmp_path / "report.html"
    args = ["report", str(new), "--baseline", str(base), "-o", str(out), "--n-boot", "100"]
    assert main(args) == 0
    assert calls == {"base": 1, "new": 1}
    assert "Against the base run" in out.read_text()


def test_the_analysis_compares_with_its_own_detection(runs):
    base, new = runs
    analysis = analyze(new, baseline=base, n_boot=100)
    assert analysis.comparison.new_report is analysis.detection
    assert analysis.comparison.changes["status"].to_list() == ["vanished"]
    assert analysis.notes == ()


def test_a_detection_that_splits_the_matched_curves_is_detected_again(runs):
    base, new = runs
    two = pl.read_parquet(new)
    two = pl.concat([two, two.with_columns(pl.lit("other").alias("device"))])
    analysis = analyze(two, baseline=pl.read_parquet(base), n_boot=100)
    assert analysis.comparison.new_report is not analysis.detection
    assert any("splits the matched curves by ['device']" in note for note in analysis.notes)


def test_compare_runs_refuses_a_detection_made_with_other_settings(runs):
    base, new = runs
    detection = regimes.detect_regimes(pl.read_parquet(new), n_boot=100)
    with pytest.raises(regimes.RegimesInputError, match=r"n_boot=200 \(given 100\)"):
        regimes.compare_runs(base, new, detection=detection)
    reused = regimes.compare_runs(base, new, n_boot=100, detection=detection)
    assert reused.new_report is detection


def test_the_analysis_is_a_result(runs):
    analysis = analyze(runs[0], n_boot=100)
    assert isinstance(analysis, RunAnalysis)
    assert repr(analysis).startswith("RunAnalysis(anomalies=1;")
    assert analysis.findings()[0].startswith("latency at budgets")
    assert analysis.summary().splitlines()[1] == "  " + analysis.findings()[0]
    data = analysis.to_dict()
    assert data["result"] == "RunAnalysis" and data["detection"]["result"] == "RegimeResult"
    assert data["params"]["n_boot"] == 100
    assert "<details" in analysis._repr_html_()


def test_the_options_are_the_detections_parameters_with_its_defaults():
    signature = inspect.signature(regimes.detect_regimes).parameters
    defaults = {name: p.default for name, p in signature.items() if name != "df"}
    assert set(PARAMETER_CONSTRAINTS) == set(defaults)
    assert DetectionOptions().to_dict() == defaults
    assert list(DetectionOptions.names()) == list(defaults)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"alpha": 0.0}, r"alpha must lie in \(0, 1\), got 0.0"),
        ({"direction": "sideways"}, r"direction must be one of \('up', 'down', 'both'\)"),
        ({"n_boot": 10}, "n_boot"),
        ({"by": 3}, "by must be a column name or a sequence of column names, got 3"),
        ({"min_raito": 2.0}, r"unknown detection option 'min_raito' \(did you mean 'min_ratio'"),
    ],
)
def test_every_entry_point_refuses_a_bad_option_in_the_same_words(options, message):
    with pytest.raises(regimes.RegimesInputError, match=message):
        check_options(**options)
    with pytest.raises(regimes.RegimesInputError, match=message):
        DetectionOptions.coerce(**options)
    if "min_raito" not in options:
        trials = regimes.simulate_sweep(seed=1, **GRID).trials
        with pytest.raises(regimes.RegimesInputError, match=message):
            regimes.detect_regimes(trials, **options)


@pytest.mark.parametrize("command", ["analyze", "report", "compare", "refine"])
def test_every_detection_flag_reaches_an_analysis_that_takes_it(command):
    from regimes.cli._main import _build_parser

    analysis = {
        "analyze": regimes.detect_regimes,
        "report": regimes.detect_regimes,
        "compare": regimes.compare_runs,
        "refine": regimes.refine_boundaries,
    }[command]
    parser = _build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    flags = {a.dest for a in sub._actions} & set(DetectionOptions.names())
    assert flags, command
    assert flags <= set(inspect.signature(analysis).parameters), command
