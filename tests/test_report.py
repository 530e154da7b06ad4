"""The offline HTML report: built from a synthetic run with the real detection.

All data here is synthetic (``regimes.simulate``; run ids start with ``synthetic-``).
The builders are shared with test_browser.py and test_cli_analyze.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from regimes import RunWriter
from regimes.data.schema import RegimesInputError
from regimes.data.simulate import Sweep, published_gpt2_medium, simulate_sweep
from regimes.viz.html import RunReport, build_report, headlines

GRID = 16
SPIKE_RATIO = 6.0
SPIKE_SEED = 2
"""Seed of the spiky curve: its spike covers budgets 96-144 (the sweep's truth)."""


def synthetic_sweeps(*, both_cache: bool = True) -> list[tuple[str, bool, Sweep]]:
    """The synthetic curves of the test run: ``(model, use_cache, sweep)``.

    ``synthetic-spiky`` has a 4-budget spike of 6x with the cache on; every other curve
    is smooth. Cache-off latency grows faster (quadratic), as without a KV cache.
    """
    common = dict(n_budgets=GRID, trials=4, sessions=2)
    curves = [
        (
            "synthetic-spiky",
            True,
            simulate_sweep(
                1, anomaly="spike", width=4, ratio=SPIKE_RATIO, seed=SPIKE_SEED, **common
            ),
        ),
        ("synthetic-smooth", True, simulate_sweep(1, seed=11, **common)),
    ]
    if both_cache:
        curves += [
            (
                name,
                False,
                simulate_sweep(1, trend="quadratic", per_token_s=0.06, seed=seed, **common),
            )
            for name, seed in (("synthetic-spiky", 12), ("synthetic-smooth", 13))
        ]
    return curves


def synthetic_trials(*, instrumented: bool = True, both_cache: bool = True) -> pl.DataFrame:
    """The trial table of :func:`synthetic_sweeps`, with phase times when instrumented."""
    trials = pl.concat(
        [
            sweep.trials.with_columns(
                pl.lit(model).alias("model"), pl.lit(cache).alias("use_cache")
            )
            for model, cache, sweep in synthetic_sweeps(both_cache=both_cache)
        ]
    ).drop("source")  # not a trial-table column; run_id still says synthetic
    if instrumented:
        # About 10 ms of prefill with 5% noise, never more than 30% of the latency.
        noise = np.random.default_rng(0).lognormal(0.0, 0.05, trials.height)
        prefill = pl.min_horizontal(pl.col("latency_s") * 0.3, pl.lit(noise) * 0.01)
        trials = trials.with_columns(
            prefill.alias("prefill_s"),
            (pl.col("latency_s") - prefill).alias("decode_s"),
            pl.lit(True).alias("instrumented"),
        )
    return trials


SYNTHETIC_META = {
    "name": "synthetic-report-test",
    "environment": {"os": "Linux (synthetic)", "torch": "synthetic", "chip": "none"},
    "env_vars": {"PYTORCH_ENABLE_MPS_FALLBACK": "1"},
    "spec": {"budgets": [16 * i for i in range(1, GRID + 1)], "trials": 4},
}


def write_synthetic_run(path: Path, **options: bool) -> Path:
    """Write :func:`synthetic_trials` as a run directory with metadata."""
    RunWriter(path, dict(SYNTHETIC_META)).write_trials(synthetic_trials(**options))
    return path


def full_report(path: Path) -> RunReport:
    """The report of a synthetic run that supports every chart."""
    run = write_synthetic_run(path)
    return build_report(run, n_boot=200)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> RunReport:
    return full_report(tmp_path_factory.mktemp("run") / "run")


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


def test_report_finds_the_synthetic_spike(report):
    truth = synthetic_sweeps()[0][2].truth.row(0, named=True)
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
    assert len(lines) == anomalies.height + (
        report.speedup.collapses.height if report.speedup is not None else 0
    )


def test_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>")
    assert re.search(r"<script[^>]+\bsrc=", page) is None
    assert re.search(r"<link\b", page) is None
    assert re.search(r"""(src|href)=["']?https?:""", page) is None
    assert "vegaEmbed" in page and "window.vega" in page  # the libraries are inline


def chart_keys(report: RunReport) -> list[str]:
    """Every chart of the page: the report's charts, then the explanations' charts."""
    keys = [s.key for s in report.charts]
    return keys + [f"explain-{e.key}" for e in report.explanations if e.chart is not None]


def test_page_holds_one_spec_per_chart(report, page):
    specs = _specs(page)
    assert list(specs) == [f"chart-{key}" for key in chart_keys(report)]
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


def test_page_reads_like_a_finding(report, page):
    truth = synthetic_sweeps()[0][2].truth.row(0, named=True)
    first = report.findings()[0]
    after = truth["end"] + GRID
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
    environment = page[page.index("<section id='environment'>") :]
    assert environment.index("<details>") < environment.index("Linux (synthetic)")


def test_published_case_finding_has_its_numbers(tmp_path):
    sweep = published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    report = build_report(sweep, n_boot=400)
    assert re.fullmatch(
        r"latency at budgets 512\.\.624 is 1\d\.\dx its trend \(95% CI 1?\d\.\d+-1\d\.\d+\), "
        r"q = \de-\d+, and recovers at 640",
        report.findings()[0],
    ), report.findings()[0]


def test_charts_follow_what_the_data_supports(tmp_path):
    plain = build_report(
        write_synthetic_run(tmp_path / "plain", instrumented=False, both_cache=False), n_boot=200
    )
    assert [s.key for s in plain.charts] == ["latency"]  # 2 groups, no phases, one cache
    assert plain.speedup is None
    many = build_report(
        write_synthetic_run(tmp_path / "many", instrumented=False), n_boot=200, heatmap_min_groups=4
    )
    assert "heatmap" in [s.key for s in many.charts]
    assert "phases" not in [s.key for s in many.charts]


def test_max_panels_keeps_the_anomalous_group(report):
    narrow = build_report(
        report.trials, regimes=report.regimes, speedup=report.speedup, max_panels=1
    )
    latency = next(s for s in narrow.charts if s.key == "latency").chart.to_dict()
    assert latency["vconcat"][0]["facet"]["sort"] == ["synthetic-spiky · cache on"]
    assert any("1 of 4 groups" in note for note in narrow.notes)


def test_headlines_without_anomalies(tmp_path):
    smooth = build_report(
        synthetic_trials(instrumented=False, both_cache=False).filter(
            pl.col("model") == "synthetic-smooth"
        ),
        n_boot=200,
    )
    assert smooth.regimes.anomalies.height == 0
    assert headlines(smooth.regimes) == [
        "no anomaly: latency_s follows its smooth trend in every group"
    ]
    assert "None significant." in smooth.to_html()


def test_write_images(report, tmp_path):
    pngs = report.write_images(tmp_path / "png")
    assert [p.name for p in pngs] == [f"{key}.png" for key in chart_keys(report)]
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
        build_report(tmp_path / "nowhere")


def test_explanations_follow_what_the_data_supports(report, page, tmp_path):
    # Instrumented, one backend, no memory readings, one prompt length: phases only.
    assert [e.key for e in report.explanations] == ["phases"]
    phases = report.explanations[0].table
    assert phases.height == report.regimes.anomalies.height
    # The synthetic spike lives in decode: its prefill is the same at every budget.
    assert phases["decode_share_low"][0] > 0.9
    assert "Prefill or decode: where the excess time goes" in page
    plain = build_report(write_synthetic_run(tmp_path / "plain", instrumented=False), n_boot=200)
    assert plain.explanations == []


def two_backend_trials() -> pl.DataFrame:
    """The cache-on curves, and the same cases on a second (synthetic) backend where
    the spiky model is smooth; memory grows smoothly with the budget (no step where
    the spike is)."""
    base = synthetic_trials(instrumented=False, both_cache=False)
    other = base.filter(pl.col("model") == "synthetic-smooth")
    other = pl.concat([other, other.with_columns(pl.lit("synthetic-spiky").alias("model"))])
    trials = pl.concat([base, other.with_columns(pl.lit("synthetic-b").alias("backend"))])
    return trials.with_columns((pl.col("budget") * 4096 + 10**9).alias("mem_driver_bytes"))


def test_backend_and_memory_explanations(tmp_path):
    report = build_report(two_backend_trials(), n_boot=200)
    assert [e.key for e in report.explanations] == ["backends", "memory"]
    verdicts = report.explanations[0].result.verdicts
    assert verdicts.filter(pl.col("model") == "synthetic-spiky")["specific"].to_list() == [True]
    effects = report.explanations[1].table
    assert effects.height == report.regimes.anomalies.height
    page = report.to_html()
    assert "Is it specific to one backend?" in page
    assert "Does memory (mem_driver_bytes) explain it?" in page
