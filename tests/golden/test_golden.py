"""Refactors must not change results: every golden frame is recomputed.

Exactly in every column but floats, and floats to a relative 1e-6: the matrix kernels
a CPU's BLAS picks (AVX2 or AVX-512) round differently in the last bits, and the
bootstrap's tail p-values carry that to about 1e-7; any change of a decision (an
interval, a count, a flag) or of an estimate beyond rounding still fails.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from .cases import golden_cases

FRAMES = Path(__file__).parent / "frames"


def test_every_golden_output_is_reproduced() -> None:
    seen = set()
    for name, frame in golden_cases():
        seen.add(name)
        expected = pl.read_parquet(FRAMES / f"{name}.parquet")
        _assert_same(name, frame, expected)
    missing = {p.stem for p in FRAMES.glob("*.parquet")} - seen
    assert not missing, f"golden outputs no longer produced: {sorted(missing)}"


def _assert_same(name: str, frame: pl.DataFrame, expected: pl.DataFrame) -> None:
    """Every column exactly, floats to a relative 1e-6 (NaN where NaN)."""
    floats = [c for c, t in expected.schema.items() if t.is_float()]
    assert frame.schema == expected.schema, name
    assert_frame_equal(frame.drop(floats), expected.drop(floats), check_exact=True)
    for column in floats:
        got, want = frame[column].to_numpy(), expected[column].to_numpy()
        same = np.isclose(got, want, rtol=1e-6, atol=0.0, equal_nan=True)
        assert same.all(), f"{name}.{column}: {got[~same]} != {want[~same]}"


@pytest.mark.parametrize("column", ["ratio", "q_value"])
def test_golden_published_spike_is_the_one_anomaly(column: str) -> None:
    anomalies = pl.read_parquet(FRAMES / "published--detect--anomalies.parquet")
    assert anomalies.height == 1
    assert anomalies["start"][0] == 512 and anomalies["end"][0] == 624
    assert anomalies[column][0] > 0
