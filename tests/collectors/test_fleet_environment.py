"""What a session process started by a fleet worker inherits (no cluster needed)."""

from __future__ import annotations

import dask.config
import distributed  # noqa: F401  (its config defaults must exist before dask.config.set)
import pytest

from collectors._fleet import remote
from collectors._fleet.remote import probe, session_environment

NANNY = {"MALLOC_TRIM_THRESHOLD_": 65536, "OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1}


def test_thread_variables_pinned_by_a_nanny_are_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the nanny set it
    monkeypatch.setenv("MKL_NUM_THREADS", "4")  # the user's own choice
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    with dask.config.set({"distributed.nanny.pre-spawn-environ": NANNY}):
        env, unpinned = session_environment(nannied=True)
        kept, none = session_environment(nannied=False)  # a --no-nanny worker
    assert none == [] and kept["OMP_NUM_THREADS"] == "1"
    assert unpinned == ["OMP_NUM_THREADS"]
    assert "OMP_NUM_THREADS" not in env
    assert env["MKL_NUM_THREADS"] == "4"
    assert env["MALLOC_TRIM_THRESHOLD_"] == "65536"  # not a thread count: left alone


def test_the_probe_reports_the_sessions_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "_under_nanny", lambda: True)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # a process-wide value left by an earlier test (a local cluster's workers) would match
    # the nanny's and be unpinned too: this test sets only OMP_NUM_THREADS
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("REGIMES_BACKENDS", "cpu")
    with dask.config.set({"distributed.nanny.pre-spawn-environ": NANNY}):
        answer = probe()
    environment = answer["environment"]
    assert answer["backends"] == ["cpu"]
    assert environment["env"]["OMP_NUM_THREADS"] is None
    assert environment["unpinned_by_fleet"] == ["OMP_NUM_THREADS"]
    assert "torch_threads" not in environment


def test_outside_a_worker_nothing_is_unpinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with dask.config.set({"distributed.nanny.pre-spawn-environ": NANNY}):
        env, unpinned = session_environment()
    assert unpinned == [] and env["OMP_NUM_THREADS"] == "1"


def test_the_probe_records_how_quiet_the_host_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGIMES_BACKENDS", "cpu")
    hygiene = probe()["environment"]["hygiene"]
    assert isinstance(hygiene["warnings"], list)
    assert hygiene["cpu_count"] >= 1 and "load_average" in hygiene
