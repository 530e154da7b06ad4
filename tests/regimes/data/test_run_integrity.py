"""Runs on disk are verified on load: content checksums and a results format version.

Every run here is written by the library from a synthetic sweep (``simulate_sweep``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

import regimes
from regimes import RegimesInputError, RegimesWarning
from regimes.data import io
from regimes.data.runs import parts
from regimes.data.simulate import simulate_sweep


def write_run(path: Path, parts: int = 3) -> Path:
    """A synthetic run: ``parts`` trial parts, one steps part and one errors part."""
    trials = simulate_sweep(1, n_budgets=6, trials=2, sessions=2, seed=3).trials
    trials = trials.drop("source").with_columns(pl.lit(False).alias("instrumented"))
    writer = regimes.RunWriter(path, {"name": "synthetic-integrity", "source": "synthetic"})
    for chunk in np.array_split(np.arange(trials.height), parts):
        writer.write_trials(trials[chunk.tolist()])
    writer.write_steps(
        [
            {"model": "synthetic-0000", "budget": 16, "session": 0, "trial": 0, "step": s,
             "step_s": 0.01 * (s + 1)}
            for s in range(4)
        ]
    )  # fmt: skip
    writer.write_errors([{"model": "synthetic-0000", "budget": 32, "error_type": "OOM"}])
    return path


def parts_of(run: Path, table: str = "trials") -> list[Path]:
    return sorted((run / table).glob("part-*.parquet"))


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


def test_every_part_records_its_checksum_and_format(run):
    for table in ("trials", "steps", "errors"):
        for part in parts_of(run, table):
            meta = pq.read_schema(part).metadata
            assert len(meta[b"regimes.sha256"]) == 64
            assert int(meta[b"regimes.format_version"]) == io.FORMAT_VERSION
    assert json.loads((run / "meta.json").read_text())["format_version"] == io.FORMAT_VERSION


def test_flipped_bytes_are_refused_naming_the_part_or_change_nothing(run):
    """Flip one byte at offsets spread over a part: what loads is the original, or the
    load is refused naming the damaged part; never changed latencies."""
    original = regimes.load(run)
    part = parts_of(run)[1]
    intact = part.read_bytes()
    refused = 0
    for offset in np.linspace(0, len(intact) - 1, 97).astype(int):
        flip(part, int(offset))
        try:
            loaded = regimes.load(run)
        except RegimesInputError as exc:
            assert part.name in str(exc), str(exc)
            refused += 1
        else:
            assert_frame_equal(loaded, original)
        part.write_bytes(intact)
    assert refused >= 60


def test_truncated_part_is_refused_naming_it(run):
    part = parts_of(run)[0]
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    with pytest.raises(RegimesInputError, match=part.name):
        regimes.load(run)


@pytest.mark.parametrize("table", ["trials", "steps", "errors"])
def test_damaged_part_can_be_skipped_with_a_warning(run, table):
    full = regimes.read_run(run)
    damaged = parts_of(run, table)[-1]
    lost = pl.read_parquet(damaged).height
    damaged.write_bytes(damaged.read_bytes()[:-40])
    with pytest.warns(RegimesWarning, match=f"skipped damaged part .*{damaged.name}"):
        kept = regimes.read_run(run, on_damaged="skip")
    assert getattr(kept, table).height == getattr(full, table).height - lost
    other = next(t for t in ("trials", "steps", "errors") if t != table)
    assert_frame_equal(getattr(kept, other), getattr(full, other))
    with pytest.raises(RegimesInputError, match=damaged.name):
        regimes.read_run(run)


def test_on_damaged_takes_raise_or_skip(run):
    with pytest.raises(RegimesInputError, match="on_damaged must be 'raise' or 'skip'"):
        regimes.load(run, on_damaged="ignore")


def test_run_written_by_a_newer_version_is_refused(run):
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(meta | {"format_version": io.FORMAT_VERSION + 1}))
    with pytest.raises(RegimesInputError, match="newer version of regimes"):
        regimes.load(run)
    with pytest.raises(RegimesInputError, match="newer version of regimes"):
        regimes.RunWriter(run, {"resumed": True})


def test_part_written_by_a_newer_version_is_refused(run, monkeypatch):
    monkeypatch.setattr(parts, "FORMAT_VERSION", parts.FORMAT_VERSION + 1)  # what writes
    newer = io.RunWriter(run, None).write_trials(regimes.load(run).head(2))
    monkeypatch.undo()
    with pytest.raises(RegimesInputError, match=rf"{newer.name}.*newer version of regimes"):
        regimes.load(run)


def test_single_file_is_verified_too(tmp_path):
    frame = simulate_sweep(1, n_budgets=6, seed=1).trials
    path = regimes.save(frame, tmp_path / "t.parquet", {"source": "synthetic"})
    assert_frame_equal(regimes.load(path), frame.sort("order"))
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RegimesInputError, match="t.parquet"):
        regimes.load(path)


def test_committed_runs_without_checksums_still_load():
    data = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-gpt2"
    assert regimes.load(data).height > 0


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2]", "a JSON object"),
        ('"run"', "a JSON object"),
        ('{"run_id": "x"', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_meta_json_that_is_not_an_object_is_one_clear_error(run, text, match):
    target = run / "meta.json"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(RegimesInputError, match=match):
        regimes.read_run(run)
