"""The notebook view of a result: headlines first, the findings open, the rest folded."""

from __future__ import annotations

import html
import re

import polars as pl
import pytest

import regimes
from regimes import _html
from regimes._findings import headlines
from regimes.data.simulate import published_gpt2_medium_cache
from regimes.viz import _tables

VISIBLE_ROWS = 25


def _outside_details(page: str) -> str:
    return re.sub(r"<details>.*?</details>", "", page, flags=re.S)


@pytest.fixture(scope="module")
def spiky():
    trials = regimes.simulate_sweep(3, anomaly="spike", ratio=3.0, trials=3, seed=4).trials
    return regimes.detect_regimes(trials, n_boot=200)


def test_a_detection_reads_like_the_command_line_then_its_details(spiky):
    page = spiky._repr_html_()
    assert spiky.anomalies.height == 3 and spiky.curve.height > VISIBLE_ROWS
    for line in headlines(spiky):
        assert f"<li>{html.escape(line, quote=True)}</li>".replace("&#x27;", "&#39;") in page
    visible = _outside_details(page)
    # the compact anomaly table: its interval, ratio with CI, q and kind, not every column
    assert "<h5>anomalies</h5>" in visible and ">q_value</th>" in visible
    assert ">p_value</th>" not in visible and ">n_points</th>" not in visible
    # of the group columns only the one that tells the anomalies apart
    assert ">model</th>" in visible and ">backend</th>" not in visible
    assert "<img alt='latency" in visible and "data:image/svg+xml;base64," in visible
    folded = re.findall(r"<details><summary>(\w+) \((\d+) row\(s\)\)</summary>", page)
    assert [name for name, _ in folded] == ["change_points", "curve", "groups", "params"]
    assert dict(folded)["curve"] == str(spiky.curve.height)
    assert visible.count("<tr>") <= VISIBLE_ROWS + 1
    for block in re.findall(r"<details>.*?</details>", page, flags=re.S):
        assert block.count("<tr>") <= VISIBLE_ROWS + 1
    assert f"{spiky.curve.height - VISIBLE_ROWS} more row(s) not shown" in page


def test_nothing_found_says_so_and_cells_are_escaped():
    trials = regimes.simulate_sweep(1, trials=3, seed=2).trials.with_columns(
        pl.lit("<b>gpt</b>").alias("model")
    )
    page = regimes.detect_regimes(trials, n_boot=200)._repr_html_()
    assert "<p>No anomaly: none at q &lt; alpha with ratio &gt;= min_ratio.</p>" in page
    assert "&lt;b&gt;gpt&lt;/b&gt;" in page and "<b>gpt</b>" not in page


def test_a_speedup_view_leads_with_its_collapses():
    table = published_gpt2_medium_cache(trials=5, cv=0.10, seed=0)
    result = regimes.cache_speedup(table)
    page = result._repr_html_()
    assert result.collapses.height and "the KV-cache speedup at budget" in page
    assert "<h5>collapses</h5>" in page and "<summary>speedup (" in page


def test_the_report_tables_come_from_the_same_builder():
    frame = pl.DataFrame({"budget": list(range(300)), "model": ["m"] * 300})
    assert _tables.html_table(frame, caption="c") == _html.html_table(
        frame, max_rows=_tables.MAX_TABLE_ROWS, caption="c"
    )
    assert _tables.key_value_table([("a", [1, 2])]) == _html.key_value_table([("a", [1, 2])])


def test_an_explanation_names_its_groups_as_its_chart_does():
    from pathlib import Path

    run = Path(__file__).resolve().parents[2] / "examples" / "data" / "cuda-h200-inject"
    result = regimes.memory_confound(regimes.load(run))
    (line,) = result._headlines()
    assert line.startswith("cuda · NVIDIA H200 · gpt2 · float32 · cache on · prompt 65 at ")
    assert "True" not in line and f"<li>{html.escape(line, quote=False)}</li>" in (
        result._repr_html_()
    )
