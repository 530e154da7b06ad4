"""``regimes collect`` and the commands that read runs, given what users really give them.

Specs with a negative seed, an enormous budget range, a BOM or bad UTF-8, an injection
outside the grid; run directories whose ``meta.json`` holds other JSON than the run's
metadata; Ctrl-C before the sweep starts; a full disk; another writer between the spec
check and the lock. Each must end with one line naming the problem (exit 2, or 130 for
Ctrl-C) before anything is created, never with a traceback.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collectors import sweep as sweep_module
from collectors._state import remove_stale_temp_files
from collectors.spec import SpecError, SweepSpec
from regimes.cli import main

BASE = 'models = ["tiny-gpt2"]\nbackends = ["cpu"]\nprompt_tokens = [2]\n'
TINY = BASE + "budgets = [2, 3]\ntrials = 1\nwarmup = 0\n"


def spec_file(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_line_exit(argv: list[str], capsys, status: int = 2) -> str:
    """Run ``argv``; return its one error line (the progress lines of a sweep aside)."""
    assert main(argv) == status
    err = capsys.readouterr().err
    problems = [line for line in err.splitlines() if not line.startswith("collect: warning")]
    problems = [line for line in problems if not line.startswith("collect: 2 case(s)")]
    problems = [line for line in problems if not line.startswith("collect: estimate")]
    assert len(problems) == 1 and "Traceback" not in err, err
    return problems[0]


@pytest.mark.parametrize(
    "extra, needle",
    [
        ("seed = -1\n", "'seed' must be >= 0, got -1"),
        (f"seed = {2**63}\n", "'seed' must be <="),
        ("[inject]\nstart = 700\nstop = 800\nfactor = 2.0\n", "'inject' covers budgets 700..800"),
    ],
)
def test_spec_mistakes_fail_before_anything_is_created(tmp_path, capsys, extra, needle):
    spec = spec_file(tmp_path, TINY + extra)
    out = tmp_path / "run"
    assert needle in one_line_exit(["collect", str(spec), "-o", str(out)], capsys)
    assert not out.exists()


def test_a_huge_budget_range_is_refused_without_being_built(tmp_path, capsys):
    spec = spec_file(tmp_path, BASE + "budgets = {start = 1, stop = 1000000000000}\n")
    started = time.perf_counter()
    err = one_line_exit(["collect", str(spec), "-o", str(tmp_path / "run")], capsys)
    assert time.perf_counter() - started < 10
    assert "holds 1000000000000 budgets" in err
    with pytest.raises(SpecError, match="more than"):
        SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"], "budgets": [1] * 10**6})


def test_spec_file_encodings(tmp_path, capsys):
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + TINY.encode())
    assert SweepSpec.from_toml(bom).budgets == (2, 3)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(TINY.encode() + b"# caf\xe9\n")
    err = one_line_exit(["collect", str(bad), "-o", str(tmp_path / "run")], capsys)
    assert "latin1.toml" in err and "not UTF-8" in err
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line_exit(["collect", str(fifo)], capsys)


METAS = {
    "a list": b"[1]",
    "a string": b'"x"',
    "null": b"null",
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "an object nested 100,000 deep": b'{"spec": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "bad UTF-8": b'{"run_id": "\xff"}',
    "spec as a list": b'{"spec": [1]}',
    "resumes as an object": b'{"spec": {}, "resumes": {"a": 1}}',
    "resumes holding numbers": b'{"resumes": [1, 2]}',
    "environment as a list": b'{"environment": [1]}',
    "batches holding text": b'{"batches": ["x"]}',
    "run_id as a number": b'{"run_id": 7}',
}


@pytest.mark.parametrize("damage", METAS)
def test_meta_json_of_any_shape_is_one_line_for_every_command(tmp_path, capsys, damage):
    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    (run / "meta.json").write_bytes(METAS[damage])
    spec = spec_file(tmp_path, TINY)
    for argv in (
        ["collect", str(spec), "-o", str(run), "-q"],
        ["analyze", str(run)],
        ["report", str(run), "-o", str(tmp_path / "r.html")],
    ):
        err = one_line_exit(argv, capsys)
        assert "meta.json" in err or "sweep spec" in err, err
    assert not list((run / "trials").iterdir())  # nothing measured into a damaged run


def test_ctrl_c_before_the_sweep_starts_is_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(SweepSpec, "from_toml", interrupted)
    spec = spec_file(tmp_path, TINY)
    err = one_line_exit(["collect", str(spec), "-o", str(tmp_path / "run")], capsys, 130)
    assert "interrupted; rerun to resume: regimes collect" in err


def test_a_full_disk_names_the_file_and_how_to_resume(tmp_path, capsys, monkeypatch):
    spec = spec_file(tmp_path, TINY)
    out = tmp_path / "run"
    real = pq.write_table

    def full(table, where, **kwargs):
        if table.num_rows and "latency_s" in table.column_names:
            raise OSError(28, "No space left on device")
        return real(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", full)
    err = one_line_exit(["collect", str(spec), "-o", str(out), "-q"], capsys)
    assert f"No space left on device: '{out / 'trials'}/part-" in err
    assert f"resume with: regimes collect {spec} -o {out}" in err
    monkeypatch.undo()
    assert main(["collect", str(spec), "-o", str(out), "-q"]) == 0


def test_stale_metadata_temp_files_are_removed_with_the_run_locked(tmp_path):
    (tmp_path / "trials").mkdir()
    stale = [tmp_path / ".meta.json.0123.tmp", tmp_path / "trials" / ".part-x.parquet.9.tmp"]
    for path in stale:
        path.write_text("half written")
    remove_stale_temp_files(tmp_path)
    assert not any(path.exists() for path in stale)


def test_the_spec_is_checked_again_once_the_run_is_locked(tmp_path, monkeypatch):
    spec = SweepSpec.from_toml(spec_file(tmp_path, TINY))
    other = SweepSpec.from_dict({**spec.to_dict(), "trials": 2})
    out = tmp_path / "run"
    real_enter = sweep_module.RunLock.__enter__

    def another_writer_first(lock):
        # between the first check and the lock, another sweep created the run
        (out / "meta.json").write_text(json.dumps({"spec": other.to_dict()}))
        return real_enter(lock)

    monkeypatch.setattr(sweep_module.RunLock, "__enter__", another_writer_first)
    with pytest.raises(SpecError, match="different spec"):
        sweep_module.run_sweep(spec, out, progress=False)
