"""Trial tables as users write them: flags as 0/1 or text, pandas quirks, numpy scalars.

All data is synthetic (``simulate_sweep``). A flag column (``warmup``, ``use_cache``)
written as ``0``/``1`` or ``"true"``/``"false"`` means the booleans it says; anything
else is one :class:`~regimes.RegimesInputError` naming the column, never a polars
traceback and never warm-ups analysed as measured trials.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.cli import main
from regimes.data.simulate import simulate_sweep


def trials(**kw) -> pl.DataFrame:
    frame = simulate_sweep(1, n_budgets=8, trials=3, seed=4, **kw).trials.drop("source")
    warm = frame.filter(pl.col("trial") == 0).with_columns(
        pl.lit(True).alias("warmup"), pl.col("latency_s") * 50
    )
    return pl.concat([frame, warm], how="vertical_relaxed")


ENCODINGS = {
    "bool": lambda s: s,
    "int 0/1": lambda s: s.cast(pl.Int64),
    "float 0/1": lambda s: s.cast(pl.Float64),
    "text true/false": lambda s: s.cast(pl.String).str.to_lowercase(),
    "text True/False": lambda s: pl.Series(s.name, [str(v) for v in s], dtype=pl.String),
    "text 0/1": lambda s: s.cast(pl.Int64).cast(pl.String),
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_warmup_written_as_0_1_or_text_drops_the_same_warm_ups(encoding):
    frame = trials()
    expected = regimes.detect_regimes(frame, n_boot=100)
    encoded = frame.with_columns(ENCODINGS[encoding](frame["warmup"]).alias("warmup"))
    result = regimes.detect_regimes(encoded, n_boot=100)
    assert result.groups["n_trials"].to_list() == expected.groups["n_trials"].to_list() == [24]
    assert result.anomalies.height == expected.anomalies.height == 0


def test_csv_with_warmup_as_0_1_analyses_from_the_command_line(tmp_path, capsys):
    frame = trials()
    path = tmp_path / "t.csv"
    frame.with_columns(pl.col("warmup").cast(pl.Int64)).write_csv(path)
    assert main(["analyze", str(path), "--n-boot", "100"]) == 0
    assert "Trials:" in capsys.readouterr().out
    assert regimes.detect_regimes(regimes.load(path), n_boot=100).groups["n_trials"][0] == 24


@pytest.mark.parametrize("values", [[0, 2], ["yes", "sometimes"], [0.5, 1.0]])
def test_warmup_that_is_not_a_flag_is_one_error_naming_it(values):
    frame = trials().head(2).with_columns(pl.Series("warmup", values))
    with pytest.raises(RegimesInputError, match="column 'warmup' must hold booleans"):
        regimes.detect_regimes(frame)


def test_cache_speedup_reads_a_text_use_cache_as_the_flags_it_says():
    on = simulate_sweep(1, n_budgets=8, trials=3, seed=1).trials.drop("source")
    off = on.with_columns(pl.lit(False).alias("use_cache"), pl.col("latency_s") * 3)
    frame = pl.concat([on, off])
    expected = regimes.cache_speedup(frame)
    text = frame.with_columns(pl.col("use_cache").cast(pl.String))
    assert regimes.cache_speedup(text).speedup.equals(expected.speedup)
    with pytest.raises(RegimesInputError, match="column 'use_cache' must hold booleans"):
        regimes.cache_speedup(frame.with_columns(pl.lit("on").alias("use_cache")))


def test_pandas_frame_with_duplicate_column_names_is_one_error_naming_them():
    frame = trials().to_pandas()
    frame.columns = ["latency_s" if c == "order" else c for c in frame.columns]
    with pytest.raises(RegimesInputError, match=r"duplicate column name\(s\) \['latency_s'\]"):
        regimes.detect_regimes(frame)


def test_min_ratio_takes_numpy_numbers_and_refuses_booleans():
    frame = trials()
    result = regimes.detect_regimes(frame, min_ratio=np.float32(1.25), n_boot=100)
    assert result.anomalies.height == 0
    for flag in (True, np.True_):
        with pytest.raises(RegimesInputError, match="min_ratio must be a finite number"):
            regimes.detect_regimes(frame, min_ratio=flag)
