"""Refactors must not change results: every golden frame is recomputed bit for bit."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from .cases import golden_cases

FRAMES = Path(__file__).parent / "frames"


def test_every_golden_output_is_reproduced_bit_for_bit() -> None:
    seen = set()
    for name, frame in golden_cases():
        seen.add(name)
        expected = pl.read_parquet(FRAMES / f"{name}.parquet")
        assert_frame_equal(frame, expected, check_exact=True, check_dtypes=True)
    missing = {p.stem for p in FRAMES.glob("*.parquet")} - seen
    assert not missing, f"golden outputs no longer produced: {sorted(missing)}"


@pytest.mark.parametrize("column", ["ratio", "q_value"])
def test_golden_published_spike_is_the_one_anomaly(column: str) -> None:
    anomalies = pl.read_parquet(FRAMES / "published--detect--anomalies.parquet")
    assert anomalies.height == 1
    assert anomalies["start"][0] == 512 and anomalies["end"][0] == 624
    assert anomalies[column][0] > 0
