"""The offline HTML report: built from a synthetic run with the real detection.

All data here is synthetic (``regimes.simulate``; run ids start with ``synthetic-``).
The synthetic run comes from the ``synthetic_run`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import regimes
from regimes._findings import sensitivity_findings
from regimes.analysis import analyze
from regimes.data.schema import RegimesInputError
from regimes.data.simulate import published_gpt2_medium, simulate_sweep
from regimes.viz.html import RunReport, build_report, headlines


@pytest.fixture(scope="module")
def report(synthetic_run, tmp_path_factory) -> RunReport:
    """The report of a synthetic run that supports every chart."""
    run = synthetic_run.write(tmp_path_factory.mktemp("run") / "run")
    return build_report(analyze(run, n_boot=200))


@pytest.fixture(scope="module")
def page(report, tmp_path_factory) -> str:
    path = report.write(tmp_path_factory.mktemp("html") / "report.html")
    return path.read_text(encoding="utf-8")


def _specs(page: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="regimes-specs">(.*?)</script>', page, re.S
    )
    assert match, "the page has no chart specs"
    return json.loads(match.group(1))


def test_report_finds_the_synthetic_spike(report, synthetic_run):
    truth = synthetic_run.truth
    anomalies = report.regimes.anomalies
    assert anomalies.select("model", "use_cache", "start", "end").rows() == [
        ("synthetic-spiky", True, truth["start"], truth["end"])
    ]
    assert anomalies["ratio_low"][0] < truth["ratio"] * 1.1
    assert anomalies["ratio_high"][0] > truth["ratio"] / 1.1
    lines = report.headlines()
    assert lines[0].startswith(
        f"synthetic-spiky · cache on: latency_s at budget {truth['start']}–{truth['end']} is "
    )
    found = anomalies.height + (
        report.speedup.collapses.height if report.speedup is not None else 0
    )
    # then what the curves without an anomaly could have found
    assert lines[found:] == sensitivity_findings(report.regimes, report.meta)
    assert len(lines) > found


def test_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>")
    assert re.search(r"<script[^>]+\bsrc=", page) is None
    assert re.search(r"<link\b", page) is None
    assert re.search(r"""(src|href)=["']?https?:""", page) is None
    assert "vegaEmbed" in page and "window.vega" in page  # the libraries are inline


def test_page_is_laid_out_at_a_phones_width(page):
    head = page[: page.index("</head>")]
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in head


def test_page_holds_one_spec_per_chart(report, page):
    specs = _specs(page)
    assert list(specs) == [f"chart-{key}" for key, _ in report.figures()]
    for key in specs:
        assert f"id='{key}'" in page
    assert {s.key for s in report.charts} >= {"latency", "heatmap", "phases"}
    for spec in specs.values():
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


def test_page_shows_environment_and_findings(report, page):
    assert "Linux (synthetic)" in page
    assert "env_vars.PYTORCH_ENABLE_MPS_FALLBACK" in page
    assert "Sweep specification" in page
    row = report.regimes.anomalies.row(0, named=True)
    assert f"{row['ratio_low']:.3g}" in page and f"{row['ratio_high']:.3g}" in page
    for line in report.findings():
        assert line.replace("'", "&#x27;") in page


def test_page_reads_like_a_finding(report, page, synthetic_run):
    truth = synthetic_run.truth
    first = report.findings()[0]
    after = truth["end"] + synthetic_run.grid
    assert re.fullmatch(
        rf"synthetic-spiky · cache on: latency at budgets {truth['start']}\.\.{truth['end']} "
        rf"is [\d.]+x its trend \(95% CI [\d.]+-[\d.]+\), q = [\d.e-]+, and recovers at {after}",
        first,
    ), first
    assert any(s.startswith("synthetic-spiky") and "decode carries" in s for s in report.findings())
    # Findings first, then the contents' sections in order; every link has its target.
    order = [page.index(f"<section id='{name}'") for name in ("findings", "charts", "tables")]
    assert order == sorted(order)
    assert page.index("<nav class='toc'") < order[0]
    for anchor in re.findall(r"<a href='#([^']+)'>", page):
        assert f"id='{anchor}'" in page, anchor
    # Summaries are HTML tables; the only preformatted text is the folded sweep spec.
    body = page[page.index("<header><h1>") : page.index('id="regimes-specs"')]
    assert body.count("<pre") == 1 and "<summary>Sweep specification</summary><pre>" in body
    assert "<table class='kv'>" in page and "<th scope='row'>min_ratio</th>" in page
    # Four significant digits, not a float's binary tail (1.0549999999999998e-05).
    assert re.search(r"<td class='num'>[^<]*(0{6,}|9{6,})", body) is None
    environment = page[page.index("<section id='environment'>") :]
    assert environment.index("<details>") < environment.index("Linux (synthetic)")


def test_published_case_finding_has_its_numbers(tmp_path):
    sweep = published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    report = build_report(analyze(sweep, n_boot=400))
    assert re.fullmatch(
        r"latency at budgets 512\.\.624 is 1\d\.\dx its trend \(95% CI 1?\d\.\d+-1\d\.\d+\), "
        r"q = \de-\d+, and recovers at 640",
        report.findings()[0],
    ), report.findings()[0]


def test_charts_follow_what_the_data_supports(synthetic_run, tmp_path):
    plain = build_report(
        analyze(
            synthetic_run.write(tmp_path / "plain", instrumented=False, both_cache=False),
            n_boot=200,
        )
    )
    assert [s.key for s in plain.charts] == ["latency"]  # 2 groups, no phases, one cache
    assert plain.speedup is None
    many = build_report(
        analyze(synthetic_run.write(tmp_path / "many", instrumented=False), n_boot=200),
        heatmap_min_groups=4,
    )
    assert "heatmap" in [s.key for s in many.charts]
    assert "phases" not in [s.key for s in many.charts]


def test_max_panels_keeps_the_anomalous_group(report):
    narrow = build_report(report.analysis, max_panels=1)
    latency = next(s for s in narrow.charts if s.key == "latency").chart.to_dict()
    assert latency["vconcat"][0]["facet"]["sort"] == ["synthetic-spiky · cache on"]
    assert any("1 of 4 groups" in note for note in narrow.notes)


def test_a_headline_prints_the_interval_as_the_table_does():
    """The H200 run with a 3x slowdown injected, its CI set to ends like 4.00 and 4.69."""
    import dataclasses
    from pathlib import Path

    from regimes.viz._tables import interval_table

    run = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-inject"
    rep = regimes.detect_regimes(regimes.load(run))
    ends = pl.lit(4.0).alias("ratio_low"), pl.lit(4.69).alias("ratio_high")
    rep = dataclasses.replace(rep, anomalies=rep.anomalies.with_columns(*ends))
    (line,) = [line for line in headlines(rep) if "its smooth trend" in line]
    cell = re.search(r"×([\d.]+) \[([\d.]+), ([\d.]+)\]", interval_table(rep.anomalies, []))
    assert cell, "the anomaly table prints no ratio with its CI"
    assert cell.groups()[1:] == ("4.00", "4.69")
    ratio, low, high = cell.groups()
    assert f" is {ratio}x its smooth trend (95% CI {low} to {high})" in line, (line, cell[0])


def test_headlines_without_anomalies(synthetic_run, tmp_path):
    smooth = build_report(
        analyze(
            synthetic_run.trials(instrumented=False, both_cache=False).filter(
                pl.col("model") == "synthetic-smooth"
            ),
            n_boot=200,
        )
    )
    assert smooth.regimes.anomalies.height == 0
    # a negative result says what it could have found, curve by curve
    lines = headlines(smooth.regimes)
    assert lines and all(
        "would have been found" in line or "could have been found" in line for line in lines
    )
    assert "None significant." in smooth.to_html()


def test_write_images(report, tmp_path):
    pngs = report.write_images(tmp_path / "png")
    assert [p.name for p in pngs] == [f"{key}.png" for key, _ in report.figures()]
    for path in pngs:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = report.write_images(tmp_path / "svg", "svg")[0].read_text()
    assert "<svg" in svg and "synthetic-spiky" in svg
    with pytest.raises(RegimesInputError, match="png' or 'svg'"):
        report.write_images(tmp_path, "gif")


def test_unwritable_output_is_a_clear_error(report, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RegimesInputError, match="cannot write"):
        report.write(blocker / "report.html")


def test_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(RegimesInputError, match="does not exist"):
        analyze(tmp_path / "nowhere")


def test_explanations_follow_what_the_data_supports(report, page, synthetic_run, tmp_path):
    # Instrumented, one backend, no memory readings, one prompt length: phases only.
    assert [e.key for e in report.explanations] == ["phases"]
    phases = report.explanations[0].table
    assert phases.height == report.regimes.anomalies.height
    # The synthetic spike lives in decode: its prefill is the same at every budget.
    assert phases["decode_share_low"][0] > 0.9
    assert "Prefill or decode: where the excess time goes" in page
    plain = build_report(
        analyze(synthetic_run.write(tmp_path / "plain", instrumented=False), n_boot=200)
    )
    assert plain.explanations == []


def test_backend_and_memory_explanations(two_backend_trials):
    report = build_report(analyze(two_backend_trials, n_boot=200))
    assert [e.key for e in report.explanations] == ["backends", "memory"]
    verdicts = report.explanations[0].result.verdicts
    assert verdicts.filter(pl.col("model") == "synthetic-spiky")["specific"].to_list() == [True]
    effects = report.explanations[1].table
    assert effects.height == report.regimes.anomalies.height
    page = report.to_html()
    assert "Is it specific to one backend?" in page
    assert "Does memory (mem_driver_bytes) explain it?" in page


def test_report_against_a_base_run_says_what_changed(tmp_path):
    grid = dict(n_budgets=16, trials=5, sessions=2, intercept_s=0.05, per_token_s=0.005)
    base = simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid).trials
    new = simulate_sweep(seed=2, **grid).trials
    report = build_report(analyze(new, baseline=base, n_boot=200))
    assert report.comparison.changes["status"].to_list() == ["vanished"]
    other = new.with_columns(pl.lit("other").alias("model"))
    unmatched = build_report(analyze(other, baseline=base, n_boot=200))
    assert unmatched.comparison.shift.height == 0
    assert "comparison" not in [s.key for s in unmatched.charts]
    assert any("pass by= to match" in note for note in unmatched.notes)
    assert [s.key for s in report.charts][:2] == ["latency", "comparison"]
    vanished = next(line for line in report.findings() if "vanished" in line)
    assert re.fullmatch(
        r"the regime at budgets 128\.\.144 vanished in the new run: new over base "
        r"x0\.\d+ \(95% CI 0\.\d+-0\.\d+\), q = \de-\d+",
        vanished,
    ), vanished
    page = report.to_html()
    assert "Against the base run" in page and "<h4>changes</h4>" in page
