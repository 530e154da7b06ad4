"""Sweeps through a fake OpenAI-compatible server on loopback: data, faults, resume."""

from __future__ import annotations

import json

import polars as pl
import pytest

import regimes
from collectors.endpoint._client import EndpointError, ServerUnavailable
from collectors.spec import SpecError, SweepSpec
from collectors.sweep import collect_budgets, run_sweep


def _sweep(data, path, **kwargs):
    return run_sweep(SweepSpec.from_dict(data), path, **{"progress": False, **kwargs})


def _log(path, event):
    meta = json.loads((path / "meta.json").read_text())
    return [e for e in meta.get("endpoint_log", []) if e["event"] == event]


def test_a_sweep_through_an_endpoint_records_phases_steps_and_the_server(
    fake_server, endpoint_spec, tmp_path
):
    result = _sweep(endpoint_spec, tmp_path / "run")
    assert result.status == "complete" and result.measured_on_disk == 4
    run = regimes.read_run(tmp_path / "run")
    trials = run.trials
    assert set(trials["backend"]) == {"endpoint"} and set(trials["model"]) == {"fake"}
    assert trials.filter(pl.col("warmup")).height == 2
    assert (trials["new_tokens"] == trials["budget"]).all()
    assert trials["instrumented"].all() and trials["prefill_s"].is_not_null().all()
    assert (trials["prefill_s"] + trials["decode_s"] - trials["latency_s"]).abs().max() < 1e-9
    per_trial = run.steps.group_by("budget", "trial", "warmup").agg(
        pl.len(), pl.col("step_s").sum()
    )
    assert (per_trial["len"] == per_trial["budget"]).all()
    assert run.meta["endpoint"]["url"] == fake_server.url
    assert run.meta["endpoint"]["identity"]["version"] == {"version": "1.0"}
    assert _log(tmp_path / "run", "server")[0]["session"] == 0
    prompts = [b["prompt"] for _, path, b in fake_server.requests if path == "/v1/completions"]
    assert all(len(p.split()) == 6 for p in prompts)


def test_the_chat_api_calibrates_its_prompt_past_the_template(fake_server, endpoint_spec, tmp_path):
    endpoint_spec["endpoint"]["api"] = "chat"
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    bodies = [b for _, path, b in fake_server.requests if b.get("max_tokens", 0) > 1]
    assert {len(b["messages"][0]["content"].split()) for b in bodies} == {3}  # 6 - template
    assert set(regimes.load(tmp_path / "run")["engine"]) == {"chat"}


def test_a_short_generation_is_recorded_as_failed_and_never_analysed(
    fake_server, endpoint_spec, tmp_path
):
    fake_server.behaviour.stop_at = 5
    fake_server.behaviour.honour_ignore_eos = False
    result = _sweep(endpoint_spec, tmp_path / "run")
    run = regimes.read_run(tmp_path / "run")
    assert set(run.trials["budget"]) == {4}
    (error,) = run.errors.iter_rows(named=True)
    assert error["budget"] == 8 and error["error_type"] == "ShortGeneration"
    assert "generated 5 of 8 tokens" in error["error"] and "never analysed" in error["error"]
    assert result.errors == 1


def test_a_server_that_ignores_max_tokens_fails_the_cases(fake_server, endpoint_spec, tmp_path):
    fake_server.behaviour.extra_tokens = 2
    _sweep(endpoint_spec, tmp_path / "run")
    run = regimes.read_run(tmp_path / "run")
    assert run.trials.height == 0 and set(run.errors["error_type"]) == {"BudgetExceeded"}
    assert "ignores max_tokens" in run.errors["error"][0]


def test_a_refused_ignore_eos_is_said_once_and_recorded(fake_server, endpoint_spec, tmp_path):
    fake_server.behaviour.refuse = ("ignore_eos",)
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    assert len(_log(tmp_path / "run", "refused ignore_eos")) == 1


def test_a_server_that_does_not_stream_gives_end_to_end_trials_and_says_so(
    fake_server, endpoint_spec, tmp_path, capsys
):
    fake_server.behaviour.stream = False
    assert _sweep(endpoint_spec, tmp_path / "run", progress=True).status == "complete"
    said = [line for line in capsys.readouterr().err.splitlines() if "does not stream" in line]
    assert len(said) == 1 and said[0].startswith("collect: session 0: the server does not")
    run = regimes.read_run(tmp_path / "run")
    assert run.trials["prefill_s"].is_null().all() and not run.trials["instrumented"].any()
    assert run.steps.height == 0 and len(_log(tmp_path / "run", "not streaming")) == 1


def test_the_key_is_sent_and_never_stored(fake_server, endpoint_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SERVER_KEY", "sk-never-stored-4711")
    endpoint_spec["endpoint"]["api_key_env"] = "FAKE_SERVER_KEY"
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    stored = b"".join(p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert b"sk-never-stored" not in stored and b"FAKE_SERVER_KEY" in stored


def test_retries_of_429_and_503_are_recorded(fake_server, endpoint_spec, tmp_path):
    fake_server.behaviour.statuses = [429, 503]
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    assert [r["status"] for r in _log(tmp_path / "run", "retry")] == [429, 503]


def test_a_server_that_stays_overloaded_stops_the_sweep_keeping_every_trial(
    fake_server, endpoint_spec, tmp_path
):
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    fake_server.behaviour.statuses = [503] * 10
    with pytest.raises(ServerUnavailable, match="after 2 retries"):
        collect_budgets(tmp_path / "run", [6])
    assert regimes.load(tmp_path / "run").filter(~pl.col("warmup")).height == 4


def test_a_server_that_goes_down_mid_sweep_stops_it_and_a_rerun_resumes(endpoint_spec, tmp_path):
    from .conftest import FakeServer, LoopbackServer

    fake = FakeServer()
    first = LoopbackServer(fake.app)
    endpoint_spec["endpoint"]["url"] = first.url

    def stop_at(n: int) -> None:
        if n >= 8:
            # as a killed server: its connections close, the generation in flight is lost
            first.server.should_exit = first.server.force_exit = True

    fake.behaviour.on_generate = stop_at
    with first, pytest.raises(ServerUnavailable, match="cannot reach the server.*resume"):
        _sweep(endpoint_spec, tmp_path / "run")
    kept = regimes.load(tmp_path / "run").height
    assert 0 < kept < 6
    fake.behaviour.on_generate = None
    with LoopbackServer(fake.app, port=first.port):
        assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    trials = regimes.load(tmp_path / "run").filter(~pl.col("warmup"))
    assert trials.height == 4 and trials.select("budget", "trial").is_unique().all()
    assert regimes.read_run(tmp_path / "run").errors.height == 0


def test_a_server_that_is_down_refuses_to_start_and_creates_nothing(endpoint_spec, tmp_path):
    endpoint_spec["endpoint"]["url"] = "http://127.0.0.1:9/v1"
    with pytest.raises(ServerUnavailable, match="cannot reach the server.*resume"):
        _sweep(endpoint_spec, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_url_that_is_not_an_openai_api_is_refused(fake_server, endpoint_spec, tmp_path):
    fake_server.behaviour.models_status = 404
    with pytest.raises(EndpointError, match="not an OpenAI-compatible API"):
        _sweep(endpoint_spec, tmp_path / "run")


def test_a_restart_within_a_session_records_its_remaining_trials(
    fake_server, endpoint_spec, tmp_path
):
    endpoint_spec["sessions"] = 2
    endpoint_spec["budgets"] = [2, 3, 4]
    fake_server.behaviour.restart_after = 12
    result = _sweep(endpoint_spec, tmp_path / "run")
    run = regimes.read_run(tmp_path / "run")
    restarted = run.errors.filter(pl.col("error_type") == "ServerRestarted")
    assert restarted.height >= 1 and set(restarted["session"]) == {0}
    assert "restarted during session 0" in restarted["error"][0]
    assert run.trials.filter(pl.col("session") == 1, ~pl.col("warmup")).height == 6
    assert result.status == "complete"
    versions = [e["identity"]["version"]["version"] for e in _log(tmp_path / "run", "server")]
    assert versions == ["1.0", "1.0-restarted"]


def test_max_seconds_slices_and_a_rerun_resumes_without_duplicates(
    fake_server, endpoint_spec, tmp_path
):
    first = _sweep(endpoint_spec, tmp_path / "run", max_seconds=1e-6)
    assert first.status == "incomplete" and 0 < first.measured < 4
    assert _sweep(endpoint_spec, tmp_path / "run").status == "complete"
    trials = regimes.load(tmp_path / "run").filter(~pl.col("warmup"))
    assert trials.height == 4 and trials.select("budget", "trial").is_unique().all()


def test_refine_probes_new_budgets_through_the_same_endpoint(fake_server, endpoint_spec, tmp_path):
    _sweep(endpoint_spec, tmp_path / "run")
    more = collect_budgets(tmp_path / "run", [5, 6], sessions=1)
    assert more.status == "complete" and more.sessions == (1,)
    assert sorted(regimes.load(tmp_path / "run")["budget"].unique()) == [4, 5, 6, 8]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"backends": ["cpu"]}, "'backends' does not apply to an endpoint spec"),
        ({"dtypes": ["float16"]}, "'dtypes' does not apply.*the server decides it"),
        ({"endpoint": {"url": "http://u:p@h/v1", "model": "m"}}, "holds credentials"),
        ({"endpoint": {"url": "http://h/v1?key=1", "model": "m"}}, "query"),
        ({"endpoint": {"url": "h/v1", "model": "m"}}, "http\\(s\\) URL"),
        ({"endpoint": {"url": "http://h/v1", "model": "m", "api": "chats"}}, "did you mean 'chat'"),
        ({"endpoint": {"url": "http://h/v1", "model": "m", "key": "x"}}, "unknown key 'key'"),
        ({"endpoint": {"url": "http://h/v1", "model": "m", "api_key_env": "NOPE_X"}}, "NOPE_X"),
        ({"endpoint": {"url": "http://h/v1", "model": "m", "body": {"max_tokens": 3}}}, "sets"),
    ],
)
def test_bad_endpoint_specs_are_one_clear_line(endpoint_spec, change, message, monkeypatch):
    monkeypatch.delenv("NOPE_X", raising=False)
    with pytest.raises(SpecError, match=message) as info:
        SweepSpec.from_dict({**endpoint_spec, **change})
    assert "\n" not in str(info.value)


def test_the_collect_command_says_a_dead_server_in_one_line(endpoint_spec, tmp_path, capsys):
    from regimes.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text('endpoint = { url = "http://127.0.0.1:9/v1", model = "m" }\nbudgets = [4]\n')
    assert main(["collect", str(spec), "-o", str(tmp_path / "run"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("regimes collect: error: cannot reach the server")
