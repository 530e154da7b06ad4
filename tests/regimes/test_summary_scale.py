"""``RegimeResult.summary()`` grows linearly with the number of groups.

Labelling each row used to count the distinct values of every group column again, so a
summary of many groups cost quadratic time (100,000 groups: longer than detecting
them). Here the number of distinct-value counts must not grow with the rows labelled.
All data is synthetic (``simulate_sweep``).
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

import regimes
from regimes.data.simulate import simulate_sweep


@pytest.fixture(scope="module")
def result():
    frames = [
        simulate_sweep(1, n_budgets=8, trials=3, seed=s)
        .trials.drop("source")
        .with_columns(pl.lit(f"synthetic-{s}").alias("model"))
        for s in range(2)
    ]
    return dataclasses.replace(regimes.detect_regimes(pl.concat(frames), n_boot=100), source=None)


def with_untested(result, rows: int):
    untested = pl.DataFrame(
        {c: [f"synthetic-{i}" if c == "model" else result.groups[c][0] for i in range(rows)]
         for c in result.group_columns}
    ).with_columns(pl.lit("a single budget").alias("reason"))  # fmt: skip
    return dataclasses.replace(result, untested=untested)


def test_summary_counts_distinct_values_once_whatever_the_number_of_rows(result, monkeypatch):
    calls = []
    real = pl.Series.n_unique

    def counted(series):
        calls.append(series.name)
        return real(series)

    monkeypatch.setattr(pl.Series, "n_unique", counted)
    counts = {}
    for rows in (10, 2000):
        calls.clear()
        text = with_untested(result, rows).summary()
        assert text.count("Not testable here: model=synthetic-") == rows
        counts[rows] = len(calls)
    assert counts[2000] == counts[10] <= 2 * len(result.group_columns)
