"""One check for n_boot and seed, used by every analysis: clear errors, before allocating."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.data import schema
from regimes.data.schema import check_n_boot, check_seed, n_boot_floor


@pytest.mark.parametrize("level, floor", [(0.5, 100), (0.9, 100), (0.95, 100), (0.99, 500)])
def test_floor_leaves_a_few_replicates_beyond_each_bound(level, floor):
    assert n_boot_floor(level) == floor
    assert floor * (1 - level) / 2 >= 2.5 - 1e-9
    check_n_boot(floor, level=level)
    with pytest.raises(RegimesInputError, match=f"use at least {floor} replicates"):
        check_n_boot(floor - 1, level=level)


@pytest.mark.parametrize("bad", [True, False, 2.0, "100", None, np.float64(200)])
def test_n_boot_must_be_a_whole_number(bad):
    with pytest.raises(RegimesInputError, match="n_boot must be a whole number"):
        check_n_boot(bad)


def test_n_boot_ceiling_comes_from_memory_and_is_checked_before_allocating(monkeypatch):
    monkeypatch.setattr(schema, "memory_limit", lambda: 2**30)
    check_n_boot(2000, cells=100, columns=3, draws=20)
    with pytest.raises(RegimesInputError, match=r"would need about .* GiB .* use n_boot <= \d+"):
        check_n_boot(10**7, cells=100, columns=3, draws=20)
    # 10**9 replicates of one cell would need tens of GiB anywhere: refused at once.
    monkeypatch.undo()
    with pytest.raises(RegimesInputError, match="would need about"):
        check_n_boot(10**9)


@pytest.mark.parametrize("bad", [-1, "a", True, 1.5, None])
def test_seed_must_be_a_whole_number_not_below_zero(bad):
    with pytest.raises(RegimesInputError, match="seed must be a whole number >= 0"):
        check_seed(bad)
    check_seed(np.int64(7))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_boot": 1}, "too few"),
        ({"n_boot": True}, "whole number"),
        ({"n_boot": 10**9}, "would need about"),
        ({"seed": "a"}, "seed must be"),
        ({"seed": -1}, "seed must be"),
        ({"n_boot": 200, "level": 0.995}, "use at least 1000"),
    ],
)
def test_attribute_phases_refuses_before_any_work(kwargs, match):
    df = regimes.simulate_sweep(1, anomaly="spike", seed=1).trials.with_columns(
        prefill_s=pl.col("latency_s") * 0.1, decode_s=pl.col("latency_s") * 0.9
    )
    with pytest.raises(RegimesInputError, match=match):
        regimes.attribute_phases(df, **kwargs)
