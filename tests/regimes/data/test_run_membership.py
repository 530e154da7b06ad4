"""What a run directory may hold: its own checksummed parts, regular files, whole columns.

Every run here is written by the library from a synthetic sweep (``simulate_sweep``).
Each test puts into a run what a user, a copy or a script could put there (a part
rewritten by a plain ``write_parquet``, another run's part, a part without a column, a
FIFO) and checks that loading, scanning and ``regimes analyze`` refuse it by name
instead of analysing mixed or wrong rows.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import regimes
from regimes import RegimesInputError, RegimesWarning
from regimes.cli import main
from regimes.data import io
from regimes.data.runs import parts
from regimes.data.simulate import simulate_sweep

SPEC = {"models": ["synthetic-0000"], "budgets": [16, 32]}


def write_run(path: Path, seed: int = 3, spec: dict | None = None) -> Path:
    trials = simulate_sweep(1, n_budgets=6, trials=2, sessions=2, seed=seed).trials.drop("source")
    writer = regimes.RunWriter(path, {"source": "synthetic", "spec": spec or SPEC})
    writer.write_trials(trials.head(20))
    writer.write_trials(trials.slice(20))
    return path


def parts_of(run: Path, table: str = "trials") -> list[Path]:
    return sorted((run / table).glob("part-*.parquet"))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


def refused(run: Path, match: str) -> None:
    """Load, scan and ``regimes analyze`` all refuse ``run`` with ``match`` in one line."""
    with pytest.raises(RegimesInputError, match=match):
        regimes.load(run)
    with pytest.raises(RegimesInputError, match=match):
        regimes.scan([run])


def test_part_rewritten_without_its_checksum_is_refused_in_a_format_2_run(run, capsys):
    part = parts_of(run)[0]
    frame = pl.read_parquet(part)
    frame.with_columns(
        pl.when(pl.col("budget") == frame["budget"].min())
        .then(pl.col("latency_s") * 5)
        .otherwise(pl.col("latency_s"))
    ).write_parquet(part)
    refused(run, f"{part.name}.*carries no checksum")
    assert main(["analyze", str(run), "--n-boot", "100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and part.name in err


def test_format_1_run_loads_with_one_warning_that_it_cannot_be_verified(run):
    for part in parts_of(run):
        pl.read_parquet(part).write_parquet(part)  # as format-1 writers left them
    meta = json.loads((run / "meta.json").read_text())
    del meta["format_version"]
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(RegimesWarning, match="2 part.*no checksum") as caught:
        trials = regimes.load(run)
    assert len(caught) == 1 and trials.height == 24
    assert io.upgrade_run(run) == 2
    assert regimes.load(run).equals(trials)  # no warning any more: verified from now on


def test_upgrade_of_a_committed_format_1_run_kept_every_value():
    data = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-gpt2"
    meta = json.loads((data / "meta.json").read_text())
    assert meta["format_version"] == 2 and meta["upgraded_from_format"] == 1
    assert regimes.load(data).filter(~pl.col("warmup")).height == 384


@pytest.mark.parametrize("how", ["other spec", "same spec", "symlink"])
def test_part_of_another_run_is_refused_by_name(tmp_path, run, how):
    other = write_run(
        tmp_path / "other", seed=9, spec={**SPEC, "budgets": [8]} if how == "other spec" else SPEC
    )
    source = parts_of(other)[0]
    target = run / "trials" / f"part-copied-{how.replace(' ', '-')}.parquet"
    if how == "symlink":
        target.symlink_to(source)
    else:
        shutil.copy(source, target)
    refused(run, f"{target.name} of the run .* belongs to another run")


def test_part_with_the_right_run_id_but_another_spec_is_foreign(run):
    meta = json.loads((run / "meta.json").read_text())
    writer = regimes.RunWriter(run, None)
    writer.meta = {**meta, "spec": {**SPEC, "budgets": [8]}}
    part = writer.write_trials(regimes.load(run).head(2))
    refused(run, f"{part.name}.*another sweep spec")


REQUIRED = io.REQUIRED_ON_DISK["trials"]


@pytest.mark.parametrize("column", REQUIRED)
def test_every_required_on_disk_column_is_required_when_written_and_read(run, column):
    trials = regimes.load(run)
    with pytest.raises(RegimesInputError, match=f"needs column.*{column}"):
        regimes.RunWriter(run, None).write_trials(trials.drop(column))
    # the same part as an older writer could have left it: checksummed, column null
    writer = regimes.RunWriter(run, None)
    frame = parts.conform(trials.head(3), "trials").with_columns(
        pl.lit(None, dtype=regimes.TRIAL_SCHEMA[column]).alias(column)
    )
    part = run / "trials" / "part-nulls.parquet"
    parts.write_parquet_atomically(frame, part, writer.meta)
    refused(run, f"part-nulls.parquet.*{column}")


@pytest.mark.parametrize(
    "column, values",
    [
        ("budget", ["sixteen", "x"]),
        ("latency_s", ["fast", "slow"]),
        ("session", ["a", "b"]),
        ("use_cache", ["maybe", "no"]),
        ("warmup", ["sometimes", "never"]),
    ],
)
def test_part_whose_column_holds_the_wrong_kind_is_one_line(run, column, values, capsys):
    frame = regimes.load(run).head(2).with_columns(pl.Series(column, values))
    writer = regimes.RunWriter(run, None)
    part = run / "trials" / "part-text.parquet"
    parts.write_parquet_atomically(frame, part, writer.meta)  # checksummed: only the kind is wrong
    refused(run, f"part-text.parquet.*{column}.*cannot be read as")
    assert main(["analyze", str(run), "--n-boot", "100"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_fifo_named_like_a_part_is_refused_without_opening_it(run, tmp_path):
    fifo = run / "trials" / "part-x.parquet"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            regimes.load(run)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the reader, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("loading a run with a FIFO part blocked")
    assert isinstance(outcome[0], RegimesInputError) and "a FIFO" in str(outcome[0])
    refused(run, "part-x.parquet.*a FIFO")
    single = tmp_path / "t.parquet"
    os.mkfifo(single)
    with pytest.raises(RegimesInputError, match="a FIFO"):
        regimes.load(single)
    fifo.unlink()
    os.replace(run / "meta.json", tmp_path / "meta.json")
    os.mkfifo(run / "meta.json")
    with pytest.raises(RegimesInputError, match="meta.json.*a FIFO"):
        regimes.load(run)


def test_trials_as_a_file_is_named_not_read_as_an_empty_table(run):
    shutil.rmtree(run / "trials")
    (run / "trials").write_text("not a folder")
    refused(run, "trials' is not a directory")


def test_a_failed_write_names_its_file_and_leaves_no_temporary_file(run, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(OSError, match="No space left") as caught:
        regimes.RunWriter(run, None).write_trials(regimes.load(run).head(1))
    assert caught.value.filename.startswith(str(run / "trials" / "part-"))
    monkeypatch.undo()
    monkeypatch.setattr(Path, "write_text", lambda self, text: full())
    with pytest.raises(OSError, match="No space left") as caught:
        regimes.RunWriter(run, {"resume": 1})
    assert caught.value.filename == str(run / "meta.json")
    assert not [p.name for p in run.rglob(".*.tmp")]
