"""A fleet sweep whose Dask scheduler dies mid-run ends in one line that says how to resume.

A scheduler and one worker on loopback; ``regimes collect --cluster`` runs a slowed
sweep, the scheduler is killed with SIGKILL once the first trial is on disk, and the
command must then end with exit 2, one ``error:`` line naming the lost scheduler and
the command to resume, none of ``distributed``'s logged tracebacks, and every trial
written before the kill kept.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import polars as pl
import pytest

from collectors import fleet
from collectors._fleet.hosts import FleetError

from .test_fleet import ROOT, _collect, _dask, _wait_for

SPEC = textwrap.dedent(
    """
    models = ["tiny-gpt2"]
    backends = ["cpu"]
    prompt_tokens = [4]
    budgets = [2, 4, 8]
    trials = 4
    warmup = 0
    sessions = 1
    isolation = "process"
    inject = { start = 2, stop = 8, factor = 30.0 }
    """
)
"""Slowed 30x (synthetic timings) so that the sweep is still running when the kill lands."""


def _trials_on_disk(out: Path) -> int:
    return len([p for p in (out / "trials").glob("*.parquet") if not p.name.startswith(".")])


def test_a_killed_scheduler_is_one_line_with_the_resume_command(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    scheduler_file = tmp_path / "scheduler.json"
    procs = [
        _dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
              "--scheduler-file", str(scheduler_file))
    ]  # fmt: skip
    child = None
    try:
        _wait_for(scheduler_file.exists, "the scheduler file")
        address = json.loads(scheduler_file.read_text())["address"]
        procs.append(
            _dask("worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                  "--host", "127.0.0.1")
        )  # fmt: skip
        spec, out = tmp_path / "fleet.toml", tmp_path / "run"
        spec.write_text(SPEC)
        child = subprocess.Popen(
            _collect(spec, out, address),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(
            lambda: child.poll() is not None or _trials_on_disk(out) >= 1,
            "a first trial",
            timeout=300,
        )
        assert child.poll() is None, f"the sweep ended before the kill: {child.communicate()}"
        procs[0].send_signal(signal.SIGKILL)
        stdout, stderr = child.communicate(timeout=120)
    finally:
        for proc in [*procs, *([child] if child is not None else [])]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    assert child.returncode == 2, stderr
    assert "Traceback" not in stderr and "CommClosedError" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("collect: ")]
    assert len(lines) == 1, stderr
    assert "scheduler" in lines[0] and address in lines[0]
    assert f"regimes collect {spec} -o {out} --cluster {address}" in lines[0]
    kept = pl.read_parquet(sorted((out / "trials").glob("part-*.parquet")))
    assert kept.height >= 1  # what was written before the kill stays


def test_what_counts_as_a_lost_scheduler() -> None:
    """The translation without a cluster: the errors the client layer raises."""
    from distributed.comm.core import CommClosedError

    class Stopped:
        status = "closed"

    assert fleet._scheduler_lost(CommClosedError("x"))
    assert fleet._scheduler_lost(OSError("Timed out trying to connect to tcp://h:1"), Stopped())
    assert fleet._scheduler_lost(TimeoutError(), Stopped())
    full = OSError(28, "No space left on device")
    assert not fleet._scheduler_lost(full, Stopped())  # reported as a full disk
    assert not fleet._scheduler_lost(ValueError("x")) and not fleet._scheduler_lost(full)
    message = fleet._lost_message("tcp://127.0.0.1:9", CommClosedError("Stream is closed"))
    assert isinstance(message, FleetError) and "\n" not in str(message)
    assert "tcp://127.0.0.1:9" in str(message) and "every trial written" in str(message)
    assert "CommClosedError" not in str(message) and "Stream is closed" in str(message)
