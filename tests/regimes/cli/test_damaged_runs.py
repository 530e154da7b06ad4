"""Fuzzing every command with damaged runs: one line on stderr and exit 2, or no harm.

A small synthetic run (``simulate_sweep``, written by the library) is damaged the ways a
disk, a copy or an editor damages files: truncated at many lengths and one byte flipped
at many offsets, in a trial part and in ``meta.json``; ``meta.json`` also holds other
JSON than an object. Every ``regimes`` command that reads runs must then print one line
on stderr (never a traceback or a Rust panic) and exit with status 2. A damage that
leaves the data intact (a flipped byte in a part's statistics, a changed character in a
metadata string) may load, and then must load exactly the original trials.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.cli import main
from regimes.cli._main import COMMANDS
from regimes.data.simulate import simulate_sweep

OFFSETS = 40
"""Offsets tried per file and kind of damage."""


def write_run(path: Path) -> Path:
    trials = simulate_sweep(1, n_budgets=8, trials=3, sessions=2, seed=5).trials.drop("source")
    writer = regimes.RunWriter(path, {"name": "synthetic-fuzz", "source": "synthetic"})
    for chunk in np.array_split(np.arange(trials.height), 2):
        writer.write_trials(trials[chunk.tolist()])
    return path


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("fuzz") / "intact")


def commands(run: Path, intact: Path, out: Path) -> Iterator[list[str]]:
    """Every command that reads a run, pointed at the damaged one."""
    yield ["analyze", str(run), "--n-boot", "100"]
    yield ["report", str(run), "--n-boot", "100", "-o", str(out / "report.html")]
    if "compare" in COMMANDS:
        yield ["compare", str(intact), str(run)]


def damages(data: bytes) -> Iterator[tuple[str, bytes]]:
    for n in np.unique(np.linspace(0, len(data) - 1, OFFSETS).astype(int)):
        yield f"truncated to {n} bytes", data[:n]
    for offset in np.unique(np.linspace(0, len(data) - 1, OFFSETS).astype(int)):
        flipped = bytearray(data)
        flipped[offset] ^= 0xFF
        yield f"byte {offset} flipped", bytes(flipped)


def assert_refused_in_one_line(run: Path, intact: Path, out: Path, capfd, what: str) -> None:
    for argv in commands(run, intact, out):
        status = main(argv)
        err = capfd.readouterr().err
        assert status == 2, f"{what}: regimes {argv[0]} exited {status}: {err}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"regimes {argv[0]}: error: "), (what, err)
        assert "Traceback" not in err and "panicked" not in err, (what, err)


def damaged_copy(intact: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for source in intact.rglob("*"):
        target = run / source.relative_to(intact)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return run


def test_damaged_trial_part(intact, tmp_path, capfd):
    run = damaged_copy(intact, tmp_path)
    original = regimes.load(intact)
    part = sorted((run / "trials").glob("*.parquet"))[0]
    refused = 0
    for what, data in damages(part.read_bytes()):
        part.write_bytes(data)
        try:
            loaded = regimes.load(run)
        except RegimesInputError:
            assert_refused_in_one_line(run, intact, tmp_path, capfd, what)
            refused += 1
        else:
            assert loaded.equals(original), f"{what}: trials changed without an error"
    assert refused >= 1.5 * OFFSETS


def test_damaged_meta_json(intact, tmp_path, capfd):
    run = damaged_copy(intact, tmp_path)
    meta = run / "meta.json"
    refused = 0
    for what, data in damages(meta.read_bytes()):
        meta.write_bytes(data)
        try:
            still_an_object = isinstance(json.loads(data.decode("utf-8")), dict)
        except ValueError:  # not JSON, or not UTF-8
            still_an_object = False
        if still_an_object:
            assert regimes.load(run).equals(regimes.load(intact)), what
            continue
        assert_refused_in_one_line(run, intact, tmp_path, capfd, what)
        refused += 1
    assert refused >= OFFSETS


@pytest.mark.parametrize("content", ["[1, 2, 3]", '"a run"', "42", "null", ""])
def test_meta_json_that_is_not_an_object(intact, tmp_path, capfd, content):
    run = damaged_copy(intact, tmp_path)
    (run / "meta.json").write_text(content)
    assert_refused_in_one_line(run, intact, tmp_path, capfd, f"meta.json = {content!r}")


def test_newer_format_is_one_line(intact, tmp_path, capfd):
    run = damaged_copy(intact, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(meta | {"format_version": 99}))
    assert_refused_in_one_line(run, intact, tmp_path, capfd, "format 99")
    assert main(["analyze", str(run)]) == 2
    assert "newer version of regimes" in capfd.readouterr().err


def test_a_damaged_part_can_be_left_out_from_python(intact, tmp_path):
    run = damaged_copy(intact, tmp_path)
    part = sorted((run / "trials").glob("*.parquet"))[0]
    lost = pl.read_parquet(part).height
    part.write_bytes(part.read_bytes()[:100])
    with pytest.warns(regimes.RegimesWarning, match=part.name):
        kept = regimes.load(run, on_damaged="skip")
    assert kept.height == regimes.load(intact).height - lost


# the command prints the warning as its one line; shown, not turned into an error
@pytest.mark.filterwarnings("default::regimes.RegimesWarning")
@pytest.mark.parametrize("command", ["analyze", "report"])
def test_skip_damaged_reads_the_run_without_its_damaged_part(intact, tmp_path, capfd, command):
    run = damaged_copy(intact, tmp_path)
    part = sorted((run / "trials").glob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    argv = [command, str(run), "--n-boot", "100"]
    if command == "report":
        argv += ["-o", str(tmp_path / "report.html")]
    assert main(argv) == 2
    refused = capfd.readouterr().err.strip().splitlines()
    assert len(refused) == 1 and part.name in refused[0] and "--skip-damaged" in refused[0]
    assert not (tmp_path / "report.html").exists()
    assert main([*argv, "--skip-damaged"]) == 0
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if "skipped damaged part" in line]
    assert len(warned) == 1 and part.name in warned[0] and "Traceback" not in err
    assert warned[0].startswith("warning: ") and "its rows are not loaded" in warned[0]
    assert command == "analyze" or (tmp_path / "report.html").is_file()
