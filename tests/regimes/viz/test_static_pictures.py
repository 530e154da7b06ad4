"""Pictures of a chart (PNG, SVG, the notebook view) do not ask to be dragged."""

from __future__ import annotations

import base64
import json
import re

import pytest

import regimes
from regimes.viz._layout import ZOOM_HINT


@pytest.fixture(scope="module")
def result():
    trials = regimes.simulate_sweep(2, anomaly="spike", trials=3, seed=0).trials
    return regimes.detect_regimes(trials, n_boot=200)


def test_the_interactive_chart_keeps_the_hint_and_its_svg_drops_it(result, tmp_path):
    chart = result.chart()
    assert ZOOM_HINT in json.dumps(chart.to_dict())
    svg = regimes.plot.save(chart, tmp_path / "latency.svg").read_text()
    assert "Latency by decoding budget" in svg and "drag across" not in svg


def test_the_notebook_view_draws_no_hint(result):
    page = result._repr_html_()
    (encoded,) = re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", page)
    svg = base64.b64decode(encoded).decode("utf-8")
    assert "Latency by decoding budget" in svg and "drag across" not in svg
