"""examples/demo.py measures a known slowdown, says how quiet the machine was and where
its results went."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.spec import SweepSpec

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo.py"


@pytest.fixture
def demo():
    spec = importlib.util.spec_from_file_location("regimes_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_sweep_is_the_committed_spec_on_this_machines_backend(demo):
    assert demo.demo_spec("mps")["backends"] == ["mps"]
    assert SweepSpec.from_toml(demo.SPEC).inject is not None  # cpu: runs here as written


def test_the_demo_sweep_injects_a_slowdown_that_recovers_inside_its_grid(demo):
    spec = SweepSpec.from_dict(demo.demo_spec("cpu"))
    assert spec.inject is not None and spec.inject.factor >= 2
    inside = [b for b in spec.budgets if spec.inject.start <= b <= spec.inject.stop]
    before = [b for b in spec.budgets if b < spec.inject.start]
    after = [b for b in spec.budgets if b > spec.inject.stop]
    # flanks on both sides, so the injected interval is a spike with a trend around it
    assert len(inside) >= 2 and len(before) >= 4 and len(after) >= 3
    assert list(spec.models) == ["tiny-gpt2"]
    assert spec.weights == "random"  # nothing to download
    assert demo.MAX_SECONDS <= 150  # the sweep is capped, on a busy machine too


def test_the_demo_prints_the_hygiene_warnings_and_where_the_results_went(
    demo, monkeypatch, tmp_path, capsys
):
    import collectors.hygiene

    for name in demo.THREAD_VARIABLES:  # restored after the test, whatever the demo sets
        monkeypatch.delenv(name, raising=False)
    busy = "load average 9.0 over 2 CPU(s) in the last minute: other work competes for the CPU"
    state = {
        **collectors.hygiene.machine_state(sample_s=0.0),
        "load_average": [9.0, 8.0, 7.0],
        "warnings": [busy],
    }
    monkeypatch.setattr(collectors.hygiene, "machine_state", lambda **_: state)
    small = demo.demo_spec("cpu")
    small.update(use_cache=[True], budgets=[16, 32, 48, 64, 80], trials=2, sessions=1, warmup=0)
    monkeypatch.setattr(demo, "demo_spec", lambda backend: {**small, "backends": [backend]})
    monkeypatch.setattr(demo, "COMMITTED_RUNS", {})

    assert demo.main(["-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out

    assert all(os.environ[name] == "1" for name in demo.THREAD_VARIABLES)
    assert "timing with OMP_NUM_THREADS=1" in out
    assert f"warning (before the sweep): {busy}" in out
    assert f"warning (in meta.json): {busy}" in out  # read back from the run
    run_dir = tmp_path / "runs" / "cpu-tiny-gpt2-injected"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["synthetic"] is True and meta["inject"]["factor"] == demo.injected(small)[2]
    assert meta["hygiene"]["warnings"] == [busy]
    assert str(run_dir) in out
    report = tmp_path / "report.html"
    assert report.is_file()
    assert f"report, this machine (tiny-gpt2, injected slowdown): {report}" in out
    assert list((tmp_path / "png" / "report").glob("*.png"))


def test_the_demo_times_with_one_thread_unless_told_otherwise(demo, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    assert demo.pin_threads() == "4"
    assert os.environ["MKL_NUM_THREADS"] == "1"


def test_a_run_too_short_to_analyse_asks_for_a_rerun(demo, monkeypatch, tmp_path, capsys):
    small = demo.demo_spec("cpu")
    small.update(use_cache=[True], budgets=[16, 48, 64], trials=1, sessions=1, warmup=0)
    monkeypatch.setattr(demo, "demo_spec", lambda backend: {**small, "backends": [backend]})
    monkeypatch.setattr(demo, "COMMITTED_RUNS", {"H200": "cuda-h200-instrumented"})
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    assert demo.main(["-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "too few trials measured" in out and "run the demo again" in out
    assert f"open {tmp_path / 'cuda-h200-instrumented.html'}" in out
    assert not (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_the_demo_finds_the_injected_slowdown_on_this_machine(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(DEMO), "-o", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    mine = done.stdout.split("this machine (tiny-gpt2, injected slowdown):")[1].split("NVIDIA")[0]
    assert re.search(r"latency at budgets \d+\.\.\d+ .*is [\d.]+x its trend", mine), mine
    assert "NVIDIA H200 (gpt2, committed):" in done.stdout
    for name in ("report", "cuda-h200-gpt2", "cuda-h200-instrumented"):
        assert (tmp_path / f"{name}.html").is_file()
