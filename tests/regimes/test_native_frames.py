"""Any dataframe in (narwhals), the result's tables out in the caller's library."""

from __future__ import annotations

import json

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

import regimes
from regimes.data.simulate import published_gpt2_medium, published_gpt2_medium_cache

LIBRARIES = {
    "pandas": (lambda frame: frame.to_pandas(), pd.DataFrame, pl.from_pandas),
    "pyarrow": (lambda frame: frame.to_arrow(), pa.Table, pl.from_arrow),
}


@pytest.fixture(scope="module")
def trials() -> pl.DataFrame:
    return published_gpt2_medium(trials=4, seed=1).trials


@pytest.fixture(scope="module")
def polars_result(trials):
    return regimes.detect_regimes(trials, n_boot=200)


@pytest.mark.parametrize("library", LIBRARIES)
def test_tables_come_back_in_the_library_they_came_in(trials, polars_result, library):
    convert, kind, back = LIBRARIES[library]
    result = regimes.detect_regimes(convert(trials), n_boot=200)
    for name in ("curve", "anomalies", "change_points", "groups", "untested", "trials"):
        table = getattr(result, name)
        assert isinstance(table, kind), name
        assert_frame_equal(back(table), getattr(polars_result, name), check_dtypes=False)
    assert all(isinstance(t, kind) for t in result.tables.values())
    assert result.curve is result.curve  # converted once
    # the text, the JSON and the chart read the same result whatever came in
    assert result.summary() == polars_result.summary()
    assert json.loads(result.to_json()) == json.loads(polars_result.to_json())
    assert result.chart() is not None


def test_polars_stays_polars_and_to_pandas_to_polars_convert_either_way(trials, polars_result):
    assert isinstance(polars_result.curve, pl.DataFrame)
    as_pandas = polars_result.to_pandas()
    assert isinstance(as_pandas.curve, pd.DataFrame) and isinstance(
        as_pandas.tables["curve"], pd.DataFrame
    )
    assert isinstance(as_pandas.to_polars().curve, pl.DataFrame)
    from_pandas = regimes.detect_regimes(trials.to_pandas(), n_boot=200)
    assert_frame_equal(from_pandas.to_polars().anomalies, polars_result.anomalies)


def test_the_speedup_answers_in_pandas_to_pandas_input():
    table = published_gpt2_medium_cache(trials=5, cv=0.10, seed=0)
    result = regimes.cache_speedup(table.to_pandas())
    assert isinstance(result.speedup, pd.DataFrame) and isinstance(result.collapses, pd.DataFrame)
    expected = regimes.cache_speedup(table)
    assert_frame_equal(pl.from_pandas(result.speedup), expected.speedup, check_dtypes=False)


def test_a_lazy_frame_or_an_arrow_table_is_read_and_anything_else_is_named(trials):
    assert regimes.validate_trials(trials.lazy()).height == trials.height
    assert regimes.validate_trials(trials.to_arrow()).height == trials.height
    with pytest.raises(regimes.RegimesInputError, match="expected a dataframe .* got list"):
        regimes.detect_regimes([1, 2, 3])
