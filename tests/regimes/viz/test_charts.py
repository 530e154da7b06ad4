"""Charts of regimes.plot, built from the real detection on synthetic sweeps.

All data is synthetic (``regimes.simulate``; the ``synthetic_run`` fixture of
tests/conftest.py). Charts are checked through their
Vega-Lite specs (the data each layer draws, the encodings, the interaction) and
through vl-convert's offline rendering (what the axes show); the browser test covers
rendering in Chromium.
"""

from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import polars as pl
import pytest

import regimes
from regimes import plot
from regimes._result import AnalysisResult
from regimes.data.schema import RegimesInputError
from regimes.data.simulate import published_gpt2_medium, published_gpt2_medium_cache, simulate_sweep
from regimes.detect import detect_regimes
from regimes.viz import _style, result_chart
from regimes.viz._frames import sig3
from regimes.viz._layout import BRUSH, GROUP_PICK

# and the page's white, the halo round a label
OKABE_ITO = {c.lower() for c in _style.PALETTE} | {"#000000", "#666666", "black", "#ffffff"}


@pytest.fixture(scope="module")
def trials(synthetic_run) -> pl.DataFrame:
    return synthetic_run.trials()


@pytest.fixture(scope="module")
def report(trials):
    return detect_regimes(trials, n_boot=200)


@pytest.fixture(scope="module")
def published():
    """The published gpt2-medium MPS case: synthetic trials around the published means."""
    sweep = published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    return sweep, detect_regimes(sweep, n_boot=400)


# --------------------------------------------------------------------------- spec helpers


def chart_data(spec: dict, layer: int | None = None) -> pl.DataFrame:
    """The inline CSV data of a chart spec (or of one of its layers), as a frame."""
    # a layer without data of its own draws the chart's (Altair hoists shared data)
    data = (spec if layer is None else spec["layer"][layer]).get("data") or spec.get("data", {})
    if "name" in data:
        values = spec["datasets"][data["name"]]
    else:
        values = data["values"]
    assert isinstance(values, str), "charts carry their data as inline CSV"
    return pl.read_csv(io.StringIO(values), infer_schema_length=None)


def without_view_names(spec: dict) -> dict:
    """``spec`` with Altair's generated view names (``view_12``) made equal.

    Altair numbers unnamed views from a process-wide counter (older releases do so on
    every ``to_dict``), so two builds of one chart differ only in those names.
    """
    return json.loads(re.sub(r'"view_\d+"', '"view"', json.dumps(spec)))


def grid(spec: dict) -> dict:
    """The small multiples of a panels-over-strip chart."""
    return spec["vconcat"][0]


def strip(spec: dict) -> dict:
    """The overview strip under the panels."""
    return spec["vconcat"][1]


def units(spec: Any) -> list[dict]:
    """Every view with a mark in a spec, however nested."""
    found = []
    if isinstance(spec, dict):
        if "mark" in spec:
            found.append(spec)
        for value in spec.values():
            found += units(value)
    elif isinstance(spec, list):
        for value in spec:
            found += units(value)
    return found


def colours(spec: Any) -> set[str]:
    """Every colour a spec names: mark colours and scale ranges."""
    found: set[str] = set()
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "resolve":  # scale resolutions, not colours ("color": "independent")
                continue
            if key in ("color", "fill", "stroke") and isinstance(value, str):
                found.add(value.lower())
            elif key == "range" and isinstance(value, list):
                found |= {v.lower() for v in value if isinstance(v, str)}
            else:
                found |= colours(value)
    elif isinstance(spec, list):
        for value in spec:
            found |= colours(value)
    return found


def axis_labels(svg: str) -> list[list[str]]:
    """The tick labels of every axis an SVG rendering draws, axis by axis."""
    groups = re.findall(r'<g class="mark-text role-axis-label"[^>]*>(.*?)</g>', svg, re.S)
    return [re.findall(r">([^<]*)</text>", group) for group in groups]


def numbers(labels: list[str]) -> list[float]:
    return [float(label.replace(",", "").replace("−", "-")) for label in labels]


# --------------------------------------------------------------------------- labels, axes


def test_group_labels_name_what_varies():
    keys = pl.DataFrame(
        {"backend": ["mps", "mps", "cpu"], "model": ["gpt2"] * 3, "use_cache": [True, False, True]}
    )
    labels, caption = plot.group_labels(keys, ["backend", "model", "use_cache"])
    assert labels["group"].to_list() == ["cpu · cache on", "mps · cache off", "mps · cache on"]
    assert caption == "gpt2"
    single, caption = plot.group_labels(keys.head(1), ["backend", "model", "use_cache"])
    assert single["group"].to_list() == ["mps · gpt2 · cache on"] and caption == ""


def test_axes_are_read_from_the_report(report):
    assert plot.report_axes(report) == (report.x, report.y, report.group_columns)
    bare = SimpleNamespace(curve=report.curve.drop("device"))
    x, y, groups = plot.report_axes(bare)
    assert (x, y) == ("budget", "latency_s") and "device" not in groups
    with pytest.raises(RegimesInputError, match="polars DataFrame attribute 'curve'"):
        plot.report_axes(SimpleNamespace(curve=None))


# --------------------------------------------------------------------------- latency chart


def test_latency_chart_draws_every_part(report, trials):
    with_warmups = pl.concat([trials, trials.head(7).with_columns(pl.lit(True).alias("warmup"))])
    spec = plot.latency_chart(report, with_warmups).to_dict()
    data = chart_data(spec)
    counts = dict(data.group_by("part").len().iter_rows())
    assert counts["curve"] == report.curve.height == counts["overview"]  # strip: each cell
    assert counts["trial"] == trials.height  # warm-ups are not drawn
    assert counts["interval"] == report.anomalies.height
    significant = report.change_points.filter(pl.col("significant")).height
    assert counts.get("change", 0) == significant
    assert grid(spec)["facet"]["sort"] == sorted(data["group"].unique().to_list())
    assert len(grid(spec)["facet"]["sort"]) == report.groups.height
    assert grid(spec)["resolve"]["scale"]["y"] == "independent"
    marks = [u["mark"]["type"] for u in grid(spec)["spec"]["layer"]]
    # shade, trials, CI band, median and trend lines, median points, change rules, then
    # the interval's label (on its halo) over the rules
    assert marks[:3] == ["rect", "circle", "area"] and "rule" in marks
    assert marks.index("text") > marks.index("rule")


def test_anomaly_is_shaded_over_its_budgets_and_labelled(report, synthetic_run, tmp_path):
    truth = synthetic_run.truth
    chart = plot.latency_chart(report)
    interval = chart_data(chart.to_dict()).filter(pl.col("part") == "interval").row(0, named=True)
    # The shading runs half a grid step (16 budgets) beyond each end of the interval.
    assert (interval["x_lo"], interval["x_hi"]) == (truth["start"] - 8, truth["end"] + 8)
    assert interval["group"] == "synthetic-spiky · cache on"
    anomaly = report.anomalies.row(0, named=True)
    label = (
        f"×{sig3(anomaly['ratio'])} [{sig3(anomaly['ratio_low'])}, {sig3(anomaly['ratio_high'])}]"
    )
    assert interval["label"] == label
    assert abs(math.log(anomaly["ratio"] / synthetic_run.spike_ratio)) < 0.1
    svg = plot.save(chart, tmp_path / "latency.svg").read_text()
    assert label in svg  # drawn, not only in the data


def test_labels_stay_inside_their_panel():
    """An anomaly near a panel's edge is labelled from that edge inwards."""
    sweep = simulate_sweep(8, anomaly="spike", trials=3, seed=0).trials
    rep = detect_regimes(sweep, n_boot=200)
    data = chart_data(plot.latency_chart(rep).to_dict()).filter(pl.col("part") == "interval")
    lo, hi = float(rep.curve["budget"].min()), float(rep.curve["budget"].max())
    where = (data["x_mid"] - lo) / (hi - lo)
    expected = ["left" if w < 0.3 else "right" if w > 0.7 else "center" for w in where.to_list()]
    assert data["label_align"].to_list() == expected
    assert {"left", "right"} <= set(expected)  # the seeded sweep has spikes near both ends


def test_latency_chart_options(report):
    log_spec = plot.latency_chart(report, log_y=True).to_dict()
    scales = [
        layer["encoding"]["y"].get("scale", {})
        for layer in grid(log_spec)["spec"]["layer"]
        if "y" in layer.get("encoding", {}) and "field" in layer["encoding"]["y"]
    ]
    assert scales and all(s.get("type") == "log" and s.get("nice") is False for s in scales)
    one = plot.latency_chart(report, groups=["synthetic-smooth · cache on"]).to_dict()
    assert grid(one)["facet"]["sort"] == ["synthetic-smooth · cache on"]
    assert set(chart_data(one)["group"].unique()) == {"synthetic-smooth · cache on"}
    with pytest.raises(RegimesInputError, match="unknown group"):
        plot.latency_chart(report, groups=["no such group"])


def _y_scale_types(spec: dict) -> set:
    return {
        layer["encoding"]["y"].get("scale", {}).get("type", "linear")
        for layer in grid(spec)["spec"]["layer"]
        if "field" in layer.get("encoding", {}).get("y", {})
    }


def test_latency_axis_turns_log_when_outliers_would_flatten_it(report, trials):
    assert _y_scale_types(plot.latency_chart(report, trials).to_dict()) == {"linear"}
    stray = (
        trials.with_row_index("row")
        .with_columns(
            pl.when(pl.col("row") == 0)
            .then(pl.col("latency_s") * 20)
            .otherwise(pl.col("latency_s"))
            .alias("latency_s")
        )
        .drop("row")
    )
    assert _y_scale_types(plot.latency_chart(report, stray).to_dict()) == {"log"}
    assert _y_scale_types(plot.latency_chart(report, stray, log_y=False).to_dict()) == {"linear"}


# --------------------------------------------------------------------------- issue: first chart


def test_chart_is_zoomed_to_the_data_and_its_log_axis_fits(published, tmp_path):
    """The published case spans budgets 480..656 and 8..115 s: the axes show that."""
    sweep, rep = published
    svg = plot.save(plot.latency_chart(rep, sweep, log_y=True), tmp_path / "p.svg").read_text()
    axes = [numbers(labels) for labels in axis_labels(svg) if labels]
    x_axes = [a for a in axes if 480 in a]
    assert x_axes and all(min(a) >= 470 and max(a) <= 660 for a in x_axes)  # not from 0
    panel_y = next(a for a in axes if 480 not in a)
    assert min(panel_y) >= 5 and max(panel_y) <= 200  # not whole decades 1..1000
    spec = plot.latency_chart(rep, sweep).to_dict()
    for unit in units(grid(spec)):
        x_scale = unit.get("encoding", {}).get("x", {}).get("scale")
        if x_scale is not None:
            assert x_scale["zero"] is False and x_scale["nice"] is False
            assert x_scale["domain"] == {"param": BRUSH, "encoding": "x"}


def test_chart_marks_all_carry_tooltips_units_and_safe_colours(published):
    sweep, rep = published
    spec = plot.latency_chart(rep, sweep).to_dict()
    for unit in units(spec):
        assert "tooltip" in unit.get("encoding", {}), f"a {unit['mark']} mark has no tooltip"
    titles = {
        channel["title"]
        for unit in units(spec)
        for name, channel in unit.get("encoding", {}).items()
        if name in ("x", "y") and isinstance(channel, dict) and "title" in channel
    }
    assert {"decoding budget (tokens)", "latency (s)"} <= titles
    assert colours(spec) <= OKABE_ITO, colours(spec) - OKABE_ITO
    row = rep.anomalies.row(0, named=True)
    label = f"×{sig3(row['ratio'])} [{sig3(row['ratio_low'])}, {sig3(row['ratio_high'])}]"
    assert label in spec["description"]
    assert spec["title"]["limit"] == 0


def test_chart_of_the_published_case_has_trials_band_trend_changes_and_label(published):
    sweep, rep = published
    data = chart_data(result_chart(rep, sweep).to_dict())
    assert set(data["part"]) == {"curve", "trial", "interval", "bounds", "change", "overview"}
    interval = data.filter(pl.col("part") == "interval").row(0, named=True)
    assert (interval["start"], interval["end"]) == (512, 624)
    assert re.fullmatch(r"×\d+\.?\d* \[\d+\.?\d*, \d+\.?\d*\]", interval["label"])


def test_many_groups_get_a_selector_small_multiples_and_a_brush():
    sweep = simulate_sweep(8, anomaly="spike", trials=3, seed=0).trials
    rep = detect_regimes(sweep, n_boot=200)
    spec = plot.latency_chart(rep, sweep).to_dict()
    picker = next(p for p in spec["params"] if p["name"] == GROUP_PICK)
    assert picker["bind"]["input"] == "select"
    assert picker["bind"]["options"][1:] == grid(spec)["facet"]["sort"]
    assert len(picker["bind"]["options"]) == 9  # all groups, then each group
    assert grid(spec)["columns"] == 3
    assert grid(spec)["spec"]["width"] == _style.SMALL_FACET_WIDTH
    assert grid(spec)["facet"]["header"]["labelLimit"] == 0
    brush = next(p for p in spec["params"] if p["name"] == BRUSH)
    assert brush["select"] == {"type": "interval", "encodings": ["x"]}
    assert {"filter": f"{GROUP_PICK} == 'all groups' || datum.group == {GROUP_PICK}"} in grid(spec)[
        "transform"
    ]
    for unit in units(spec):
        legend = unit.get("encoding", {}).get("color", {}).get("legend")
        if legend:
            assert legend["labelLimit"] == 0


def test_one_group_is_named_by_the_subtitle(published):
    sweep, rep = published
    spec = plot.latency_chart(rep, sweep).to_dict()
    assert "gpt2-medium" in spec["title"]["subtitle"]
    assert grid(spec)["facet"]["header"]["labelExpr"] == "''"
    assert "bind" not in next(p for p in spec["params"] if p["name"] == GROUP_PICK)


# --------------------------------------------------------------------------- chart() of results


@dataclass(frozen=True, repr=False)
class _Detection(AnalysisResult):
    """A detection result as the result protocol carries it (tables and trials)."""

    _tables: ClassVar[tuple[str, ...]] = ("curve", "change_points", "anomalies")
    curve: pl.DataFrame
    change_points: pl.DataFrame
    anomalies: pl.DataFrame
    x: str
    y: str
    group_columns: list[str]
    trials: pl.DataFrame

    def summary(self) -> str:
        return "detection"


def test_result_chart_method_gives_the_full_chart(published):
    sweep, rep = published
    result = _Detection(
        rep.curve, rep.change_points, rep.anomalies, rep.x, rep.y, rep.group_columns, sweep
    )
    spec = without_view_names(result.chart().to_dict())
    assert spec == without_view_names(plot.latency_chart(rep, sweep).to_dict())
    assert "trial" in set(chart_data(spec)["part"])  # from result.trials, no df needed
    # The detection's own result: rep.chart() is the same full chart, trials included.
    assert without_view_names(rep.chart().to_dict()) == spec


def test_every_analysis_result_has_a_chart(trials, report):
    sp = regimes.cache_speedup(trials)
    ph = regimes.attribute_phases(trials, report, n_boot=200)
    speed = result_chart(sp).to_dict()
    assert speed["title"]["text"].startswith("KV-cache speedup")
    phases = result_chart(ph, trials).to_dict()
    assert set(chart_data(phases)["part"]) == {"bar", "interval", "overview"}
    assert "decode" in chart_data(phases).filter(pl.col("part") == "interval")["label"][0]
    excess = result_chart(ph).to_dict()  # no trials: the excess per phase with CIs
    assert {"rule", "point", "text"} <= {u["mark"]["type"] for u in units(excess)}
    for spec in (speed, phases, excess):
        assert spec["description"]
        for unit in units(spec):
            assert "tooltip" in unit.get("encoding", {})
        assert colours(spec) <= OKABE_ITO
    with pytest.raises(RegimesInputError, match="no chart is known"):
        result_chart(SimpleNamespace(nothing=1))


def test_backend_memory_and_alignment_charts(two_backend_trials):
    both = two_backend_trials
    rep = detect_regimes(both, n_boot=200)
    cb = regimes.compare_backends(both, rep)
    mc = regimes.memory_confound(both, rep)
    for result, quantity in ((cb, "ratio of ratios"), (mc, "with mem_driver_bytes held fixed")):
        spec = result_chart(result).to_dict()
        rows = chart_data(spec)
        assert quantity in set(rows["series"])
        assert (rows["low"] <= rows["estimate"]).all() and (rows["estimate"] <= rows["high"]).all()
        assert spec["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"
        assert colours(spec) <= OKABE_ITO
    prompts = pl.concat(
        [
            sweep.trials.with_columns(pl.lit(p).alias("prompt_tokens"))
            for p, sweep in (
                (16, simulate_sweep(1, anomaly="spike", width=3, ratio=5.0, trials=3, seed=4)),
                (64, simulate_sweep(1, anomaly="spike", width=3, ratio=5.0, trials=3, seed=4)),
            )
        ]
    )
    al = regimes.align_boundaries(prompts, detect_regimes(prompts, n_boot=200))
    spec = result_chart(al).to_dict()
    coordinates = set(chart_data(spec)["coordinate"])
    assert coordinates == {"in decoding budget", "in total tokens (prompt + budget)"}


# --------------------------------------------------------------------------- other charts


def test_phase_chart_stacks_decode_on_prefill(trials):
    spec = plot.phase_chart(trials, log_y=False).to_dict()  # linear: the stacked bars
    data = chart_data(spec).filter(pl.col("part") == "bar")
    wide = data.pivot(on="phase", index=["group", "budget"], values=["y0", "y1"])
    assert wide.height == trials.select("model", "use_cache", "budget").n_unique()
    assert (wide["y0_prefill"] == 0).all()
    assert (wide["y0_decode"] - wide["y1_prefill"]).abs().max() < 1e-9
    medians = trials.group_by("model", "use_cache", "budget").agg(
        pl.col("prefill_s").median(), pl.col("decode_s").median()
    )
    total = (medians["prefill_s"] + medians["decode_s"]).sort()
    assert (wide["y1_decode"].sort() - total).abs().max() < 1e-5 * total.max()


def test_phase_chart_needs_phases(trials):
    with pytest.raises(RegimesInputError, match="instrumentation"):
        plot.phase_chart(trials.drop("prefill_s"))
    with pytest.raises(RegimesInputError, match="instrumentation"):
        plot.phase_chart(trials.with_columns(pl.lit(None, dtype=pl.Float64).alias("decode_s")))


def test_heatmap_keeps_every_cell_when_few_budgets(report):
    spec = plot.overview_heatmap(report).to_dict()
    cells = chart_data(spec, 0)
    assert cells.height == report.curve.filter(pl.col("ratio").is_not_null()).height
    outlines = chart_data(spec, 1)
    assert outlines.height == report.anomalies.height
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["type"] == "log" and scale["domainMid"] == 1
    assert scale["scheme"] == "blueorange"  # readable with red-green colour blindness
    low, high = scale["domain"]
    assert math.isclose(low * high, 1.0)
    assert spec["description"] and spec["layer"][0]["encoding"]["y"]["axis"]["labelLimit"] == 0


def test_heatmap_stays_small_at_50_groups_by_500_budgets():
    # 500 budgets are more than detection models at once: the curves are drawn against a
    # running median, untested
    sweep = simulate_sweep(50, anomaly="spike", n_budgets=500, trials=2, seed=1)
    big = detect_regimes(sweep.trials, n_boot=100)
    chart = plot.overview_heatmap(big, max_columns=200)
    spec = chart.to_dict()
    cells = chart_data(spec, 0)
    assert cells.height <= 50 * 200
    assert cells["group"].n_unique() == 50
    assert len(json.dumps(spec)) < 1_000_000
    # Binning keeps the ratio furthest from 1 in each cell, so no spike is averaged away.
    extreme = (
        big.curve.filter(pl.col("ratio").is_not_null())
        .group_by("model")
        .agg(pl.col("ratio").log().abs().max().alias("peak"))
    )
    drawn = cells.group_by("group").agg(pl.col("ratio").log().abs().max().alias("drawn"))
    both = extreme.join(drawn, left_on="model", right_on="group")
    assert both.height == 50
    assert (both["peak"] - both["drawn"]).abs().max() < 1e-4


def test_save_writes_each_format_offline(report, tmp_path):
    chart = plot.overview_heatmap(report)
    png = plot.save(chart, tmp_path / "heat.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot.save(chart, tmp_path / "heat.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "synthetic-spiky" in svg
    page = plot.save(chart, tmp_path / "heat.html").read_text()
    assert "<script src" not in page and "vegaEmbed" in page
    assert json.loads(plot.save(chart, tmp_path / "heat.json").read_text())["layer"]
    with pytest.raises(RegimesInputError, match="cannot save a chart as 'heat.gif'"):
        plot.save(chart, tmp_path / "heat.gif")
    (tmp_path / "file").write_text("")
    with pytest.raises(RegimesInputError, match="cannot write"):
        plot.save(chart, tmp_path / "file" / "heat.svg")


def test_a_chart_saved_as_html_is_laid_out_at_a_phones_width(report, tmp_path):
    """The page names its viewport: without it a phone lays it out 980 px wide, shrunk."""
    page = plot.save(plot.latency_chart(report), tmp_path / "latency.html").read_text()
    head = page[: page.index("</head>")]
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in head


def test_speedup_chart_shades_collapses():
    cache = published_gpt2_medium_cache(trials=5, seed=0)
    result = regimes.cache_speedup(cache)
    spec = plot.speedup_chart(result).to_dict()
    data = chart_data(spec)
    counts = dict(data.group_by("part").len().iter_rows())
    assert counts["curve"] == result.speedup.height
    assert counts.get("interval", 0) == result.collapses.height >= 1
    assert any(
        layer.get("encoding", {}).get("y", {}).get("datum") == 1
        for layer in grid(spec)["spec"]["layer"]
    )  # the no-speedup line
    curve = data.filter(pl.col("part") == "curve")
    assert (curve["ci_low"] <= curve["speedup"]).all()
    assert (curve["speedup"] <= curve["ci_high"]).all()
    titles = {u["encoding"]["y"].get("title") for u in units(grid(spec)) if "y" in u["encoding"]}
    assert "speedup, cache off / on (×)" in titles
    with pytest.raises(RegimesInputError, match="attribute 'speedup'"):
        plot.speedup_chart(SimpleNamespace(speedup=None))


def test_comparison_chart_draws_both_runs_their_regimes_and_the_status():
    grid = dict(n_budgets=16, trials=5, sessions=2, intercept_s=0.05, per_token_s=0.005)
    base = simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid).trials
    new = simulate_sweep(seed=2, **grid).trials
    result = regimes.compare_runs(base, new, n_boot=200)
    spec = result_chart(result).to_dict()
    data = chart_data(spec)
    assert set(data.filter(pl.col("part") == "curve")["run"]) == {"base", "new"}
    assert data.filter(pl.col("part") == "regime")["run"].to_list() == ["base"]
    status = data.filter(pl.col("part") == "status")["label"].to_list()
    assert len(status) == 1 and status[0].startswith("vanished ×")
    assert status[0] in spec["description"]
    for unit in units(spec):
        assert "tooltip" in unit.get("encoding", {})
    assert colours(spec) <= OKABE_ITO
    assert next(p for p in spec["params"] if p["name"] == BRUSH)


def test_history_chart_draws_each_curve_or_says_why_not():
    effects = pl.DataFrame(
        {
            "model": ["gpt2", "opt"],
            "first_visit_s": [0.033, 0.001],
            "ci_low": [0.030, -0.002],
            "ci_high": [0.036, 0.004],
        }
    )
    spec = result_chart(SimpleNamespace(effects=effects, group_columns=("model",))).to_dict()
    rows = chart_data(spec)
    assert rows["item"].to_list() == ["gpt2", "opt"]
    assert rows["label"][0] == "0.033 s [0.03, 0.036]"
    assert any(u.get("encoding", {}).get("x", {}).get("datum") == 0 for u in units(spec))
    real = regimes.load("examples/data/cuda-h200-gpt2")
    from regimes.explain.history import history_effect

    untested = result_chart(history_effect(real)).to_dict()
    assert untested["description"].startswith("No curve could be tested")
    assert "first-visit cost" in chart_data(untested)["note"][0]
