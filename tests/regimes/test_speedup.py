"""cache_speedup: speedup per budget with bootstrap CIs, and collapses below its trend.

The trial data are synthetic (seeded): either lognormal trials around the published
gpt2-medium MPS cache table (docs/data.md), or :func:`regimes.simulate_sweep` curves;
except the committed real CUDA run ``examples/data/cuda-h200-gpt2``.
"""

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError, RegimesWarning
from regimes._stats.between_cell import curve_taus
from regimes._stats.bootstrap import cell_summaries
from regimes._stats.curves import Curve
from regimes._stats.fixed_intervals import flank_support, scan_intervals, supported_intervals
from regimes._stats.resample import cell_replicates
from regimes.data.simulate import (
    PUBLISHED_GPT2_MEDIUM_CACHE,
    published_gpt2_medium_cache,
    simulate_sweep,
)
from regimes.speedup import cache_speedup

REAL_CUDA_RUN = Path(__file__).resolve().parents[2] / "examples" / "data" / "cuda-h200-gpt2"
BUDGETS = list(PUBLISHED_GPT2_MEDIUM_CACHE)
CACHE_ON = [on for on, _ in PUBLISHED_GPT2_MEDIUM_CACHE.values()]
CACHE_OFF = [off for _, off in PUBLISHED_GPT2_MEDIUM_CACHE.values()]


def published_cache_table(seed: int) -> pl.DataFrame:
    return published_gpt2_medium_cache(trials=5, cv=0.10, seed=seed)


def on_and_off(on: pl.DataFrame, off: pl.DataFrame) -> pl.DataFrame:
    """Pair two simulated sweeps as cache on and cache off of the same models."""
    return pl.concat([on, off.with_columns(pl.lit(False).alias("use_cache"))])


@pytest.fixture(scope="module")
def published_results():
    return [cache_speedup(published_cache_table(seed)) for seed in range(20)]


def test_published_speedup_at_512_is_near_1_9_and_apart(published_results):
    for result in published_results:
        table = result.speedup.sort("budget")
        assert table.get_column("budget").to_list() == BUDGETS
        at = table.filter(pl.col("budget") == 512).row(0, named=True)
        assert 1.5 < at["speedup"] < 2.5
        assert at["ci_low"] < at["speedup"] < at["ci_high"]
        others = table.filter(pl.col("budget") != 512)
        assert at["ci_high"] < others.get_column("ci_low").min()
        # the other speedups sit around their published values (4.9 ... 20.3)
        published = np.asarray(CACHE_OFF) / np.asarray(CACHE_ON)
        np.testing.assert_allclose(table.get_column("speedup"), published, rtol=0.25)


def test_published_collapse_is_512_and_only_512(published_results):
    found = [r.collapses for r in published_results]
    assert all(c.height <= 1 for c in found)
    hits = [c for c in found if c.height]
    assert all(c.row(0, named=True)["start"] == c.row(0, named=True)["end"] == 512 for c in hits)
    # With one process per budget the between-cell variance rests on the 5 other cells:
    # 3 degrees of freedom around their line, so a few draws cannot reach significance.
    # bench/speedup_calibration.py measures 38 of 40 seeds; these 20 give 19.
    assert len(hits) >= 18
    first = published_results[0]
    row = first.collapses.row(0, named=True)
    assert row["ratio_high"] < 0.3 and row["q_value"] < 0.05 and row["recovered"]
    assert "512..512" in first.summary()


def test_real_cuda_run_has_no_collapse_and_a_speedup_near_1():
    """gpt2 on an H200 is host-bound: the cache changes little, and nothing collapses."""
    df = regimes.load(REAL_CUDA_RUN)
    result = cache_speedup(df)
    assert result.collapses.height == 0, result.summary()
    table = result.speedup.sort("budget")
    assert table.height == df.get_column("budget").n_unique() == 32
    medians = (
        df.filter(~pl.col("warmup"))
        .group_by("budget", "use_cache")
        .agg(pl.col("latency_s").median())
        .pivot("use_cache", index="budget", values="latency_s")
        .sort("budget")
    )
    measured = (medians.get_column("false") / medians.get_column("true")).to_numpy()
    np.testing.assert_allclose(table.get_column("speedup"), measured, rtol=1e-12)
    low, high = table.get_column("ci_low").to_numpy(), table.get_column("ci_high").to_numpy()
    assert np.isfinite(low).all() and np.isfinite(high).all()
    assert (low <= measured).all() and (measured <= high).all()
    assert 0.6 < measured.min() and measured.max() < 1.6
    assert 0.85 < np.median(measured) < 1.2
    # With no collapse the trend is a smooth fit near 1, and the cells scatter around it
    # as 95% intervals should: about 1.6 of 32 are expected to miss it by chance.
    trend = table.get_column("trend").to_numpy()
    assert 0.85 < trend.min() and trend.max() < 1.2
    assert ((low > trend) | (high < trend)).sum() <= 3


@pytest.mark.parametrize(
    ("start", "end", "t", "reason"),
    [
        (3, 3, 6, None),  # the published collapse: 3 and 2 flank cells
        (2, 3, 6, None),
        (1, 31, 32, "flank of 1 cell"),  # the trend would come from one cell
        (1, 1, 6, "flank of 1 cell"),
        (2, 9, 12, "3 on each side"),  # most of the grid between flanks of 2
        (3, 8, 12, None),
        (0, 0, 6, "one cell at the edge"),
        (0, 1, 4, "flank of 2 cell"),
        (3, 5, 6, None),  # runs to the end, no longer than its flank
        (3, 7, 8, "extrapolated beyond its support"),
        (0, 5, 6, "whole grid"),
    ],
)
def test_flank_support_needs_cells_on_each_side_it_draws_from(start, end, t, reason):
    found = flank_support(start, end, t)
    assert found is None if reason is None else reason in found
    assert ((start, end) in supported_intervals(t)) == (reason is None)


def test_no_collapse_from_a_trend_on_one_flank_cell():
    """A speedup near 1 whose first budget sits high: no interval may be judged
    against a trend drawn from that one cell (synthetic trials)."""
    rng = np.random.default_rng(4)
    budgets = np.repeat(np.arange(1, 25) * 16, 5)
    on = 0.05 + 0.004 * budgets
    off = on * np.where(budgets == 16, 3.0, 1.0)
    df = pl.DataFrame(
        {
            "run_id": "synthetic-one-high-cell",
            "backend": "cuda",
            "model": "gpt2",
            "budget": np.concatenate([budgets, budgets]),
            "use_cache": np.repeat([True, False], budgets.size),
            "latency_s": np.concatenate([on, off]) * np.exp(rng.normal(0, 0.1, 2 * budgets.size)),
        }
    )
    result = cache_speedup(df)
    assert result.collapses.height == 0, result.summary()


def _curve(budgets, log_speedup, sampling_var=0.004):
    budgets = np.asarray(budgets, dtype=float)
    n = budgets.size
    return Curve(
        budgets,
        np.log(budgets),
        np.asarray(log_speedup, dtype=float),
        np.full(n, sampling_var),
        np.full(n, 8.0),
    )


def test_an_interior_interval_is_tested_in_the_coordinate_its_flanks_fit():
    """A log-speedup linear in the budget (as the published table's nearly is) bends in
    log budget: its flanks fit a line in x exactly, so the interval is tested there and
    the trend at it is that line's value."""
    budgets = np.arange(1, 7) * 128.0
    smooth = 1.5 + 0.0025 * budgets
    dipped = smooth.copy()
    dipped[3] -= np.log(3.0)
    in_log = _curve(budgets, dipped)
    in_x = in_log._replace(u=budgets)
    tau_log, tau_x = curve_taus([in_log, in_x])
    (plain,) = scan_intervals(in_log, [(3, 3)], tau_log, direction="down")
    (chosen,) = scan_intervals(
        in_log, [(3, 3)], tau_log, direction="down", alternatives=[(in_x, tau_x)]
    )
    assert chosen.trend[0][0] == pytest.approx(smooth[3], abs=1e-9)
    assert abs(plain.trend[0][0] - smooth[3]) > 0.05
    assert chosen.p_value[0] < plain.p_value[0]
    # an interval at the end of the grid keeps the first coordinate
    (edge_plain,) = scan_intervals(in_log, [(4, 5)], tau_log, direction="down")
    (edge_chosen,) = scan_intervals(
        in_log, [(4, 5)], tau_log, direction="down", alternatives=[(in_x, tau_x)]
    )
    assert edge_chosen.p_value[0] == edge_plain.p_value[0]
    np.testing.assert_array_equal(edge_chosen.trend[0], edge_plain.trend[0])


def test_process_factors_far_above_trial_noise_stay_calibrated():
    """A fresh process per budget whose factor (5-12 %) dwarfs the trial noise (1-4 %):
    the between-cell variance is invisible to a cell's replicates, and a short grid
    estimates it with few degrees of freedom; collapses stay rare (synthetic). Plugging
    in a between-cell variance estimated as 0 as if it were known reports 6 of 60."""
    noise = dict(
        n_budgets=6,
        budget_step=128,
        trials=(3, 6),
        cv=(0.01, 0.04),
        hiccup_rate=(0.0, 0.03),
        session_cv=(0.05, 0.12),
        sessions=1,
        session_design="per_cell",
    )
    on = simulate_sweep(60, per_token_s=0.01, seed=21, **noise).trials
    off = simulate_sweep(60, per_token_s=0.05, trend="quadratic", seed=22, **noise).trials
    both = on_and_off(on, off.with_columns(pl.col("session") + 10_000))
    # one call per model, as a user analyses one sweep: no pooling of the
    # multiple-testing correction across curves
    found = [cache_speedup(part).collapses.height for part in both.partition_by("model")]
    assert sum(found) <= 0.05 * len(found)


def test_smooth_speedups_report_no_collapse():
    on = simulate_sweep(20, n_budgets=12, budget_step=32, seed=11).trials
    off = simulate_sweep(
        20, n_budgets=12, budget_step=32, trend="quadratic", per_token_s=(0.02, 0.1), seed=12
    ).trials
    result = cache_speedup(on_and_off(on, off))
    assert result.collapses.height == 0
    assert result.speedup.height == 20 * 12
    assert result.speedup.select((pl.col("ratio") - 1).abs().max()).item() < 0.5


def test_cache_on_spike_is_a_collapse_with_its_boundaries():
    sweep = simulate_sweep(10, anomaly="spike", n_budgets=24, width=2, budget_step=32, seed=3)
    off = simulate_sweep(
        10, n_budgets=24, budget_step=32, trend="quadratic", per_token_s=(0.02, 0.1), seed=4
    ).trials
    result = cache_speedup(on_and_off(sweep.trials, off))
    matched = sweep.truth.join(result.collapses, on="model", suffix="_found")
    exact = matched.filter(
        ((pl.col("start_found") - pl.col("start")).abs() <= 32)
        & ((pl.col("end_found") - pl.col("end")).abs() <= 32)
    )
    assert exact.height >= 8
    assert (matched.get_column("ratio_found") < 1).all()


def test_scale_and_row_order_change_nothing():
    df = published_cache_table(0)
    base = cache_speedup(df)
    moved = cache_speedup(
        df.with_columns(pl.col("latency_s") * 1000).sample(fraction=1.0, shuffle=True, seed=1)
    )
    for column in ("speedup", "ci_low", "ci_high", "trend"):
        np.testing.assert_allclose(moved.speedup[column], base.speedup[column], rtol=1e-9)
    assert moved.collapses.select("start", "end", "kind").equals(
        base.collapses.select("start", "end", "kind")
    )
    for column in ("ratio", "ratio_low", "ratio_high", "p_value"):
        np.testing.assert_allclose(moved.collapses[column], base.collapses[column], rtol=1e-6)


def test_intervals_are_analytic_the_same_for_any_row_order():
    df = published_cache_table(0).with_columns((pl.col("session") % 3).alias("session"))
    a = cache_speedup(df).speedup
    b = cache_speedup(df.sample(fraction=1.0, shuffle=True, seed=1)).speedup
    assert a.equals(b)


def test_replicates_match_the_core_bootstrap_interval():
    trials = simulate_sweep(3, n_budgets=4, sessions=3, trials=4, seed=9).trials
    keys = ["model", "budget"]
    reps = cell_replicates(trials, keys, ["latency_s"], session="session", n_boot=4000, seed=2)
    ours = np.quantile(reps.replicates[:, :, 0], [0.025, 0.975], axis=1).T
    core = cell_summaries(trials, keys, "latency_s", session="session", n_boot=4000, seed=3)
    assert reps.cells.select(keys).equals(core.select(keys))
    np.testing.assert_allclose(ours, core.select("ci_low", "ci_high").to_numpy(), rtol=0.03)
    np.testing.assert_allclose(reps.median[:, 0], core.get_column("median"))


def test_cells_measured_one_way_are_left_out_with_a_warning():
    df = published_cache_table(0).filter(~((pl.col("budget") == 768) & ~pl.col("use_cache")))
    with pytest.warns(RegimesWarning, match="left out 1"):
        result = cache_speedup(df)
    assert 768 not in result.speedup.get_column("budget").to_list()


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        (pl.col("use_cache"), "no cache-off rows"),
        (~pl.col("use_cache"), "no cache-on rows"),
    ],
)
def test_one_cache_state_is_a_clear_error(keep, message):
    with pytest.raises(RegimesInputError, match=message):
        cache_speedup(published_cache_table(0).filter(keep))


def test_no_overlapping_budgets_is_a_clear_error():
    df = published_cache_table(0).with_columns(
        pl.when(pl.col("use_cache"))
        .then(pl.col("budget") + 1)
        .otherwise(pl.col("budget"))
        .alias("budget")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        with pytest.raises(RegimesInputError, match="measured both with and without"):
            cache_speedup(df)


def test_missing_or_null_cache_column_is_a_clear_error():
    df = published_cache_table(0)
    with pytest.raises(RegimesInputError, match="no 'use_cache' column"):
        cache_speedup(df.drop("use_cache"))
    with pytest.raises(RegimesInputError, match="null"):
        cache_speedup(
            df.with_columns(
                pl.when(pl.col("budget") == 128)
                .then(None)
                .otherwise(pl.col("use_cache"))
                .alias("use_cache")
            )
        )
    with pytest.raises(RegimesInputError, match="by= must not contain"):
        cache_speedup(df, by=["model", "use_cache"])


def test_chart_and_public_names(published_results):
    from regimes.viz.charts import speedup_chart

    spec = speedup_chart(published_results[0]).to_dict()
    assert spec["data"] or spec.get("datasets")
    assert regimes.cache_speedup is cache_speedup


def test_a_single_budget_is_not_testable_rather_than_none_found():
    one = published_cache_table(0).filter(pl.col("budget") == 512)
    result = cache_speedup(one)
    assert result.collapses.height == 0 and result.speedup.height == 1
    assert result.untested.height == 1
    assert "a trend needs at least 3" in result.untested["reason"][0]
    assert result.status.startswith("1 group(s) not testable here")
    text = result.summary()
    assert "not testable here" in text and "none at q < alpha" not in text


def test_speedup_result_follows_the_result_protocol():
    result = cache_speedup(published_cache_table(1))
    assert repr(result).startswith("SpeedupResult(collapses=") and "\n" not in repr(result)
    assert result.status == "tested" and result.untested.height == 0
    assert result.to_dict()["params"]["min_ratio"] == 1.25
    assert {"use_cache", "budget", "latency_s", "session"} <= set(result.trials.columns)
    with pytest.raises(AttributeError):
        result.params = {}  # frozen
