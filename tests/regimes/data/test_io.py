"""Run directories: atomic parts, resume keys, loading, clear errors."""

import json

import polars as pl
import pytest

import regimes
from regimes.data.io import TRIAL_KEY, RunWriter, read_run


def _row(budget, trial, order, **kw):
    row = dict(
        run_id="r",
        session=0,
        backend="cpu",
        device="cpu",
        model="tiny-gpt2",
        dtype="float32",
        engine="generate",
        use_cache=True,
        prompt_tokens=8,
        budget=budget,
        trial=trial,
        order=order,
        warmup=False,
        latency_s=0.1 * budget,
        new_tokens=budget,
        instrumented=False,
        process_id="p",
    )
    row.update(kw)
    return row


def test_writer_parts_roundtrip(tmp_path):
    writer = RunWriter(tmp_path / "run", {"python": "3.11"})
    writer.write_trials([_row(8, 0, 0), _row(16, 0, 1)])
    writer.write_trials([_row(8, 1, 2)])
    df = regimes.load(tmp_path / "run")
    assert df.height == 3
    assert df.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    assert df["order"].to_list() == [0, 1, 2]
    assert writer.next_order() == 3
    assert len(writer.done_keys()) == 3
    assert all(len(k) == len(TRIAL_KEY) for k in writer.done_keys())


def test_resume_keeps_run_id_and_records_resume(tmp_path):
    first = RunWriter(tmp_path / "run", {"attempt": 1})
    second = RunWriter(tmp_path / "run", {"attempt": 2})
    assert first.run_id == second.run_id
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["resumes"] == [{"attempt": 2}]


def test_no_temp_files_left(tmp_path):
    writer = RunWriter(tmp_path / "run", {})
    writer.write_trials([_row(8, 0, 0)])
    assert not list((tmp_path / "run" / "trials").glob(".*"))


def test_single_parquet_file_carries_meta(tmp_path):
    path = regimes.save(pl.DataFrame([_row(8, 0, 0)]), tmp_path / "t.parquet", {"machine": "x"})
    run = read_run(path)
    assert run.meta == {"machine": "x"} and run.trials.height == 1


@pytest.mark.parametrize("make", ["missing", "empty_dir", "bad_file"])
def test_bad_paths_give_clear_errors(tmp_path, make):
    target = tmp_path / "x"
    if make == "empty_dir":
        target.mkdir()
    elif make == "bad_file":
        target = tmp_path / "x.parquet"
        target.write_bytes(b"not parquet")
    with pytest.raises(regimes.RegimesInputError, match="x"):
        regimes.load(target)
