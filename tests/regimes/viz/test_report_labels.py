"""Labels the report inlines (model, device, title) cannot break its page or its charts.

The chart specifications travel in a ``<script type="application/json">`` element that
the loader reads with ``JSON.parse``. Whatever a label holds, that element's text must
end where the page ends it (no ``</script>`` or ``<!--`` inside) and parse as JSON
back to the very labels written. All data is synthetic (``simulate_sweep``).
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from regimes.data.simulate import simulate_sweep

LABELS = [
    "<!--",
    "gpt2 <!-- trick",
    "</script><script>alert(1)</script>",
    "<\\!-- & \"quoted\" 'single' \u2028 ü",
    "<!--<script>",
]


def _specs_text(page: str) -> str:
    """The text an HTML parser gives the specs element: up to the first ``</script``."""
    start = page.index('<script type="application/json" id="regimes-specs">')
    body = page[start:].split(">", 1)[1]
    return re.split(r"</script", body, maxsplit=1, flags=re.IGNORECASE)[0]


@pytest.mark.parametrize("label", LABELS)
def test_any_label_leaves_the_chart_specs_valid_json_holding_it(tmp_path, label):
    from regimes.analysis import analyze
    from regimes.viz.html import build_report

    trials = simulate_sweep(1, n_budgets=8, trials=3, seed=2).trials.drop("source")
    trials = trials.with_columns(pl.lit(label).alias("model"), pl.lit(label).alias("device"))
    report = build_report(analyze(trials, n_boot=100), title=label)
    page = report.write(tmp_path / "report.html").read_text(encoding="utf-8")
    text = _specs_text(page)
    assert "<" not in text, "the specs element holds markup an HTML parser reads"
    specs = json.loads(text)  # what JSON.parse reads: no escape that JSON lacks
    assert set(specs) == {f"chart-{key}" for key, _ in report.figures()}
    assert any(label in held for held in _strings(specs)), "the label did not survive"


def _strings(value: object) -> set[str]:
    """Every string value held anywhere in a JSON document."""
    if isinstance(value, str):
        return {value}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return set().union(*map(_strings, items)) if items else set()
