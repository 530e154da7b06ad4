"""Bad input to detect_regimes: a clear error, or a documented and warned handling."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError, RegimesWarning, detect_regimes
from regimes.data.simulate import published_gpt2_medium


@pytest.fixture
def trials() -> pl.DataFrame:
    return published_gpt2_medium(trials=4, seed=1).trials


def test_empty_frame(trials: pl.DataFrame) -> None:
    with pytest.raises(RegimesInputError, match="empty"):
        detect_regimes(trials.clear())


def test_missing_columns(trials: pl.DataFrame) -> None:
    with pytest.raises(RegimesInputError, match="latency_s"):
        detect_regimes(trials.drop("latency_s"))
    with pytest.raises(RegimesInputError, match="budget"):
        detect_regimes(trials.drop("budget"))
    with pytest.raises(RegimesInputError, match="prompt_tokens"):
        detect_regimes(trials.drop("prompt_tokens"), x="total_tokens")
    with pytest.raises(RegimesInputError, match="decode_s"):
        detect_regimes(trials, y="decode_s")
    with pytest.raises(RegimesInputError, match="by="):
        detect_regimes(trials, by=["no_such_column"])
    with pytest.raises(RegimesInputError, match="session"):
        detect_regimes(trials, session="no_such_column")


def test_non_numeric_latency(trials: pl.DataFrame) -> None:
    with pytest.raises(RegimesInputError, match="numeric"):
        detect_regimes(trials.with_columns(pl.col("latency_s").cast(pl.String)))


@pytest.mark.parametrize(
    "bad,word", [(np.nan, "NaN"), (np.inf, "infinite"), (-1.0, "negative"), (0.0, "zero")]
)
def test_bad_latency_values(trials: pl.DataFrame, bad: float, word: str) -> None:
    broken = trials.with_columns(
        pl.when(pl.int_range(pl.len()) == 3)
        .then(bad)
        .otherwise(pl.col("latency_s"))
        .alias("latency_s")
    )
    with pytest.raises(RegimesInputError, match=word):
        detect_regimes(broken)


def test_single_trial_per_cell_is_an_error(trials: pl.DataFrame) -> None:
    with pytest.raises(RegimesInputError, match="replication is required"):
        detect_regimes(trials.filter(pl.col("trial") == 0))


def test_some_single_trial_cells_are_dropped_with_a_warning(trials: pl.DataFrame) -> None:
    thinned = trials.filter((pl.col("budget") != 560) | (pl.col("trial") == 0))
    with pytest.warns(RegimesWarning, match="single trial"):
        rep = detect_regimes(thinned)
    assert 560 not in rep.curve["budget"].to_list() and rep.curve.height == 11


def test_a_single_budget_is_an_error(trials: pl.DataFrame) -> None:
    with pytest.raises(RegimesInputError, match="fewer than 4 distinct budget"):
        detect_regimes(trials.filter(pl.col("budget") == 512))


def test_a_short_group_is_kept_without_trend_and_warned(trials: pl.DataFrame) -> None:
    short = trials.filter(pl.col("budget") <= 496).with_columns(pl.lit("short").alias("model"))
    with pytest.warns(RegimesWarning, match="1 group"):
        rep = detect_regimes(pl.concat([trials, short]))
    assert rep.anomalies["model"].to_list() == ["gpt2-medium"]
    note = rep.groups.filter(pl.col("model") == "short")["note"][0]
    assert "at least 4" in note and "at least 4" in rep.summary()
    assert rep.untested["model"].to_list() == ["short"]
    assert "at least 4" in rep.untested["reason"][0] and "not testable here" in rep.status
    cells = rep.curve.filter(pl.col("model") == "short")
    assert cells.height == 2  # the cells stay, with their medians and intervals
    assert cells["baseline"].is_nan().all() and cells["median"].is_finite().all()


def test_duplicated_rows_are_dropped_with_a_warning(trials: pl.DataFrame) -> None:
    doubled = pl.concat([trials, trials.head(7)])
    with pytest.warns(RegimesWarning, match="dropped 7 exact duplicate"):
        rep = detect_regimes(doubled)
    assert rep.curve["n"].sum() == trials.height


def test_warmups_are_ignored(trials: pl.DataFrame) -> None:
    warm = trials.head(12).with_columns(
        pl.lit(True).alias("warmup"), (pl.col("latency_s") * 50).alias("latency_s")
    )
    rep = detect_regimes(pl.concat([trials, warm]))
    assert rep.curve["n"].sum() == trials.height


def test_bad_parameters(trials: pl.DataFrame) -> None:
    for kwargs, word in [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"min_ratio": 0.5}, "min_ratio"),
        ({"direction": "sideways"}, "direction"),
        ({"level": 1.0}, "level"),
        ({"n_boot": 0}, "n_boot"),
        ({"penalty": -1.0}, "penalty"),
    ]:
        with pytest.raises(RegimesInputError, match=word):
            detect_regimes(trials, **kwargs)


def test_not_a_frame() -> None:
    with pytest.raises(RegimesInputError, match="dataframe"):
        detect_regimes([1, 2, 3])


def test_rounded_latencies_without_trial_identity_are_all_kept() -> None:
    """A CSV in milliseconds has no trial, session or order column: equal latencies are
    different trials, and every row must count (none is a "duplicate")."""
    rng = np.random.default_rng(5)
    budgets = np.repeat([64, 128, 192, 256], 24)
    latency = np.round(0.05 + 0.0004 * budgets * rng.lognormal(0.0, 0.02, budgets.size), 3)
    table = pl.DataFrame(
        {
            "backend": "cpu",
            "model": "synthetic",
            "use_cache": True,
            "budget": budgets,
            "latency_s": latency,
        }
    )
    assert table.is_duplicated().sum() > 40  # rounding makes many rows identical
    with pytest.warns(RegimesWarning, match="each row is taken as one trial"):
        rep = detect_regimes(table)
    assert rep.curve["n"].to_list() == [24, 24, 24, 24]
    medians = table.group_by("budget").agg(pl.col("latency_s").median()).sort("budget")
    assert rep.curve["median"].to_list() == medians["latency_s"].to_list()


def test_rows_identical_in_every_identifying_column_are_duplicates(trials: pl.DataFrame) -> None:
    """With trial identity, only rows equal in it (and everywhere else) are dropped."""
    relabelled = trials.head(5).with_columns(pl.col("trial") + 100)
    with pytest.warns(RegimesWarning, match="dropped 5 exact duplicate"):
        rep = detect_regimes(pl.concat([trials, trials.head(5), relabelled]))
    assert rep.curve["n"].sum() == trials.height + 5


@pytest.mark.parametrize("seed", ["a", -1, True, 1.5])
def test_a_seed_that_is_not_a_whole_number_is_one_clear_error(trials, seed):
    with pytest.raises(RegimesInputError, match="seed"):
        detect_regimes(trials, seed=seed)


def test_too_few_replicates_for_the_level_is_one_clear_error(trials):
    with pytest.raises(RegimesInputError, match="n_boot"):
        detect_regimes(trials, n_boot=200, level=0.99)


def test_only_x_and_y_are_required(trials: pl.DataFrame, tmp_path) -> None:
    """A CSV of budget and latency (and optionally a model) is one curve per model."""
    whole = detect_regimes(trials, n_boot=200)
    for columns in (["budget", "latency_s"], ["model", "budget", "latency_s"]):
        path = tmp_path / "own.csv"
        trials.select(columns).write_csv(path)
        for by in (None, []):
            result = detect_regimes(regimes.load(path), by=by, n_boot=200)
            assert result.groups.height == 1
            assert result.anomalies.select("start", "end").rows() == (
                whole.anomalies.select("start", "end").rows()
            )


def test_a_missing_x_or_y_names_the_columns_and_the_closest() -> None:
    table = pl.DataFrame({"budget": [8, 8, 16, 16], "latency": [0.1, 0.1, 0.2, 0.2]})
    with pytest.raises(RegimesInputError) as caught:
        detect_regimes(table)
    message = str(caught.value)
    assert "lacks required column(s): 'latency_s'" in message
    assert "it has ['budget', 'latency']" in message
    assert "did you mean 'latency' for 'latency_s'?" in message
    with pytest.raises(RegimesInputError, match="did you mean 'budget' for 'budgets'"):
        detect_regimes(table, x="budgets", y="latency")
    with pytest.raises(RegimesInputError, match="by=.*did you mean 'budget'"):
        detect_regimes(table, y="latency", by=["budgt"])
