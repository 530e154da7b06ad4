"""attribute_phases: the excess over trend split into prefill and decode.

The instrumented sweeps here are synthetic (seeded): prefill a constant 30 ms, decode
4 ms per token, and a 4x decode spike or a 6x prefill spike over budgets 448..576.
"""

import warnings
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.explain.phases import attribute_phases

BUDGETS = np.arange(64, 1025, 64)
SPIKE = (448, 576)
GROUPS = ["backend", "model", "use_cache"]


def instrumented_sweep(where: str, seed: int = 0, trials: int = 5) -> pl.DataFrame:
    """Synthetic instrumented trials with a spike in the ``where`` phase."""
    rng = np.random.default_rng(seed)
    budget = np.repeat(BUDGETS, trials)
    inside = (budget >= SPIKE[0]) & (budget <= SPIKE[1])
    prefill = (
        0.03
        * np.exp(rng.normal(0, 0.05, budget.size))
        * np.where(inside & (where == "prefill"), 6.0, 1.0)
    )
    decode = (
        0.004
        * budget
        * np.exp(rng.normal(0, 0.05, budget.size))
        * np.where(inside & (where == "decode"), 4.0, 1.0)
    )
    return pl.DataFrame(
        {
            "backend": "mps",
            "model": f"synthetic-{where}",
            "use_cache": True,
            "budget": budget,
            "session": 0,
            "prefill_s": prefill,
            "decode_s": decode,
            "latency_s": prefill + decode + 0.002,
            "instrumented": True,
        }
    )


def spike_report(*models: str) -> SimpleNamespace:
    """A report holding the known spike of each model (ground truth)."""
    anomalies = pl.DataFrame(
        {
            "backend": "mps",
            "model": list(models),
            "use_cache": True,
            "start": SPIKE[0],
            "end": SPIKE[1],
        }
    )
    return SimpleNamespace(anomalies=anomalies, x="budget", y="latency_s", group_columns=GROUPS)


@pytest.fixture(scope="module")
def decode_case():
    df = instrumented_sweep("decode")
    report = regimes.detect_regimes(df, n_boot=200)
    return df, report, attribute_phases(df, report, n_boot=1000)


def test_decode_spike_is_carried_by_decode(decode_case):
    _, report, result = decode_case
    assert report.anomalies.select("start", "end").rows() == [SPIKE]
    row = result.phases.row(0, named=True)
    assert 0.9 < row["decode_share_low"] <= row["decode_share"] <= row["decode_share_high"] < 1.1
    assert row["decode_p_value"] < 0.01 and row["decode_low"] > 0
    assert row["prefill_low"] < 0 < row["prefill_high"]
    assert row["decode_ratio"] == pytest.approx(4.0, rel=0.15)
    assert row["prefill_ratio"] == pytest.approx(1.0, abs=0.1)
    # the phases account for the latency excess up to the constant 2 ms overhead
    assert abs(row["unattributed_s"]) < 0.01 * row["latency_excess_s"]
    assert row["n_cells"] == 3 and row["n_uninstrumented"] == 0
    assert "decode carries" in result.summary()


def test_prefill_spike_is_carried_by_prefill():
    df = instrumented_sweep("prefill", seed=1)
    row = attribute_phases(df, spike_report("synthetic-prefill"), n_boot=1000).phases.row(
        0, named=True
    )
    assert row["prefill_ratio"] == pytest.approx(6.0, rel=0.15)
    assert row["prefill_low"] > 0.1 and row["prefill_p_value"] < 0.01
    assert row["decode_low"] < 0 < row["decode_high"]
    assert row["decode_share_low"] < 0.5


def test_share_of_no_phase_excess_is_null_with_the_reason():
    """The latency spikes outside both phases (say a per-step sync): the phases' total
    excess is about 0, and a share of it would be noise divided by noise."""
    df = instrumented_sweep("neither", seed=2)
    inside = pl.col("budget").is_between(*SPIKE)
    df = df.with_columns(
        pl.when(inside)
        .then(pl.col("latency_s") * 3)
        .otherwise(pl.col("latency_s"))
        .alias("latency_s")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = attribute_phases(df, spike_report("synthetic-neither"), n_boot=1000)
    row = result.phases.row(0, named=True)
    assert row["latency_low"] > 0
    assert row["phases_low"] < 0 < row["phases_high"]
    assert row["decode_share"] is None and row["decode_share_low"] is None
    assert "not significantly away from 0" in row["decode_share_note"]
    assert row["unattributed_s"] > 0.5 * row["latency_excess_s"]
    assert "decode share not reported" in result.summary()
    assert result.phases.schema["decode_share"] == pl.Float64


def test_reported_share_has_no_note(decode_case):
    row = decode_case[2].phases.row(0, named=True)
    assert row["decode_share_note"] is None and row["phases_low"] > 0
    assert row["phases_excess_s"] == pytest.approx(row["prefill_excess_s"] + row["decode_excess_s"])


def test_scaling_all_times_scales_the_excess_not_the_share(decode_case):
    df, report, result = decode_case
    scaled = df.with_columns([pl.col(c) * 10 for c in ("prefill_s", "decode_s", "latency_s")])
    moved = attribute_phases(scaled, report, n_boot=1000).phases
    for column in ("latency_excess_s", "decode_excess_s", "decode_low", "prefill_high"):
        np.testing.assert_allclose(moved[column], 10 * result.phases[column], rtol=1e-9)
    for column in ("decode_share", "decode_share_low", "decode_ratio", "decode_p_value"):
        np.testing.assert_allclose(moved[column], result.phases[column], rtol=1e-9)


def test_uninstrumented_rows_are_counted(decode_case):
    df, report, _ = decode_case
    holes = df.with_columns(
        pl.when(pl.int_range(pl.len()) % 5 == 0)
        .then(None)
        .otherwise(pl.col("decode_s"))
        .alias("decode_s")
    )
    row = attribute_phases(holes, report, n_boot=300).phases.row(0, named=True)
    assert row["n_uninstrumented"] == holes.get_column("decode_s").null_count() > 0
    assert row["decode_share_low"] > 0.9


def test_table_without_phases_is_a_clear_error(decode_case):
    df, report, _ = decode_case
    with pytest.raises(RegimesInputError, match="no phase split"):
        attribute_phases(df.drop("prefill_s", "decode_s"), report)
    blank = df.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("prefill_s"),
        pl.lit(None, dtype=pl.Float64).alias("decode_s"),
        pl.lit(False).alias("instrumented"),
    )
    with pytest.raises(RegimesInputError, match="instrumented=false"):
        attribute_phases(blank, report)


def test_uninstrumented_group_with_an_anomaly_is_untested_not_an_error():
    both = pl.concat(
        [
            instrumented_sweep("decode"),
            instrumented_sweep("prefill").with_columns(
                pl.lit(None, dtype=pl.Float64).alias("prefill_s"),
                pl.lit(False).alias("instrumented"),
            ),
        ]
    )
    result = attribute_phases(
        both, spike_report("synthetic-decode", "synthetic-prefill"), n_boot=200
    )
    assert result.phases.get_column("model").to_list() == ["synthetic-decode"]
    untested = result.untested.row(0, named=True)
    assert result.untested.height == 1 and untested["model"] == "synthetic-prefill"
    assert "not instrumented" in untested["reason"]
    assert "not testable" in result.status
    assert "model=synthetic-prefill" in result.summary()


def test_same_seed_same_answer(decode_case):
    df, report, _ = decode_case
    a = attribute_phases(df, report, n_boot=300, seed=4).phases
    assert a.equals(attribute_phases(df, report, n_boot=300, seed=4).phases)


def test_public_name():
    assert regimes.attribute_phases is attribute_phases


def test_result_follows_the_protocol(result_protocol):
    df = instrumented_sweep("decode")
    result = attribute_phases(df, spike_report("synthetic-decode"), n_boot=200)
    result_protocol(result, regimes.PhaseResult, "PhaseAttribution")
    assert result.params["n_boot"] == 200 and result.params["level"] == 0.95


def test_alpha_next_to_a_report_is_refused():
    """alpha steers only the detection, which a given report makes moot."""
    with pytest.raises(RegimesInputError, match="apply only when no report is given"):
        attribute_phases(instrumented_sweep("decode"), spike_report("synthetic-decode"), alpha=0.1)


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
        attribute_phases(df, spike_report("synthetic-decode"), n_boot=200, **kwargs)


def test_session_column_is_honoured_as_detection_does():
    """Sessions named by another column: its values decide the bootstrap's clusters."""
    df = instrumented_sweep("decode").with_columns(
        (pl.int_range(pl.len()) % 5).alias("worker"), pl.lit(0).alias("session")
    )
    report = spike_report("synthetic-decode")
    pooled = attribute_phases(df, report, n_boot=200).phases
    by_worker = attribute_phases(df, report, n_boot=200, session="worker").phases
    assert not by_worker["decode_low"].equals(pooled["decode_low"])
    with pytest.raises(RegimesInputError, match="session column 'nope'"):
        attribute_phases(df, report, n_boot=200, session="nope")
