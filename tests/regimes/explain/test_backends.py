"""compare_backends: an MPS-only spike is specific to MPS; a shared one is not.

All sweeps are synthetic (:func:`regimes.simulate_sweep`, seeded), relabelled as
backends. CPU and CUDA are slower or faster by a constant, which must not matter. One
test pairs synthetic MPS trials around the published means with the committed real
H200 run over the same grid.
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.explain.backends import compare_backends

GRID = dict(n_budgets=16, budget_step=32)


def as_backend(trials: pl.DataFrame, backend: str, offset: int, speed: float = 1.0) -> pl.DataFrame:
    return trials.with_columns(
        pl.lit(backend).alias("backend"),
        pl.lit(f"synthetic {backend} device").alias("device"),
        (pl.col("session") + offset).alias("session"),
        pl.col("latency_s") * speed,
    )


def three_backends(seed: int, shared: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """MPS with one spike per model; CPU and CUDA smooth, or carrying the same spike
    (the MPS trials rescaled, with fresh 5% noise) when ``shared``."""
    mps = regimes.simulate_sweep(3, anomaly="spike", ratio=(2.5, 4.0), seed=seed, **GRID)
    rng = np.random.default_rng(seed)
    parts = [as_backend(mps.trials, "mps", 0)]
    for k, (name, speed) in enumerate((("cpu", 3.0), ("cuda", 0.2)), start=1):
        if shared:
            noisy = mps.trials.with_columns(
                pl.col("latency_s") * np.exp(rng.normal(0, 0.05, mps.trials.height))
            )
        else:
            noisy = regimes.simulate_sweep(3, seed=seed + k, **GRID).trials
        parts.append(as_backend(noisy, name, 1000 * k, speed))
    return pl.concat(parts), mps.truth


def truth_report(truth: pl.DataFrame, trials: pl.DataFrame) -> SimpleNamespace:
    """A report holding the simulated MPS spikes themselves (ground truth)."""
    keys = (
        trials.filter(pl.col("backend") == "mps")
        .select("backend", "device", "model", "dtype", "use_cache", "prompt_tokens")
        .unique()
    )
    anomalies = keys.join(truth.select("model", "start", "end", "ratio"), on="model")
    return SimpleNamespace(
        anomalies=anomalies,
        x="budget",
        y="latency_s",
        group_columns=["backend", "device", "model", "dtype", "use_cache", "prompt_tokens"],
    )


@pytest.fixture(scope="module")
def mps_only():
    df, truth = three_backends(seed=21, shared=False)
    return df, truth, regimes.detect_regimes(df, n_boot=200)


def test_mps_spikes_are_specific_to_mps(mps_only):
    df, truth, report = mps_only
    assert set(report.anomalies.get_column("backend")) == {"mps"}
    assert report.anomalies.height >= 2
    result = compare_backends(df, report)
    assert result.comparisons.height == 2 * report.anomalies.height
    assert set(result.comparisons.get_column("other_backend")) == {"cpu", "cuda"}
    assert result.verdicts.get_column("specific").all()
    assert (result.comparisons.get_column("ratio_of_ratios_low") > 1.5).all()
    assert "specific to its backend" in result.summary()


def test_smooth_backends_stay_near_their_trend_in_the_interval(mps_only):
    df, truth, _ = mps_only
    result = compare_backends(df, truth_report(truth, df))
    other = result.comparisons
    assert other.select(((pl.col("other_low") < 1.15) & (pl.col("other_high") > 0.87)).all()).item()
    np.testing.assert_allclose(
        other.sort("anomaly").get_column("ratio").to_numpy()[::2],
        truth.sort("model").get_column("ratio").to_numpy(),
        rtol=0.2,
    )


def test_spike_on_every_backend_is_not_specific():
    df, truth = three_backends(seed=22, shared=True)
    result = compare_backends(df, truth_report(truth, df))
    assert not result.verdicts.get_column("specific").any()
    assert (result.comparisons.get_column("other_p_value") < 1e-3).all()
    assert (
        result.comparisons.select(
            ((pl.col("ratio_of_ratios_low") < 1) & (pl.col("ratio_of_ratios_high") > 1)).mean()
        ).item()
        >= 0.8
    )


def test_constant_speed_of_a_backend_changes_nothing(mps_only):
    df, truth, _ = mps_only
    report = truth_report(truth, df)
    base = compare_backends(df, report).comparisons
    faster = df.with_columns(
        pl.when(pl.col("backend") == "cpu")
        .then(pl.col("latency_s") / 7)
        .otherwise(pl.col("latency_s"))
        .alias("latency_s")
    )
    moved = compare_backends(faster, report).comparisons
    for column in ("ratio", "other_ratio", "ratio_of_ratios", "p_value"):
        np.testing.assert_allclose(moved[column], base[column], rtol=1e-6)


def test_other_backend_without_the_interval_is_noted(mps_only):
    df, truth, _ = mps_only
    report = truth_report(truth, df)
    first = truth.sort("model").row(0, named=True)
    gap = df.filter(
        ~(
            (pl.col("backend") == "cuda")
            & (pl.col("model") == first["model"])
            & pl.col("budget").is_between(first["start"], first["end"])
        )
    )
    result = compare_backends(gap, report)
    row = result.comparisons.filter(
        (pl.col("model") == first["model"]) & (pl.col("other_backend") == "cuda")
    ).row(0, named=True)
    assert row["note"] == "no measured x inside the interval"
    assert row["p_value"] is None and row["other_cells"] == 0
    verdict = result.verdicts.filter(pl.col("model") == first["model"]).row(0, named=True)
    assert verdict["n_compared"] == 1 and not verdict["specific"]


def test_one_backend_is_a_clear_error(mps_only):
    df, truth, _ = mps_only
    with pytest.raises(RegimesInputError, match="at least two backends"):
        compare_backends(df.filter(pl.col("backend") == "mps"), truth_report(truth, df))


def test_report_without_backend_groups_is_a_clear_error(mps_only):
    df, truth, _ = mps_only
    pooled = SimpleNamespace(
        anomalies=truth.select("model", "start", "end"), x="budget", group_columns=["model"]
    )
    with pytest.raises(RegimesInputError, match="not grouped by 'backend'"):
        compare_backends(df, pooled)


def test_public_name():
    assert regimes.compare_backends is compare_backends


def test_published_mps_spike_is_specific_against_the_real_cuda_run():
    """Synthetic MPS trials around the published gpt2-medium means (labelled so in their
    device name) next to the real H200 run of the same model over the same grid."""
    from regimes.data.simulate import published_gpt2_medium

    mps = published_gpt2_medium(seed=0).trials
    cuda = regimes.load(
        Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-gpt2-medium-window"
    )
    df = pl.concat([mps, cuda], how="diagonal_relaxed")
    report = regimes.detect_regimes(df, n_boot=500)
    assert report.anomalies.select("backend", "start", "end").rows() == [("mps", 512, 624)]
    row = compare_backends(df, report).comparisons.row(0, named=True)
    assert row["other_backend"] == "cuda" and row["specific"]
    assert row["other_low"] < 1.0 < row["other_high"]
    assert row["ratio_of_ratios"] > 5


def test_result_follows_the_protocol(mps_only, result_protocol):
    df, truth, _ = mps_only
    result = compare_backends(df, truth_report(truth, df))
    result_protocol(result, regimes.BackendResult, "BackendComparison")
    with pytest.raises(RegimesInputError, match="apply only when no report is given"):
        compare_backends(df, truth_report(truth, df), seed=3)


def test_comparison_without_the_interval_is_untested(mps_only):
    df, truth, _ = mps_only
    first = truth.sort("model").row(0, named=True)
    gap = df.filter(
        ~(
            (pl.col("backend") == "cuda")
            & (pl.col("model") == first["model"])
            & pl.col("budget").is_between(first["start"], first["end"])
        )
    )
    result = compare_backends(gap, truth_report(truth, gap))
    assert result.untested.select("model", "other_backend", "reason").rows() == [
        (first["model"], "cuda", "no measured x inside the interval")
    ]
    assert "not testable here" in result.summary()
