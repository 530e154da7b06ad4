"""The four explanations share one result protocol and one set of arguments.

Data are the synthetic (seeded) sweeps of each explanation's own tests.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from test_alignment import sweep_and_report
from test_compare_backends import three_backends, truth_report
from test_confound import report_for, synthetic_sweep
from test_phases import instrumented_sweep, spike_report

import regimes
from regimes import RegimesInputError
from regimes._result import AnalysisResult


def _phases():
    df = instrumented_sweep("decode")
    return regimes.attribute_phases(df, spike_report("synthetic-decode"), n_boot=200)


def _memory():
    df = synthetic_sweep("smooth", seed=2)
    return regimes.memory_confound(df, report_for(df))


def _backends():
    df, truth = three_backends(seed=21, shared=False)
    return regimes.compare_backends(df, truth_report(truth, df))


def _alignment():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    return regimes.align_boundaries(df, report)


CASES = {
    "phases": (_phases, regimes.PhaseResult, regimes.PhaseAttribution),
    "memory": (_memory, regimes.MemoryResult, regimes.MemoryConfound),
    "backends": (_backends, regimes.BackendResult, regimes.BackendComparison),
    "alignment": (_alignment, regimes.AlignmentResult, regimes.BoundaryAlignment),
}


@pytest.mark.parametrize("name", CASES)
def test_results_follow_the_protocol(name):
    make, cls, old_name = CASES[name]
    result = make()
    assert old_name is cls and isinstance(result, cls) and isinstance(result, AnalysisResult)
    assert cls.__name__.endswith("Result")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.params = {}
    text = repr(result)
    assert text.startswith(f"{cls.__name__}(") and "\n" not in text and len(text) < 200
    assert result.status == "tested" and result.untested.height == 0
    assert result.summary().splitlines()[0] in result.summary()
    exported = json.loads(result.to_json())
    assert exported["result"] == cls.__name__ and exported["untested"] == []
    assert {"x", "y", "by"} <= set(result.params)
    assert "<table>" in result._repr_html_()


@pytest.mark.parametrize(
    "call",
    [
        lambda df, rep: regimes.attribute_phases(df, rep, alpha=0.1),
        lambda df, rep: regimes.memory_confound(df, rep, n_boot=500),
        lambda df, rep: regimes.compare_backends(df, rep, seed=3),
        lambda df, rep: regimes.align_boundaries(df, rep, n_boot=500),
    ],
)
def test_detection_options_next_to_a_report_are_refused(call):
    df = instrumented_sweep("decode").with_columns(
        (3 + 62 * (pl.int_range(pl.len()) % 2)).alias("prompt_tokens"),
        pl.lit(0, dtype=pl.Int64).alias("mem_driver_bytes"),
    )
    report = spike_report("synthetic-decode")
    with pytest.raises(RegimesInputError, match="apply only when no report is given"):
        call(df, report)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"x": "total_tokens"}, "x='total_tokens' but the report was computed with x='budget'"),
        ({"y": "decode_s"}, "y='decode_s' but the report"),
        ({"by": ["model"]}, r"by=\['model'\] but the report groups by"),
    ],
)
def test_axes_that_disagree_with_the_report_are_refused(kwargs, match):
    df = instrumented_sweep("decode")
    with pytest.raises(RegimesInputError, match=match):
        regimes.attribute_phases(df, spike_report("synthetic-decode"), n_boot=200, **kwargs)


def test_without_a_report_the_anomalies_are_detected_with_the_same_options():
    df = synthetic_sweep("smooth", seed=2)
    report = regimes.detect_regimes(df, n_boot=200, seed=1, level=0.9)
    given = regimes.memory_confound(df, report, level=0.9)
    detected = regimes.memory_confound(df, n_boot=200, seed=1, level=0.9)
    assert detected.effects.equals(given.effects)
    assert detected.params["level"] == 0.9 and detected.params["x"] == "budget"


def test_memory_level_is_the_interval_and_alpha_only_the_verdict():
    df = synthetic_sweep("smooth", seed=2)
    report = report_for(df)
    base = regimes.memory_confound(df, report).effects
    stricter = regimes.memory_confound(df, report, alpha=0.2).effects
    for column in ("ratio_low", "ratio_high", "adjusted_low", "memory_coef_high"):
        np.testing.assert_array_equal(stricter[column], base[column])
    narrower = regimes.memory_confound(df, report, level=0.8).effects
    assert (narrower["adjusted_low"] > base["adjusted_low"]).all()
    assert (narrower["adjusted_high"] < base["adjusted_high"]).all()
    with pytest.raises(RegimesInputError, match="level must lie in"):
        regimes.memory_confound(df, report, level=95)


def test_session_column_is_honoured_as_detection_does():
    """Sessions named by another column: its values decide the bootstrap's clusters."""
    df = instrumented_sweep("decode").with_columns(
        (pl.int_range(pl.len()) % 5).alias("worker"), pl.lit(0).alias("session")
    )
    report = spike_report("synthetic-decode")
    pooled = regimes.attribute_phases(df, report, n_boot=200).phases
    by_worker = regimes.attribute_phases(df, report, n_boot=200, session="worker").phases
    assert not by_worker["decode_low"].equals(pooled["decode_low"])
    with pytest.raises(RegimesInputError, match="session column 'nope'"):
        regimes.attribute_phases(df, report, n_boot=200, session="nope")


def test_memory_group_without_readings_is_untested_not_an_error():
    both = pl.concat([synthetic_sweep("tracked", seed=1), synthetic_sweep("smooth", seed=2)])
    holes = both.with_columns(
        pl.when(pl.col("model") == "synthetic-tracked")
        .then(None)
        .otherwise(pl.col("mem_driver_bytes"))
        .alias("mem_driver_bytes")
    )
    result = regimes.memory_confound(holes, report_for(holes))
    assert result.effects.get_column("model").to_list() == ["synthetic-smooth"]
    assert result.untested.select("model", "anomaly").rows() == [("synthetic-tracked", 1)]
    assert "null in every row of the group" in result.status
    assert "not testable here" in result.summary()


def test_comparison_without_the_interval_is_untested():
    df, truth = three_backends(seed=21, shared=False)
    first = truth.sort("model").row(0, named=True)
    gap = df.filter(
        ~(
            (pl.col("backend") == "cuda")
            & (pl.col("model") == first["model"])
            & pl.col("budget").is_between(first["start"], first["end"])
        )
    )
    result = regimes.compare_backends(gap, truth_report(truth, gap))
    assert result.untested.select("model", "other_backend", "reason").rows() == [
        (first["model"], "cuda", "no measured x inside the interval")
    ]


def test_boundary_at_one_prompt_only_is_untested():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    one = type(report)(**{**vars(report), "anomalies": report.anomalies.head(1)})
    result = regimes.align_boundaries(df, one)
    assert result.boundaries.height == 0
    assert sorted(result.untested["boundary"].to_list()) == ["onset", "recovery"]
    assert "prompt_tokens=3 only" in result.untested["reason"][0]
    assert result.status.startswith("2 group(s) not testable here")
