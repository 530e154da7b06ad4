"""The benchmarks' output files: bench/record.py writes them, docs/hooks.py reads them."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import polars as pl
import pytest
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "docs"))

import accuracy  # noqa: E402
import hooks  # noqa: E402
from record import Record  # noqa: E402

BENCHMARKS = (
    "accuracy",
    "collector_overhead",
    "compare_calibration",
    "fleet_scale",
    "operator_flags",
    "profile_overhead",
    "refine_accuracy",
    "speed",
    "speedup_calibration",
    "speedup_speed",
)


def test_a_rate_is_recorded_with_its_clopper_pearson_interval():
    record = Record("synthetic", {"curves": 40, "out": Path("x.json")})
    text = record.rate("null: smooth", "any anomaly", 2, 40)
    row = record.rows[0]
    exact = binomtest(2, 40).proportion_ci(0.95, method="exact")
    assert (row["section"], row["metric"], row["hits"], row["n"]) == (
        "null: smooth",
        "any anomaly",
        2,
        40,
    )
    assert row["value"] == 0.05
    assert row["low"] == pytest.approx(exact.low) and row["high"] == pytest.approx(exact.high)
    assert text == f"0.050  (2/40; 95% CI {exact.low:.3f}-{exact.high:.3f})"
    assert record.rate("null: smooth", "nothing counted", 0, 0) == "-  (0/0)"
    assert record.rows[1]["value"] is None


def test_the_file_holds_the_meta_and_every_row_and_replaces_the_old_one(tmp_path):
    record = Record("synthetic", {"repeats": 3, "out": tmp_path / "x.json"})
    record.value("1. detect_regimes", "1000 rows", 0.25, unit="s")
    record.value("1. detect_regimes", "a ratio", float("nan"), unit="x")
    target = tmp_path / "synthetic.json"
    target.write_text("old")
    assert record.write(target) == target
    data = json.loads(target.read_text())
    assert set(data) == {"meta", "rows"}
    meta = data["meta"]
    assert meta["command"].startswith("python bench/") and meta["commit"]
    assert meta["options"] == {"repeats": 3, "out": str(tmp_path / "x.json")}
    assert meta["seconds"] >= 0 and meta["cpu_count"] >= 1
    assert [r["value"] for r in data["rows"]] == [0.25, None]  # NaN is no JSON
    assert [p.name for p in tmp_path.iterdir()] == ["synthetic.json"]


def test_a_partial_run_replaces_nothing_unless_told_where(tmp_path, monkeypatch):
    import record as module

    monkeypatch.setattr(module, "RESULTS", tmp_path)
    partial = Record("synthetic")
    partial.rate("s", "m", 1, 2)
    assert partial.write(partial=True) is None and not list(tmp_path.iterdir())
    assert partial.write() == tmp_path / "synthetic.json"


def test_a_scenario_scores_into_rows_as_it_prints():
    truth = pl.DataFrame({"model": ["a", "b"], "start": [64, 64], "end": [96, 96], "ratio": 2.0})
    found = pl.DataFrame(
        {
            "model": ["a"],
            "start": [64],
            "end": [96],
            "ratio": [2.1],
            "ratio_low": [1.8],
            "ratio_high": [2.4],
            "recovered": [True],
            "kind": ["spike"],
            "ratio_interval": ["bootstrap"],
            "t_low": [1.9],
            "t_high": [1.95],
        }
    )
    record = Record("accuracy")
    lines = accuracy.score_anomaly(truth, found, 2, record.section("spike 2x"))
    assert lines[0].startswith("  recall (a reported anomaly overlaps the truth): 0.500")
    figures = {r["metric"]: r for r in record.rows}
    assert (figures["recall (a reported anomaly overlaps the truth)"]["hits"], len(lines)) == (
        1,
        9,
    )
    assert figures["ratio CI covers the true ratio"]["hits"] == 1
    assert figures["t interval (regime held fixed) covers the true ratio"]["hits"] == 0
    assert figures["ratio CIs from the bootstrap (else t)"]["hits"] == 1
    bias = figures[accuracy.METRIC_BIAS]
    assert bias["value"] == pytest.approx(1.05) and bias["n"] == 1
    width = figures[accuracy.METRIC_WIDTH]
    assert width["value"] == pytest.approx(2.4 / 1.8) and width["n"] == 1
    assert figures[accuracy.METRIC_WIDTH_T]["value"] == pytest.approx(1.95 / 1.9)
    assert {r["section"] for r in record.rows} == {"spike 2x"}


def test_a_neighbours_ratio_is_scored_apart_where_its_neighbour_was_missed():
    # curve a: spike and step both found, the spike's interval holds 3; curve b: the step
    # missed, the spike read against the step's level (1.9x), its interval misses 3
    truth = pl.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "kind": ["spike", "step", "spike", "step"],
            "start": [32, 64, 32, 64],
            "end": [48, 320, 48, 320],
            "ratio": [3.0, 1.6, 3.0, 1.6],
        }
    )
    found = pl.DataFrame(
        {
            "model": ["a", "a", "b"],
            "start": [32, 64, 32],
            "end": [48, 320, 48],
            "ratio": [2.9, 1.62, 1.9],
            "ratio_low": [2.6, 1.5, 1.7],
            "ratio_high": [3.3, 1.7, 2.1],
            "recovered": [True, None, True],
            "kind": ["spike", "step", "spike"],
            "ratio_interval": ["bootstrap"] * 3,
            "t_low": [2.7, 1.55, 1.75],
            "t_high": [3.1, 1.68, 2.0],
        }
    )
    record = Record("accuracy")
    accuracy.score_neighbours(truth, found, 2, record.section("neighbours"))
    figures = {r["metric"]: (r["hits"], r["n"]) for r in record.rows if "neighbour" in r["metric"]}
    assert figures == {
        "the spike, its neighbour found too: ratio interval covers the true ratio": (1, 1),
        "the spike, its neighbour not found: ratio interval covers the true ratio": (0, 1),
        "the step, its neighbour found too: ratio interval covers the true ratio": (1, 1),
        "the step, its neighbour not found: ratio interval covers the true ratio": (0, 0),
    }


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_writes_its_figures_through_the_record(name):
    tree = ast.parse((ROOT / "bench" / f"{name}.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "record"]
    writes = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "write"
    ]
    options = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and n.args and getattr(n.args[0], "value", None) == "--out"
    ]
    assert imports and writes and options, f"bench/{name}.py does not write bench/results"


def test_the_validation_page_is_written_from_the_files(tmp_path, monkeypatch):
    record = Record("synthetic")
    record.rate("null: smooth", "any anomaly", 2, 40)
    record.value("1. detect_regimes", "1000 rows", 0.25, unit="s", low=0.2, high=0.3)
    record.write(tmp_path / "synthetic.json")
    monkeypatch.setattr(hooks, "_RESULTS", str(tmp_path))
    page = hooks.on_page_markdown("# V\n\n<!-- bench-table synthetic -->\n")
    assert "| null: smooth | any anomaly | 0.050 (0.006-0.169) | 40 |" in page
    assert "| 1. detect_regimes | 1000 rows | 0.25 (0.2-0.3) s |  |" in page
    assert "code at" in page and "<!--" not in page
    missing = hooks.on_page_markdown("<!-- bench-table speed -->")
    assert missing == "Not run yet: `python bench/speed.py` writes `bench/results/speed.json`."


def test_every_table_the_validation_page_asks_for_is_a_benchmark():
    page = (ROOT / "docs" / "validation.md").read_text()
    names = hooks._BENCH_TABLE.findall(page)
    assert {name.split("-")[0] for name in names} == set(BENCHMARKS)


def test_the_readmes_validation_summary_is_what_the_benchmarks_wrote():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(hooks.README_BEGIN + "\n", 1)[1].split("\n" + hooks.README_END, 1)[0]
    assert block == hooks.readme_validation(), "run: python docs/hooks.py --readme"


def test_the_readme_summary_names_every_ratio_interval_under_its_goal(tmp_path, monkeypatch):
    record = Record("accuracy")
    record.rate("spike", "ratio CI covers the true ratio", 95, 100)
    record.rate("step", "ratio CI covers the true ratio", 80, 100)
    record.write(tmp_path / "accuracy.json")
    monkeypatch.setattr(hooks, "_RESULTS", str(tmp_path))
    (line,) = hooks._ratio_coverage(hooks._needed("accuracy.json"))
    assert "0.950 to 0.950 of detections in 1 of 2 scenarios" in line
    assert line.startswith("Ratio intervals (`bench/accuracy.py`) hold")
    assert "; under 0.93: step: 0.800 (0.7" in line and line.endswith(").")
