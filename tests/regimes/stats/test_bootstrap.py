"""Cell summaries: exact order-statistic intervals and the hierarchical bootstrap."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from regimes._stats.bootstrap import bootstrap_median_ci, cell_summaries, median_ci_indices


def _resampled_interval(values: np.ndarray, rng: np.random.Generator, n_boot: int = 200_000):
    draws = values[rng.integers(0, values.size, (n_boot, values.size))]
    return np.quantile(np.median(draws, axis=1), [0.025, 0.975], method="inverted_cdf")


@pytest.mark.parametrize("n", [3, 5, 7, 11])
def test_odd_n_interval_equals_explicit_resampling(n: int) -> None:
    rng = np.random.default_rng(n)
    values = np.sort(rng.lognormal(size=n))
    lo_l, lo_u, hi_l, hi_u = median_ci_indices(n, 0.95)
    assert lo_l == lo_u and hi_l == hi_u  # one middle order statistic for odd n
    expected = _resampled_interval(values, rng)
    assert values[lo_l] == pytest.approx(expected[0])
    assert values[hi_l] == pytest.approx(expected[1])


@pytest.mark.parametrize("n", [4, 6, 10, 20])
def test_even_n_interval_contains_explicit_resampling(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    values = np.sort(rng.lognormal(size=n))
    lo_l, lo_u, hi_l, hi_u = median_ci_indices(n, 0.95)
    low, high = (values[lo_l] + values[lo_u]) / 2, (values[hi_l] + values[hi_u]) / 2
    expected = _resampled_interval(values, rng)
    assert low <= expected[0] + 1e-12
    assert high >= expected[1] - 1e-12
    # and not much wider: within one order-statistic spacing on each side
    assert low >= values[max(lo_l - 1, 0)]
    assert high <= values[min(hi_u + 1, n - 1)]


def test_cell_summaries_single_session_matches_order_statistics() -> None:
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"cell": np.repeat(np.arange(50), 7), "y": rng.lognormal(size=350)})
    out = cell_summaries(frame, ["cell"], "y")
    assert out.columns == ["cell", "n", "n_sessions", "median", "ci_low", "ci_high"]
    assert out.height == 50 and out["n"].unique().to_list() == [7]
    lo, _, hi, _ = median_ci_indices(7, 0.95)
    first = np.sort(frame.filter(pl.col("cell") == 0)["y"].to_numpy())
    row = out.row(0, named=True)
    assert row["median"] == pytest.approx(np.median(first))
    assert (row["ci_low"], row["ci_high"]) == (first[lo], first[hi])
    assert (out["ci_low"] <= out["median"]).all() and (out["median"] <= out["ci_high"]).all()


def _three_session_frame(seed: int) -> pl.DataFrame:
    """20 cells x 3 sessions x 15 trials; sessions sit at +0 %, +5 %, +10 %, noise 1 %."""
    rng = np.random.default_rng(seed)
    cells, sessions = np.repeat(np.arange(20), 45), np.tile(np.repeat([0, 1, 2], 15), 20)
    return pl.DataFrame(
        {"cell": cells, "s": sessions, "y": np.exp(rng.normal(0.05 * sessions, 0.01))}
    )


def test_hierarchical_interval_is_seeded_and_reflects_sessions() -> None:
    frame = _three_session_frame(1)
    a = cell_summaries(frame, ["cell"], "y", session="s", n_boot=400, seed=3)
    b = cell_summaries(
        frame.sample(fraction=1.0, shuffle=True, seed=9),
        ["cell"],
        "y",
        session="s",
        n_boot=400,
        seed=3,
    )
    assert a.equals(b)
    assert (a["n_sessions"] == 3).all() and (a["n"] == 45).all()
    # resampling sessions lets the median wander between the session levels; treating
    # the 45 trials as independent gives an interval inside the middle session
    naive = cell_summaries(frame, ["cell"], "y")
    log_width = np.log(a["ci_high"] / a["ci_low"]).median()
    naive_width = np.log(naive["ci_high"] / naive["ci_low"]).median()
    assert log_width > 0.05
    assert log_width > 3 * naive_width


def test_hierarchical_handles_unbalanced_sessions() -> None:
    rng = np.random.default_rng(2)
    values = np.full((3, 2, 4), np.nan)
    values[:, 0, :4] = rng.normal(size=(3, 4))
    values[:, 1, :2] = rng.normal(size=(3, 2))
    bounds = bootstrap_median_ci(values, 400, np.random.default_rng(0), 0.9)
    assert bounds.shape == (3, 2) and np.isfinite(bounds).all()
    assert (bounds[:, 0] <= bounds[:, 1]).all()


def test_bad_level_is_rejected() -> None:
    frame = pl.DataFrame({"cell": [0, 0], "y": [1.0, 2.0]})
    with pytest.raises(ValueError, match="level"):
        cell_summaries(frame, ["cell"], "y", level=1.5)
