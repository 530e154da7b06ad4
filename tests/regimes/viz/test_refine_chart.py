"""The refinement chart, on the committed H200 refinement and on simulated ones.

``cuda-h200-inject`` is real hardware with a synthetic 3x slowdown injected on budgets
105..201 and refined on the GPU (its probes are in the run); the simulated runs come
from :class:`regimes.refine.SimulatedProbe` (synthetic trials, known truth).
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import polars as pl
import pytest

import regimes
from regimes import plot
from regimes.errors import RegimesInputError
from regimes.refine import SimulatedProbe, refine_boundaries
from regimes.viz._layout import BRUSH

DATA = Path(__file__).resolve().parents[3] / "examples" / "data"
GRID = list(range(480, 657, 16))


def chart_rows(spec: dict) -> pl.DataFrame:
    """The long table a chart carries (inline CSV), every part of it."""
    data = spec["data"]
    values = spec["datasets"][data["name"]] if "name" in data else data["values"]
    return pl.read_csv(io.StringIO(values), infer_schema_length=None)


def layers(spec: dict) -> list[dict]:
    return spec["vconcat"][0]["spec"]["layer"]


@pytest.fixture(scope="module")
def h200():
    return refine_boundaries(DATA / "cuda-h200-inject", max_generations=0)


@pytest.fixture(scope="module")
def simulated():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=11)  # synthetic
    return refine_boundaries(oracle.sweep(GRID, trials=3), probe=oracle)


def test_the_h200_chart_draws_the_refined_brackets(h200):
    spec = h200.chart().to_dict()
    rows = chart_rows(spec)
    brackets = rows.filter(pl.col("part") == "bracket").sort("low")
    assert brackets.select("kind", "low", "high").rows() == [
        ("onset", 104, 105),
        ("recovery", 201, 202),
    ]
    assert brackets.get_column("label").to_list() == ["onset 104|105", "recovery 201|202"]
    grid = rows.filter(pl.col("part") == "grid").sort("x_lo")
    # the detection's bounds put the recovery's last anomalous budget at 176 to 192, so
    # its bracket starts at 176: the probe at 192 was never run (the probes on disk were
    # planned in the bracket (192, 208)), and the recovery is resolved without it
    assert grid.select("x_lo", "x_hi").rows() == [(96, 112), (176, 208)]
    probes = rows.filter(pl.col("part") == "probe")
    assert sorted(probes.get_column("budget").to_list()) == [
        104,
        105,
        106,
        108,
        192,
        200,
        201,
        202,
        204,
    ]
    decisions = dict(probes.select("budget", "decision").rows())
    assert decisions.pop(192) == "pending"
    assert set(decisions.values()) == {"normal", "anomalous"}
    # the probe at 104 (normal) is about a third of the one at 105 (3x injected)
    level = dict(probes.select("budget", "value").rows())
    assert 2.5 < level[105] / level[104] < 4.5
    on_grid = rows.filter((pl.col("part") == "cell") & pl.col("on_grid"))
    assert sorted(on_grid.get_column("budget").to_list()) == list(range(64, 257, 16))
    assert "onset 104|105" in spec["description"]


def test_a_brackets_label_stands_beside_its_rules_not_on_them(h200):
    spec = h200.chart().to_dict()
    texts = [
        layer
        for layer in layers(spec)
        if layer["mark"]["type"] == "text" and layer["encoding"]["text"]["field"] == "label"
    ]
    assert texts
    for layer in texts:
        mark, x = layer["mark"], layer["encoding"]["x"]["field"]
        # the text starts past the bracket's right rule or ends before its left one
        assert (x, mark["align"]) in (("x_hi", "left"), ("x_lo", "right")), (x, mark)
        assert abs(mark["dx"]) >= 4 and (mark["dx"] > 0) == (x == "x_hi"), mark
    brackets = chart_rows(spec).filter(pl.col("part") == "bracket").sort("low")
    # the onset's label points right, the recovery's left: on two lines they cannot meet
    assert brackets.get_column("label_right").to_list() == [True, False]
    assert brackets.get_column("label_low").n_unique() == 2
    lines = {layer["mark"]["dy"] for layer in texts}
    assert len(lines) == 2 and max(lines) - min(lines) >= 12, lines


def test_every_mark_has_a_tooltip_and_the_strip_zooms(h200):
    spec = h200.chart().to_dict()
    for layer in layers(spec):
        assert "tooltip" in layer["encoding"], layer["mark"]
    assert any(p["name"] == BRUSH for p in spec["params"])


def test_probes_are_coloured_and_shaped_by_decision(h200):
    probe_layer = layers(h200.chart().to_dict())[-1]
    colour, shape = probe_layer["encoding"]["color"], probe_layer["encoding"]["shape"]
    assert colour["field"] == shape["field"] == "decision"
    assert colour["scale"]["domain"] == ["normal", "anomalous", "pending"]
    for scale in (colour["scale"], shape["scale"]):
        assert len(set(scale["range"])) == 3


def test_the_simulated_chart_holds_the_known_answer(simulated):
    chart = plot.refine_chart(simulated)
    brackets = chart_rows(chart.to_dict()).filter(pl.col("part") == "bracket").sort("low")
    assert brackets.select("low", "high").rows() == [(504, 505), (633, 634)]
    assert brackets.get_column("label").to_list() == ["onset 504|505", "recovery 633|634"]


def test_an_open_bracket_says_why():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=4)  # synthetic
    result = refine_boundaries(oracle.sweep(GRID, trials=3), probe=oracle, max_generations=9)
    rows = chart_rows(result.chart().to_dict()).filter(pl.col("part") == "bracket")
    open_rows = rows.filter(~pl.col("resolved"))
    assert open_rows.height >= 1
    for row in open_rows.iter_rows(named=True):
        assert row["label"] == f"{row['kind']} {row['low']}|{row['high']} ({row['status']})"


def test_a_speedup_boundary_is_drawn_as_the_speedup():
    oracle = SimulatedProbe(505, 633, factor=3.0, inject_cache=(True,), seed=2)  # synthetic
    coarse = oracle.sweep(range(384, 769, 16), trials=3, use_cache=(True, False))
    result = refine_boundaries(coarse, probe=oracle)
    spec = result.chart().to_dict()
    rows = chart_rows(spec)
    speedup = rows.filter(pl.col("group").str.starts_with("KV-cache speedup"))
    brackets = speedup.filter(pl.col("part") == "bracket").sort("low")
    assert brackets.select("low", "high").rows() == [(504, 505), (633, 634)]
    # the speedup cells are cache-off over cache-on medians: above 1, lower inside
    cells = speedup.filter(pl.col("part") == "cell")
    inside = cells.filter(pl.col("budget").is_between(505, 633)).get_column("value").median()
    outside = cells.filter(~pl.col("budget").is_between(505, 633)).get_column("value").median()
    assert 1 < inside < outside
    assert speedup.filter(pl.col("part") == "trial").height == 0
    assert "speedup" in layers(spec)[-1]["encoding"]["y"]["title"]


def test_a_result_without_boundaries_or_trials_is_a_clear_error(h200):
    empty = dataclasses.replace(h200, boundaries=h200.boundaries.clear())
    with pytest.raises(RegimesInputError, match="no boundary"):
        plot.refine_chart(empty)
    bare = dataclasses.replace(h200, trials=None)
    with pytest.raises(RegimesInputError, match="needs the trials"):
        plot.refine_chart(bare)


def test_the_latency_chart_marks_probe_budgets(h200):
    trials = h200.trials
    detection = regimes.detect_regimes(trials, n_boot=200)
    probes = sorted(set(trials["budget"]) - set(h200.params["grid"]))
    marked = plot.latency_chart(detection, trials, probes=probes).to_dict()
    points = next(lay for lay in layers(marked) if "shape" in lay["encoding"])
    assert points["encoding"]["shape"]["scale"]["range"] == ["circle", "diamond"]
    curve = chart_rows(marked).filter(pl.col("part") == "curve")
    assert sorted(curve.filter(pl.col("cell") == "probe")["budget"].to_list()) == probes
    plain = plot.latency_chart(detection, trials).to_dict()
    assert all("shape" not in lay["encoding"] for lay in layers(plain))
