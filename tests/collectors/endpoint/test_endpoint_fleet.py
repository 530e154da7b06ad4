"""An endpoint sweep through a Dask fleet: its workers send the requests, the client writes."""

from __future__ import annotations

import polars as pl
import pytest

import regimes
from collectors.spec import SweepSpec

pytest.importorskip("distributed")


def test_a_fleet_collects_an_endpoint_sweep_and_records_the_server(
    local_cluster, fake_server, endpoint_spec, tmp_path
):
    from collectors.fleet import run_fleet_sweep

    spec = SweepSpec.from_dict(endpoint_spec, check_available=False)
    result = run_fleet_sweep(spec, tmp_path / "run", local_cluster, progress=False)
    assert result.status == "complete" and result.measured_on_disk == 4
    run = regimes.read_run(tmp_path / "run")
    assert set(run.trials["backend"]) == {"endpoint"}
    assert run.steps.filter(~pl.col("warmup")).height == 2 * (4 + 8)
    assert run.meta["endpoint"]["identity"]["version"] == {"version": "1.0"}
    assert run.trials["host"][0] in run.meta["fleet"]["hosts"]


def test_a_server_gone_mid_fleet_charges_no_case(
    local_cluster, fake_server, endpoint_spec, tmp_path
):
    from collectors.fleet import run_fleet_sweep

    fake_server.behaviour.statuses = [503] * 50  # overloaded past the retries
    spec = SweepSpec.from_dict(endpoint_spec, check_available=False)
    result = run_fleet_sweep(spec, tmp_path / "run", local_cluster, progress=False)
    assert result.status != "complete"
    assert regimes.read_run(tmp_path / "run").errors.height == 0
    assert any("still answers HTTP 503" in m for m in result.messages)
