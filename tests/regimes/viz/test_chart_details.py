"""Chart details a reader meets: value axes, phase bars, the overview strip, labels.

What these specs promise is checked where it shows, in a browser, by
``test_browser.py``; these tests pin the spec that draws it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import regimes
from regimes import plot
from regimes.viz import _style
from regimes.viz._layout import HALO_COLOR, LOG_GRID_MANTISSAS, grid_ticks, value_scale

INSTRUMENTED = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-instrumented"


def _units(spec: Any) -> list[dict[str, Any]]:
    """Every unit spec (one with a mark), depth first, in drawing order."""
    if isinstance(spec, list):
        return [unit for item in spec for unit in _units(item)]
    if not isinstance(spec, dict):
        return []
    found = [spec] if "mark" in spec else []
    for key in ("vconcat", "hconcat", "layer", "spec"):
        if key in spec:
            found += _units(spec[key])
    return found


def _mark(unit: dict[str, Any]) -> dict[str, Any]:
    mark = unit["mark"]
    return mark if isinstance(mark, dict) else {"type": mark}


def _y_axes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        unit["encoding"]["y"]["axis"]
        for unit in _units(spec)
        if isinstance(unit.get("encoding", {}).get("y"), dict)
        and "axis" in unit["encoding"]["y"]
        and unit["encoding"]["y"].get("type") == "quantitative"
    ]


@pytest.fixture(scope="module")
def instrumented() -> pl.DataFrame:
    return regimes.load(INSTRUMENTED)


def _mantissa_keeps_grid(test: str, value: float) -> bool:
    """Evaluate the gridline condition of a log axis for one tick value, as Vega would."""
    import math

    mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
    assert "indexof" in test and str(list(LOG_GRID_MANTISSAS)) in test
    return mantissa in LOG_GRID_MANTISSAS


def test_a_log_value_axis_draws_gridlines_only_at_1_2_and_5(instrumented):
    rep = regimes.detect_regimes(instrumented, n_boot=200)
    axes = _y_axes(plot.latency_chart(rep, instrumented, log_y=True).to_dict())
    conditioned = [a for a in axes if isinstance(a.get("gridOpacity"), dict)]
    assert conditioned, axes
    test = conditioned[0]["gridOpacity"]["condition"]["test"]
    kept = [
        v for v in (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.9) if _mantissa_keeps_grid(test, v)
    ]
    assert kept == [0.01, 0.02, 0.05, 0.1, 0.2]
    assert conditioned[0]["gridOpacity"]["value"] == 0
    # ... and every value axis keeps its end labels inside the panel (headers align)
    assert all(a.get("labelFlush") for a in axes), axes


def test_a_log_value_scale_leaves_room_beyond_the_data():
    assert value_scale(True).to_dict()["padding"] > 0
    assert "padding" not in value_scale(False, zero=True).to_dict()  # never below zero


def test_short_prefill_stands_beside_decode_on_a_log_axis_over_the_budgets(instrumented):
    spec = plot.phase_chart(instrumented).to_dict()
    bars = next(u for u in _units(spec) if _mark(u)["type"] == "rect" and "y2" in u["encoding"])
    assert bars["encoding"]["y"]["scale"]["type"] == "log"
    assert bars["encoding"]["y2"] == {"value": "height"}  # from the foot of the panel
    assert bars["encoding"]["x"]["axis"]["values"] == list(range(64, 513, 64))
    data = pl.read_csv(
        io.StringIO(spec["datasets"][spec["data"]["name"]]), infer_schema_length=None
    )
    rows = data.filter(pl.col("part") == "bar")
    prefill, decode = (
        rows.filter(pl.col("phase") == p).sort("group", "budget") for p in ("prefill", "decode")
    )
    assert (prefill["x1"] <= decode["x0"]).all()  # side by side, not stacked
    assert (prefill["y1"] == prefill["seconds"]).all()


def test_phases_long_enough_to_see_stay_stacked(instrumented):
    longer = instrumented.with_columns(
        pl.col("prefill_s") * 40, pl.col("latency_s") + pl.col("prefill_s") * 39
    )
    spec = plot.phase_chart(longer).to_dict()
    bars = next(u for u in _units(spec) if _mark(u)["type"] == "rect" and "y2" in u["encoding"])
    assert bars["encoding"]["y"]["scale"].get("type") != "log"
    assert bars["encoding"]["y2"]["field"] == "y0"  # decode stacked on prefill


def test_bar_ticks_are_the_grid_budgets():
    assert grid_ticks([64, 128, 192, 256]) == [64, 128, 192, 256]
    many = grid_ticks(list(range(16, 513, 16)))
    assert len(many) <= 12 and set(many) <= set(range(16, 513, 16)) and many[0] == 16


def test_the_overview_strip_names_each_group_by_colour(instrumented):
    rep = regimes.detect_regimes(instrumented, n_boot=200)
    spec = plot.latency_chart(rep, instrumented).to_dict()
    strip = spec["vconcat"][1]
    colour = strip["encoding"]["color"]
    assert colour["field"] == "group" and len(colour["scale"]["range"]) == 2
    assert colour["scale"]["domain"] == ["cache off", "cache on"]
    assert colour["legend"]["labelLimit"] == 0
    assert spec["resolve"]["scale"]["color"] == "independent"  # not the panels' series
    one = regimes.detect_regimes(instrumented.filter(pl.col("use_cache")), n_boot=200)
    single = plot.latency_chart(one, instrumented.filter(pl.col("use_cache"))).to_dict()
    assert "field" not in single["vconcat"][1]["encoding"]["color"]  # one grey line


def test_interval_labels_are_drawn_over_the_change_rules_on_a_halo():
    sweep = regimes.published_gpt2_medium(trials=5, cv=0.10, seed=0)
    rep = regimes.detect_regimes(sweep.trials, n_boot=200)
    assert rep.change_points.filter(pl.col("significant")).height
    units = _units(plot.latency_chart(rep, sweep.trials).to_dict()["vconcat"][0])
    kinds = [(_mark(u)["type"], _mark(u).get("color")) for u in units]
    change = _style.CHANGE_COLOR
    rule = next(i for i, (kind, colour) in enumerate(kinds) if kind == "rule" and colour == change)
    texts = [i for i, (kind, _) in enumerate(kinds) if kind == "text"]
    assert len(texts) == 2 and min(texts) > rule, kinds
    assert kinds[texts[0]][1] == HALO_COLOR and _mark(units[texts[0]])["strokeWidth"] >= 3


def test_the_operators_chart_gives_every_line_a_colour_of_its_own_and_a_legend_that_fits():
    run = Path(__file__).resolve().parents[3] / "examples" / "data" / "cpu-slow-attention"
    report = regimes.detect_regimes(regimes.load(run))
    result = regimes.attribute_operators(regimes.load(run, table="ops"), report, n_boot=200)
    assert result.profiles.get_column("operator").n_unique() > len(_style.PALETTE)
    spec = result.chart().to_dict()
    drawn = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    lines = pl.read_csv(io.StringIO(spec["datasets"][drawn["data"]["name"]]))
    # one colour per line: the flagged operators and the largest kept, the rest pooled
    assert lines.get_column("operator").n_unique() <= len(_style.PALETTE)
    flagged = result.operators.filter(pl.col("flagged")).get_column("operator").to_list()
    assert set(flagged) <= set(lines.get_column("operator").to_list())
    total = lines.group_by("budget").agg(pl.col("share").sum()).sort("budget")
    before = result.profiles.group_by("budget").agg(pl.col("share").sum()).sort("budget")
    assert total.get_column("share").to_list() == pytest.approx(before["share"].to_list())
    # the legend wraps into columns instead of one row wider than a laptop's screen
    assert drawn["encoding"]["color"]["legend"]["columns"] == 2
    assert drawn["encoding"]["x"]["scale"]["zero"] is False


def test_an_explanations_log_axis_keeps_its_labels_apart():
    run = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-inject"
    spec = regimes.memory_confound(regimes.load(run)).chart().to_dict()
    rule = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "rule")
    assert rule["encoding"]["x"]["scale"]["type"] == "log"
    assert rule["encoding"]["x"]["axis"]["labelSeparation"] >= 4
