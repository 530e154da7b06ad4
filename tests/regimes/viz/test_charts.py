"""Charts of regimes.plot, built from the real detection on synthetic sweeps.

All data is synthetic (``regimes.simulate``). Charts are checked through their
Vega-Lite specs (the data each layer draws) and through vl-convert's offline
rendering; the browser test covers rendering in Chromium.
"""

from __future__ import annotations

import io
import json
import math
from types import SimpleNamespace

import polars as pl
import pytest

from regimes import plot
from regimes.data.schema import RegimesInputError
from regimes.data.simulate import simulate_sweep
from regimes.detect import detect_regimes


@pytest.fixture(scope="module")
def trials(synthetic_run) -> pl.DataFrame:
    return synthetic_run.trials()


@pytest.fixture(scope="module")
def report(trials):
    return detect_regimes(trials, n_boot=200)


def chart_data(spec: dict, layer: int | None = None) -> pl.DataFrame:
    """The inline CSV data of a chart spec (or of one of its layers), as a frame."""
    data = (spec if layer is None else spec["layer"][layer]).get("data", {})
    if "name" in data:
        values = spec["datasets"][data["name"]]
    else:
        values = data["values"]
    assert isinstance(values, str), "charts carry their data as inline CSV"
    return pl.read_csv(io.StringIO(values), infer_schema_length=None)


def test_group_labels_name_what_varies():
    keys = pl.DataFrame(
        {"backend": ["mps", "mps", "cpu"], "model": ["gpt2"] * 3, "use_cache": [True, False, True]}
    )
    labels, caption = plot.group_labels(keys, ["backend", "model", "use_cache"])
    assert labels["group"].to_list() == ["cpu · cache on", "mps · cache off", "mps · cache on"]
    assert caption == "gpt2"
    single, caption = plot.group_labels(keys.head(1), ["backend", "model", "use_cache"])
    assert single["group"].to_list() == ["mps · gpt2 · cache on"] and caption == ""


def test_latency_chart_draws_every_part(report, trials):
    with_warmups = pl.concat([trials, trials.head(7).with_columns(pl.lit(True).alias("warmup"))])
    spec = plot.latency_chart(report, with_warmups).to_dict()
    data = chart_data(spec)
    counts = dict(data.group_by("part").len().iter_rows())
    assert counts["curve"] == report.curve.height
    assert counts["trial"] == trials.height  # warm-ups are not drawn
    assert counts["interval"] == report.anomalies.height
    significant = report.change_points.filter(pl.col("significant")).height
    assert counts.get("change", 0) == significant
    assert spec["facet"]["sort"] == sorted(data["group"].unique().to_list())
    assert len(spec["facet"]["sort"]) == report.groups.height
    assert spec["resolve"]["scale"]["y"] == "independent"


def test_anomaly_is_shaded_over_its_budgets_and_labelled(report, synthetic_run, tmp_path):
    truth = synthetic_run.truth
    chart = plot.latency_chart(report)
    interval = chart_data(chart.to_dict()).filter(pl.col("part") == "interval").row(0, named=True)
    # The shading runs half a grid step (16 budgets) beyond each end of the interval.
    assert (interval["x_lo"], interval["x_hi"]) == (truth["start"] - 8, truth["end"] + 8)
    assert interval["group"] == "synthetic-spiky · cache on"
    anomaly = report.anomalies.row(0, named=True)
    label = f"×{anomaly['ratio']:.3g} [{anomaly['ratio_low']:.3g}, {anomaly['ratio_high']:.3g}]"
    assert interval["label"] == label
    assert abs(math.log(anomaly["ratio"] / synthetic_run.spike_ratio)) < 0.1
    svg = plot.save(chart, tmp_path / "latency.svg").read_text()
    assert label in svg  # drawn, not only in the data


def test_latency_chart_options(report):
    log_spec = plot.latency_chart(report, log_y=True).to_dict()
    scales = [
        layer["encoding"]["y"].get("scale", {})
        for layer in log_spec["spec"]["layer"]
        if "y" in layer.get("encoding", {}) and "field" in layer["encoding"]["y"]
    ]
    assert scales and all(s.get("type") == "log" for s in scales)
    one = plot.latency_chart(report, groups=["synthetic-smooth · cache on"]).to_dict()
    assert one["facet"]["sort"] == ["synthetic-smooth · cache on"]
    assert set(chart_data(one)["group"].unique()) == {"synthetic-smooth · cache on"}
    with pytest.raises(RegimesInputError, match="unknown group"):
        plot.latency_chart(report, groups=["no such group"])


def _y_scale_types(spec: dict) -> set:
    return {
        layer["encoding"]["y"].get("scale", {}).get("type", "linear")
        for layer in spec["spec"]["layer"]
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


def test_axes_are_read_from_the_report(report):
    assert plot.report_axes(report) == (report.x, report.y, report.group_columns)
    bare = SimpleNamespace(curve=report.curve.drop("device"))
    x, y, groups = plot.report_axes(bare)
    assert (x, y) == ("budget", "latency_s") and "device" not in groups
    with pytest.raises(RegimesInputError, match="polars DataFrame attribute 'curve'"):
        plot.report_axes(SimpleNamespace(curve=None))


def test_phase_chart_stacks_decode_on_prefill(trials):
    data = chart_data(plot.phase_chart(trials).to_dict())
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
    low, high = scale["domain"]
    assert math.isclose(low * high, 1.0)


def test_heatmap_stays_small_at_50_groups_by_500_budgets():
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


def test_speedup_chart_shades_collapses(trials):
    from regimes.speedup import cache_speedup

    result = cache_speedup(trials, n_boot=200)
    spec = plot.speedup_chart(result).to_dict()
    data = chart_data(spec)
    counts = dict(data.group_by("part").len().iter_rows())
    assert counts["curve"] == result.speedup.height
    assert counts.get("interval", 0) == result.collapses.height
    assert spec["facet"]["sort"] == ["synthetic-smooth", "synthetic-spiky"]
    assert any(
        layer.get("encoding", {}).get("y", {}).get("datum") == 1 for layer in spec["spec"]["layer"]
    )  # the no-speedup line
    curve = data.filter(pl.col("part") == "curve")
    assert (curve["ci_low"] <= curve["speedup"]).all()
    assert (curve["speedup"] <= curve["ci_high"]).all()
    with pytest.raises(RegimesInputError, match="attribute 'speedup'"):
        plot.speedup_chart(SimpleNamespace(speedup=None))
