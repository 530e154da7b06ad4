"""Fleet sweeps for real on one machine: a Dask scheduler and workers on loopback.

Three ``dask worker`` processes: two on this host offering only the CPU
(``REGIMES_BACKENDS=cpu``), so the one-unit-per-host rule has something to enforce, and
one posing as a second machine (``REGIMES_HOST=fleet-host-b``). The sweep runs through
``regimes collect --cluster``; the second host's worker is killed with SIGKILL while it
runs a session, and the command is rerun until complete. Every trial must then be on
disk exactly once, the killed session continued on the other host, and ``meta.json``
must hold both hosts' environments.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from regimes.data.io import TRIAL_KEY, read_run

ROOT = Path(__file__).resolve().parents[2]
HOST_B = "fleet-host-b"

SPEC = textwrap.dedent(
    """
    models = ["tiny-gpt2"]
    backends = ["cpu"]
    prompt_tokens = [4]
    budgets = [2, 4, 8]
    trials = 2
    warmup = 1
    sessions = 2
    isolation = "process"
    """
)


def _dask(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "dask", *args],
        cwd=ROOT,
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(condition: object, what: str, timeout: float = 60) -> None:
    give_up = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, subprocess.Popen[bytes]]]]:
    """A scheduler and three connected workers on loopback, stopped afterwards.

    Shared by the module's tests, in file order: the last one kills a worker.
    """
    from distributed import Client

    scheduler_file = tmp_path_factory.mktemp("cluster") / "scheduler.json"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["scheduler"] = _dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--scheduler-file",
            str(scheduler_file),
            "--no-dashboard",
        )
        _wait_for(scheduler_file.exists, "the scheduler file")
        worker = [
            "worker",
            "--scheduler-file",
            str(scheduler_file),
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--host",
            "127.0.0.1",
        ]
        procs["a1"] = _dask(*worker, env={"REGIMES_BACKENDS": "cpu"})
        procs["a2"] = _dask(*worker, env={"REGIMES_BACKENDS": "cpu"})
        procs["b"] = _dask(*worker, env={"REGIMES_HOST": HOST_B})
        address = json.loads(scheduler_file.read_text())["address"]
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(3, timeout=120)
            # torch imported once per worker here, so the tests time the sweeps
            client.run(__import__, "collectors.environment")
        yield address, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def _collect(spec: Path, out: Path, address: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "regimes",
        "collect",
        str(spec),
        "-o",
        str(out),
        "-q",
        "--cluster",
        address,
    ]


def _trials_of(out: Path, host: str) -> int:
    parts = [p for p in (out / "trials").glob("*.parquet") if not p.name.startswith(".")]
    return sum(pl.read_parquet(p).filter(pl.col("host") == host).height for p in parts)


def test_spec_naming_a_backend_no_host_offers_is_refused(
    cluster: tuple[str, dict[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    address, _ = cluster
    spec, out = tmp_path / "cuda.toml", tmp_path / "run"
    spec.write_text(SPEC.replace('backends = ["cpu"]', 'backends = ["cpu", "cuda"]'))
    done = subprocess.run(
        _collect(spec, out, address),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stderr
    assert "'cuda'" in done.stderr and HOST_B in done.stderr and socket.gethostname() in done.stderr
    assert not out.exists()


def test_fleet_sweep_survives_a_killed_worker(
    cluster: tuple[str, dict[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    address, procs = cluster
    spec, out = tmp_path / "fleet.toml", tmp_path / "run"
    # Every generation slowed 20x (synthetic timings): a tiny-gpt2 session otherwise
    # ends within milliseconds of its first trial, and the kill would land after it.
    spec.write_text(SPEC + "inject = { start = 2, stop = 8, factor = 20.0 }\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        _collect(spec, out, address),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(
            lambda: child.poll() is not None or _trials_of(out, HOST_B) >= 1,
            "a trial from the second host",
            timeout=300,
        )
        assert child.poll() is None, f"the sweep ended before the kill: {child.communicate()}"
        procs["b"].send_signal(signal.SIGKILL)
        stdout, stderr = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    for _ in range(2):  # the command is rerun until it reports the run complete
        if "sweep complete" in stdout:
            break
        done = subprocess.run(
            _collect(spec, out, address),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        stdout, stderr = done.stdout, done.stderr
    assert "sweep complete" in stdout, stderr

    run = read_run(out)
    measured = run.trials.filter(~pl.col("warmup"))
    # 3 budgets x 2 trials x 2 sessions, each trial key exactly once
    assert measured.height == 12
    assert run.trials.select(TRIAL_KEY).is_duplicated().sum() == 0
    here = socket.gethostname()
    assert set(run.trials["host"].unique()) == {here, HOST_B}
    hosts = run.meta["fleet"]["hosts"]
    assert set(hosts) >= {here, HOST_B}
    assert hosts[HOST_B]["hostname"] == HOST_B and "torch" in hosts[here]
    per_session = run.trials.group_by("session").agg(pl.col("host").n_unique().alias("hosts"))
    continued = per_session.filter(pl.col("hosts") > 1)["session"].to_list()
    # the killed worker's session was finished by the other host, and only that one
    assert len(continued) == 1
    moved = run.trials.filter(pl.col("session") == continued[0]).sort("order")
    assert moved["host"][0] == HOST_B and moved["host"][-1] == here
    assert "left mid-session" in stderr + stdout or moved["process_id"].n_unique() >= 2
    # one unit at a time per host: a host's sessions never interleave in execution order
    for host in (here, HOST_B):
        sessions = run.trials.filter(pl.col("host") == host).sort("order")["session"].to_list()
        blocks = [s for i, s in enumerate(sessions) if i == 0 or s != sessions[i - 1]]
        assert len(blocks) == len(set(blocks)), (host, sessions)


def test_detection_tells_two_identical_machines_apart() -> None:
    import regimes

    # synthetic: two machines with the same device name, one spiky and one smooth
    spiky = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1).trials
    smooth = regimes.simulate_sweep(seed=2).trials
    trials = pl.concat(
        [spiky.with_columns(host=pl.lit("mac-a")), smooth.with_columns(host=pl.lit("mac-b"))]
    )
    report = regimes.detect_regimes(trials, seed=0)
    assert "host" in report.curve.columns
    assert set(report.anomalies["host"].to_list()) == {"mac-a"}
    # one machine: host is no group column, as in runs that never recorded it
    assert (
        "host" not in regimes.detect_regimes(spiky.with_columns(host=pl.lit("mac-a"))).curve.columns
    )
