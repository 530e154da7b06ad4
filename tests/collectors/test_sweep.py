"""The sweep runner: schedule, resume planning, the written run, failures, isolation.

Runs use the ``tiny-gpt2`` preset (2 layers, 64 wide, random weights) on the CPU with
budgets of a few tokens, so each generation takes milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections import Counter

import polars as pl
import pytest

import regimes
from collectors import engines, models
from collectors._process import crash_error_rows
from collectors._session import DEADLINE, process_id
from collectors._signals import Interrupts
from collectors.spec import Case, SpecError, SweepSpec
from collectors.sweep import (
    RunState,
    ScheduledTrial,
    collect_budgets,
    plan_session,
    run_session,
    run_stored_session,
    run_sweep,
    schedule,
)
from regimes.data.io import TRIAL_KEY, RunWriter, read_run

TINY = {
    "models": ["tiny-gpt2"],
    "backends": ["cpu"],
    "use_cache": [True, False],
    "prompt_tokens": [4],
    "budgets": [2, 4, 6],
    "trials": 2,
    "warmup": 1,
    "sessions": 2,
}


def tiny(**changes) -> SweepSpec:
    return SweepSpec.from_dict({**TINY, **changes})


CASE_COLUMNS = list(TRIAL_KEY[: TRIAL_KEY.index("session")])


def new_run(spec: SweepSpec, path) -> None:
    """Create the run directory of ``spec`` with nothing measured (every sweep call measures)."""
    RunWriter(path, {"spec": spec.to_dict()})


def measured(df: pl.DataFrame) -> pl.DataFrame:
    return df.filter(~pl.col("warmup"))


def assert_complete_once(spec: SweepSpec, df: pl.DataFrame) -> None:
    """Every (case, session, trial) exactly once among the measured rows."""
    rows = measured(df)
    assert rows.select(TRIAL_KEY).is_duplicated().sum() == 0
    expected = {
        ScheduledTrial(case, session, trial, False).key[: len(TRIAL_KEY)]
        for case in spec.cases()
        for session in range(spec.sessions)
        for trial in range(spec.trials)
    }
    assert set(rows.select(TRIAL_KEY).iter_rows()) == expected


# -- schedule -------------------------------------------------------------------------


def test_schedule_is_interleaved_in_rounds_with_warmups_just_in_time():
    spec = tiny(models=["tiny-gpt2", "tiny-opt"], trials=3, warmup=2)
    order = schedule(spec, 0)
    assert len(order) == spec.trials_per_session()
    groups = [t.case.load_key for t in order]
    # each model is loaded once per session: its generations are contiguous
    changes = sum(1 for a, b in zip(groups[:-1], groups[1:], strict=True) if a != b)
    assert changes == len(spec.models) - 1
    per_group = len(spec.cases()) // len(spec.models)
    for start in range(0, len(order), per_group * (spec.warmup + spec.trials)):
        block = order[start : start + per_group * (spec.warmup + spec.trials)]
        measured_block = [t for t in block if not t.warmup]
        rounds = [
            measured_block[i : i + per_group] for i in range(0, len(measured_block), per_group)
        ]
        assert len(rounds) == spec.trials
        for r, chunk in enumerate(rounds):
            assert {t.trial for t in chunk} == {r}
            assert len({t.case for t in chunk}) == per_group  # every case once per round
        # each case's warm-ups sit right before its round-0 trial, not at the group's start
        for i, t in enumerate(block):
            if not t.warmup and t.trial == 0:
                before = block[i - spec.warmup : i]
                assert [(w.case, w.trial, w.warmup) for w in before] == [
                    (t.case, k, True) for k in range(spec.warmup)
                ]
        assert sum(t.warmup for t in block) == per_group * spec.warmup
        assert not block[per_group * spec.warmup - 1].warmup  # warm-ups are not all up front
    # the warm-up count does not change the measured order
    assert [t for t in order if not t.warmup] == [
        t for t in schedule(tiny(models=["tiny-gpt2", "tiny-opt"], trials=3, warmup=0), 0)
    ]


def test_schedule_is_shuffled_and_seeded():
    spec = tiny(trials=4)
    first = schedule(spec, 0)
    assert first == schedule(spec, 0)
    assert first != schedule(spec, 1)
    assert first != schedule(tiny(trials=4, seed=1), 0)
    rounds = [tuple(t.case for t in first if not t.warmup and t.trial == r) for r in range(4)]
    assert len(set(rounds)) > 1  # a fresh permutation per round
    assert any(r != tuple(spec.cases()) for r in rounds)


def test_plan_skips_done_and_renumbers_repeated_warmups():
    spec = tiny(warmup=2)
    full = schedule(spec, 0)
    first_case = spec.cases()[0]
    failed_case = spec.cases()[1]
    done = frozenset(t.key for t in full if not t.warmup and t.case == first_case)
    done |= {ScheduledTrial(spec.cases()[2], 0, 0, False).key}
    state = RunState(done, frozenset({(failed_case, 0)}), {(spec.cases()[2], 0): 2}, 10, "r")
    plan = plan_session(spec, 0, state)
    cases = {t.case for t in plan}
    assert first_case not in cases and failed_case not in cases
    assert not any(t.key in done for t in plan)
    warm = sorted(t.trial for t in plan if t.warmup and t.case == spec.cases()[2])
    assert warm == [2, 3]  # after the two warm-ups already stored
    assert [t.trial for t in plan if not t.warmup and t.case == spec.cases()[2]] == [1]
    # the repeated warm-ups come right before that case's first remaining trial
    at = plan.index(ScheduledTrial(spec.cases()[2], 0, 1, False))
    assert plan[at - 2 : at] == [ScheduledTrial(spec.cases()[2], 0, k, True) for k in (2, 3)]
    assert [t for t in plan if t.case == spec.cases()[3]] == [
        t for t in full if t.case == spec.cases()[3]
    ]
    # relative order of what is left is the original order
    positions = [full.index(t) for t in plan if not t.warmup]
    assert positions == sorted(positions)


# -- a whole sweep -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    spec = tiny()
    path = tmp_path_factory.mktemp("runs") / "tiny"
    result = run_sweep(spec, path, progress=False, command=["test"])
    return spec, path, result


def test_sweep_writes_the_trial_schema(tiny_run):
    spec, path, result = tiny_run
    assert result.status == "complete" and result.exit_code == 0
    df = regimes.load(path)
    assert df.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    assert (df["new_tokens"] == df["budget"]).all()
    assert df["latency_s"].min() > 0
    assert_complete_once(spec, df)
    assert result.measured == measured(df).height == spec.total_trials()
    assert df["order"].sort().to_list() == list(range(df.height))
    assert df.select(pl.col("process_id").n_unique()).item() == 1
    assert df["process_id"][0] == process_id()
    assert not df["instrumented"].any() and df["prefill_s"].is_null().all()
    assert df["rss_bytes"].min() > 0
    assert set(df["engine"]) == {"generate"} and set(df["device"]) == {models_device()}


def test_every_trial_records_its_host(tiny_run):
    _, path, _ = tiny_run
    df = regimes.load(path)
    assert df["host"].null_count() == 0 and set(df["host"]) == {socket.gethostname()}


def test_a_run_written_without_the_host_column_still_loads(tmp_path, tiny_run):
    _, path, _ = tiny_run
    old = regimes.load(path).drop("host")
    (tmp_path / "old" / "trials").mkdir(parents=True)
    old.write_parquet(tmp_path / "old" / "trials" / "part-0.parquet")  # as older versions wrote
    with pytest.warns(regimes.RegimesWarning, match="carry no checksum"):  # format 1
        df = regimes.load(tmp_path / "old")
    assert df.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    assert df.height == old.height and df["host"].is_null().all()


def models_device() -> str:
    from collectors.backends import get_backend

    return get_backend("cpu").device_name()


def assert_warmups_are_lazy(df: pl.DataFrame, warmup: int) -> None:
    """Per process and session: warm-ups only for cases measured there, ``warmup`` of them
    each, at the ``order`` positions immediately before the case's first measured trial."""
    by = ["process_id", "session", *CASE_COLUMNS]
    first = measured(df).group_by(by).agg(pl.col("order").min().alias("first"))
    warm = df.filter(pl.col("warmup")).group_by(by).agg(pl.col("order").sort().alias("orders"))
    both = first.join(warm, on=by, how="full", coalesce=True)
    assert both["first"].null_count() == 0, "a process warmed a case it never measured"
    if warmup == 0:
        assert warm.height == 0
        return
    assert both["orders"].null_count() == 0, "a process measured a case it never warmed"
    for first_order, orders in both.select("first", "orders").iter_rows():
        assert orders == list(range(first_order - warmup, first_order))


def test_warmups_are_flagged_and_come_just_before_each_case(tiny_run):
    spec, path, _ = tiny_run
    df = regimes.load(path)
    warm = df.filter(pl.col("warmup"))
    assert warm.height == len(spec.cases()) * spec.warmup * spec.sessions
    assert_warmups_are_lazy(df, spec.warmup)
    # lazily placed: measured trials of other cases run before the last warm-up of a session
    first_measured = measured(df).group_by("session").agg(pl.col("order").min().alias("first"))
    last_warm = warm.group_by("session").agg(pl.col("order").max().alias("last"))
    both = first_measured.join(last_warm, on="session")
    assert (both["last"] > both["first"]).all()


def test_finished_run_is_compacted_with_metadata(tiny_run):
    spec, path, _ = tiny_run
    assert len(list((path / "trials").glob("*.parquet"))) == 1
    meta = json.loads((path / "meta.json").read_text())
    assert SweepSpec.from_dict(meta["spec"]) == spec
    assert meta["command"] == ["test"]
    assert meta["environment"]["backends"]["cpu"]["available"] is True
    assert isinstance(meta["hygiene"]["warnings"], list) and "busy_processes" in meta["hygiene"]
    assert "PyTorch version" in meta["collect_env"]


def test_rerun_of_a_finished_run_does_nothing(tiny_run):
    spec, path, _ = tiny_run
    again = run_sweep(spec, path, progress=False)
    assert again.status == "complete" and again.measured == again.warmups == 0
    assert measured(regimes.load(path)).height == spec.total_trials()


def test_different_spec_or_foreign_directory_is_refused(tiny_run, tmp_path):
    spec, path, _ = tiny_run
    with pytest.raises(SpecError, match=r"different spec \(trials: 2 there, 3 now\)"):
        run_sweep(tiny(trials=3), path, progress=False)
    (tmp_path / "notes.txt").write_text("not a run")
    with pytest.raises(SpecError, match="exists and is not a run directory"):
        run_sweep(spec, tmp_path, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]  # refused before writing anything


def test_instrumented_run_fills_the_steps_table(tmp_path):
    spec = tiny(instrument=True, sessions=1, trials=1, budgets=[3, 5])
    run_sweep(spec, tmp_path / "run", progress=False)
    run = read_run(tmp_path / "run")
    trials, steps = run.trials, run.steps
    assert trials["instrumented"].all() and trials["prefill_s"].is_not_null().all()
    per_trial = steps.group_by(["budget", "use_cache", "trial", "warmup"]).agg(
        pl.len().alias("n"),
        pl.col("step").min().alias("first"),
        pl.col("step_s").sum().alias("total"),
    )
    joined = per_trial.join(trials, on=["budget", "use_cache", "trial", "warmup"])
    assert joined.height == trials.height
    assert (joined["n"] == joined["budget"]).all() and (joined["first"] == 0).all()
    assert ((joined["total"] - joined["latency_s"]).abs() < 1e-6).all()
    prefill = steps.filter(pl.col("step") == 0).join(
        trials, on=["budget", "use_cache", "trial", "warmup"]
    )
    assert ((prefill["step_s"] - prefill["prefill_s"]).abs() < 1e-9).all()


def test_the_steps_of_two_attention_implementations_can_be_told_apart(tmp_path):
    spec = tiny(
        instrument=True,
        sessions=1,
        trials=1,
        budgets=[3],
        attn_implementation=["eager", "sdpa"],
        sdpa_backends=["math"],
    )
    run_sweep(spec, tmp_path / "run", progress=False)
    run = read_run(tmp_path / "run")
    keys = ["budget", "use_cache", "trial", "warmup", "attn_implementation", "sdpa_backends"]
    assert set(run.steps["attn_implementation"]) == {"eager", "sdpa"}
    assert set(run.steps["sdpa_backends"]) == {"math"}
    per_trial = run.steps.group_by(keys).agg(pl.len().alias("n"))
    joined = per_trial.join(run.trials, on=keys)
    assert joined.height == run.trials.height and (joined["n"] == joined["budget"]).all()


def test_a_failing_case_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real = engines.run_generation
    calls = Counter()

    def flaky(loaded, backend, input_ids, *, budget, use_cache, **kwargs):
        calls[(budget, use_cache)] += 1
        if budget == 4 and not use_cache:
            raise RuntimeError("out of memory (synthetic failure injected by the test)")
        return real(loaded, backend, input_ids, budget=budget, use_cache=use_cache, **kwargs)

    monkeypatch.setattr(engines, "run_generation", flaky)
    spec = tiny()
    result = run_sweep(spec, tmp_path / "run", progress=False)
    assert result.status == "complete" and result.errors == 2
    run = read_run(tmp_path / "run")
    assert run.errors.height == spec.sessions
    assert set(run.errors["session"]) == {0, 1}
    assert set(run.errors["error_type"]) == {"RuntimeError"}
    assert run.errors["traceback"].str.contains("synthetic failure").all()
    assert calls[(4, False)] == spec.sessions  # tried once per session, then skipped
    failing = (pl.col("budget") == 4) & ~pl.col("use_cache")
    assert run.trials.filter(failing).height == 0
    assert (
        measured(run.trials.filter(~failing)).height
        == spec.total_trials() - spec.trials * spec.sessions
    )
    # a resume does not retry a case that failed
    again = run_sweep(spec, tmp_path / "run", progress=False)
    assert again.measured == 0 and again.errors == 0 and calls[(4, False)] == spec.sessions


def test_a_model_that_fails_to_load_fails_only_its_cases(tmp_path, monkeypatch):
    real = models.load_model

    def picky(name, **kwargs):
        if name == "tiny-opt":
            raise MemoryError("synthetic load failure")
        return real(name, **kwargs)

    monkeypatch.setattr(models, "load_model", picky)
    spec = tiny(models=["tiny-gpt2", "tiny-opt"], sessions=1)
    result = run_sweep(spec, tmp_path / "run", progress=False)
    run = read_run(tmp_path / "run")
    assert set(run.errors["model"]) == {"tiny-opt"}
    assert run.errors.height == len(spec.cases()) // 2 == result.errors
    assert set(run.trials["model"]) == {"tiny-gpt2"}


def test_stopping_midway_then_resuming_completes_without_duplicates(tmp_path):
    spec = tiny(warmup=1)
    path = tmp_path / "run"
    new_run(spec, path)
    writer = RunWriter(path, None)
    asked = iter(range(1000))
    outcome = run_session(
        spec, writer, 0, should_stop=lambda: "deadline" if next(asked) >= 8 else None
    )
    assert outcome.stopped == "deadline" and 0 < outcome.measured < spec.total_trials() // 2
    parts = list((path / "trials").glob("*.parquet"))
    assert len(parts) == outcome.measured + outcome.warmups  # one atomic part per generation
    result = run_sweep(spec, path, progress=False)
    assert result.status == "complete"
    df = regimes.load(path)
    assert_complete_once(spec, df)
    assert result.measured == spec.total_trials() - outcome.measured
    assert df.select(TRIAL_KEY).is_duplicated().sum() == 0  # repeated warm-ups got new numbers
    # the stopped slice warmed only what it measured; the resume re-warmed what it reached
    warm0 = df.filter(pl.col("warmup") & (pl.col("session") == 0)).height
    assert warm0 == outcome.warmups + len(spec.cases())
    assert outcome.warmups == len(
        set(
            measured(df.filter(pl.col("order") < outcome.measured + outcome.warmups))
            .select(CASE_COLUMNS)
            .iter_rows()
        )
    )
    assert df["order"].n_unique() == df.height


def test_sliced_sweep_warms_only_the_cases_each_slice_measures(tmp_path, monkeypatch):
    """Slices end on a counted deadline (a controllable clock); each slice stands for a
    fresh process, as with ``--max-seconds`` reruns, so it gets its own process id."""
    from collectors import _session

    spec = tiny(warmup=2, trials=2, sessions=2, budgets=[2, 4])
    path = tmp_path / "run"
    new_run(spec, path)
    writer = RunWriter(path, None)
    slices = 0
    stopped_mid_warmup = 0
    for session in range(spec.sessions):
        while plan_session(spec, session, RunState.read(writer)):
            slices += 1
            monkeypatch.setattr(_session, "process_id", lambda slice_id=slices: f"slice-{slice_id}")
            asks = iter(range(10_000))
            # The 1st question comes before the model load; the deadline then passes
            # after the first warm-up of the slice's second case.
            outcome = run_session(
                spec,
                writer,
                session,
                should_stop=lambda asks=asks: DEADLINE if next(asks) >= 5 else None,
            )
            stopped_mid_warmup += outcome.warmups % spec.warmup != 0
            assert outcome.measured > 0  # a slice always gets through a warmed case
            assert outcome.warmups == spec.warmup * len(
                {
                    t
                    for t in measured(regimes.load(path))
                    .filter(pl.col("process_id") == f"slice-{slices}")
                    .select(CASE_COLUMNS)
                    .iter_rows()
                }
            )
    assert slices > spec.sessions and stopped_mid_warmup == 0
    df = regimes.load(path)
    assert_complete_once(spec, df)
    assert_warmups_are_lazy(df, spec.warmup)
    assert df.select(TRIAL_KEY).is_duplicated().sum() == 0
    assert df["order"].sort().to_list() == list(range(df.height))


def test_progress_total_of_a_resume_is_what_it_then_runs(tmp_path, monkeypatch):
    from collectors import sweep

    totals = []

    class Recording(sweep.Progress):
        def __init__(self, total: int, enabled: bool):
            totals.append(total)
            super().__init__(total, enabled)

    monkeypatch.setattr(sweep, "Progress", Recording)
    spec = tiny(warmup=2, sessions=1)
    path = tmp_path / "run"
    new_run(spec, path)
    asks = iter(range(100))
    first = run_session(
        spec,
        RunWriter(path, None),
        0,
        should_stop=lambda asks=asks: DEADLINE if next(asks) >= 5 else None,
    )
    assert first.measured == 2 and first.warmups == 4
    result = run_sweep(spec, path, progress=False)
    # every case has a trial left, so each is warmed again once; nothing else is counted
    assert totals[-1] == spec.total_trials() - first.measured + spec.warmup * len(spec.cases())
    assert totals[-1] == result.measured + result.warmups
    run_sweep(spec, tmp_path / "fresh", max_seconds=1e-9, progress=False)
    assert totals[-1] == spec.total_trials(include_warmup=True)


def test_an_orphaned_session_does_not_wait_for_a_warmed_case(tmp_path):
    spec = tiny(warmup=2, sessions=1)
    path = tmp_path / "run"
    new_run(spec, path)
    asks = iter(range(100))
    outcome = run_session(
        spec, RunWriter(path, None), 0, should_stop=lambda: "orphaned" if next(asks) >= 2 else None
    )
    assert outcome.stopped == "orphaned" and (outcome.warmups, outcome.measured) == (1, 0)


def test_process_isolation_gives_each_session_its_own_process(tmp_path):
    spec = tiny(isolation="process", sessions=2, trials=1, warmup=0, budgets=[2], use_cache=[True])
    result = run_sweep(spec, tmp_path / "run", progress=False)
    assert result.status == "complete", result.summary()
    assert result.measured == spec.total_trials()
    df = regimes.load(tmp_path / "run")
    ids = df.group_by("session").agg(pl.col("process_id").unique())
    assert ids["process_id"].list.len().to_list() == [1, 1]
    assert df["process_id"].n_unique() == 2 and process_id() not in set(df["process_id"])


def test_a_crashed_session_process_is_charged_to_its_case():
    spec = tiny(sessions=1)
    case = spec.cases()[3]
    start = {"event": "start", "session": 0, "case": case.__dict__, "trial": 0, "warmup": False}
    rows = crash_error_rows("r", spec, 0, start, -signal.SIGKILL)
    assert (
        len(rows) == 1
        and rows[0]["budget"] == case.budget
        and rows[0]["error_type"] == "WorkerCrash"
    )
    assert "SIGKILL" in rows[0]["error"]
    load = {
        "event": "load",
        "session": 0,
        "model": "tiny-gpt2",
        "backend": "cpu",
        "dtype": "float32",
    }
    assert len(crash_error_rows("r", spec, 0, load, 1)) == len(spec.cases())
    assert crash_error_rows("r", spec, 0, None, 1) == []


def test_signals_wait_for_the_part_being_written():
    before = signal.getsignal(signal.SIGTERM)
    guard = Interrupts()
    written = []
    with guard, pytest.raises(KeyboardInterrupt):
        with guard.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            written.append("part")  # still runs: the signal is held until the write ends
        written.append("never")
    assert written == ["part"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_interrupted_compaction_leaves_readable_duplicates(tmp_path, tiny_run):
    _, path, _ = tiny_run
    df = regimes.load(path)
    writer = RunWriter(tmp_path / "copy", {"spec": {}})
    writer.write_trials(df.head(5))
    writer.write_trials(df.slice(5))
    writer.write_trials(df)  # a merged part whose sources were not yet deleted
    assert regimes.load(tmp_path / "copy").height == df.height
    writer.compact()
    assert len(list((tmp_path / "copy" / "trials").glob("*.parquet"))) == 1
    assert regimes.load(tmp_path / "copy").equals(df)


def test_case_labels_are_readable():
    case = Case("tiny-gpt2", "cpu", "float32", False, 4, 6)
    assert case.label() == "tiny-gpt2/cpu/float32/no-cache/prompt=4/budget=6"


# -- fault injection -------------------------------------------------------------------


def test_an_injected_run_is_marked_synthetic_in_meta_and_every_trial(tmp_path, monkeypatch):
    asked = []
    real = engines.run_generation

    def spy(loaded, backend, input_ids, *, budget, slowdown=1.0, **kwargs):
        asked.append((budget, slowdown))
        return real(loaded, backend, input_ids, budget=budget, slowdown=slowdown, **kwargs)

    monkeypatch.setattr(engines, "run_generation", spy)
    spec = tiny(sessions=1, inject={"start": 3, "stop": 4, "factor": 2.5})
    run_sweep(spec, tmp_path / "run", progress=False)
    run = read_run(tmp_path / "run")
    assert run.meta["synthetic"] is True
    assert run.meta["inject"] == {"start": 3, "stop": 4, "factor": 2.5}
    factors = dict(run.trials.select("budget", "injected_factor").unique().iter_rows())
    assert factors == {2: 1.0, 4: 2.5, 6: 1.0}
    assert {budget: slowdown for budget, slowdown in asked} == factors  # warm-ups too


def test_a_run_without_injection_has_no_injected_factor(tiny_run):
    _, path, _ = tiny_run
    run = read_run(path)
    assert run.trials["injected_factor"].is_null().all() and "synthetic" not in run.meta


# -- collect_budgets: more budgets in fresh sessions of the same run ---------------------


def test_collect_budgets_appends_fresh_sessions_of_the_same_spec(tmp_path):
    spec = tiny(sessions=2, inject={"start": 5, "stop": 5, "factor": 2.0})
    path = tmp_path / "run"
    run_sweep(spec, path, progress=False)
    before = regimes.load(path)
    result = collect_budgets(path, [3, 5], sessions=2, trials=1)
    assert result.status == "complete" and result.sessions == (2, 3)
    assert result.batch == "batch-0" and result.measured == 2 * 2 * 2 * 1
    df = regimes.load(path)
    new = df.filter(pl.col("session") >= 2)
    assert df.filter(pl.col("session") < 2).sort("order").equals(before.sort("order"))
    assert set(new["budget"]) == {3, 5} and set(new["use_cache"]) == {True, False}
    assert (
        measured(new).group_by("session", "budget", "use_cache").len()["len"].to_list() == [1] * 8
    )
    assert dict(new.select("budget", "injected_factor").unique().iter_rows()) == {3: 1.0, 5: 2.0}
    assert df.select(TRIAL_KEY).is_duplicated().sum() == 0
    assert df["order"].sort().to_list() == list(range(df.height))
    assert new["process_id"].n_unique() == 1 and new["run_id"][0] == before["run_id"][0]
    meta = read_run(path).meta
    assert meta["batches"][0]["sessions"] == [2, 3]
    assert meta["batches"][0]["overrides"] == {"budgets": [3, 5], "trials": 1}
    assert result.measured_on_disk == result.measured_expected == spec.total_trials() + 8
    # a finished batch is not resumed: the same call again takes new sessions
    again = collect_budgets(path, [3, 5], sessions=2, trials=1)
    assert again.sessions == (4, 5) and again.batch == "batch-1"


def test_an_interrupted_batch_resumes_with_the_same_sessions(tmp_path):
    spec = tiny(sessions=1, warmup=1)
    path = tmp_path / "run"
    run_sweep(spec, path, progress=False)
    stopped = collect_budgets(path, [3], sessions=2, max_seconds=1e-9)
    assert stopped.status == "incomplete" and stopped.measured == 1  # a slice always measures
    writer = RunWriter(path, None)
    asks = iter(range(100))
    partial = run_stored_session(
        path, 1, should_stop=lambda: "deadline" if next(asks) >= 3 else None
    )
    assert partial.measured == 1
    resumed = collect_budgets(path, [3], sessions=2)
    assert resumed.status == "complete" and resumed.sessions == stopped.sessions == (1, 2)
    assert resumed.measured == 2 * 2 * spec.trials - 1 - stopped.measured
    df = regimes.load(path)
    assert df.select(TRIAL_KEY).is_duplicated().sum() == 0
    assert len(RunState.read(writer).sessions) == 3
    assert [b["batch"] for b in read_run(path).meta["batches"]] == ["batch-0"]


def test_a_named_batch_resumes_and_must_keep_its_settings(tmp_path):
    path = tmp_path / "run"
    run_sweep(tiny(sessions=1), path, progress=False)
    first = collect_budgets(path, [3], batch="probe-3")
    assert collect_budgets(path, [3], batch="probe-3").sessions == first.sessions
    with pytest.raises(SpecError, match="batch 'probe-3' was recorded with"):
        collect_budgets(path, [5], batch="probe-3")


def test_collect_budgets_checks_budgets_against_the_spec(tmp_path):
    path = tmp_path / "run"
    run_sweep(tiny(sessions=1), path, progress=False)
    with pytest.raises(SpecError, match="'budgets' must be positive"):
        collect_budgets(path, [0])
    with pytest.raises(SpecError, match="exceeds tiny-gpt2's 2048 positions"):
        collect_budgets(path, [4000])
    with pytest.raises(SpecError, match="sessions must be a positive integer"):
        collect_budgets(path, [3], sessions=0)
    with pytest.raises(SpecError, match="not a run directory"):
        collect_budgets(tmp_path / "nothing", [3])
    assert "batches" not in read_run(path).meta


def test_a_batch_in_fresh_processes_runs_the_batch_spec(tmp_path):
    path = tmp_path / "run"
    run_sweep(tiny(sessions=1, trials=1, use_cache=[True], budgets=[2]), path, progress=False)
    result = collect_budgets(path, [3, 4], isolation="process", warmup=0)
    assert result.status == "complete", result.summary()
    new = regimes.load(path).filter(pl.col("session") == 1)
    assert sorted(new["budget"]) == [3, 4] and not new["warmup"].any()
    assert new["process_id"].n_unique() == 1 and process_id() not in set(new["process_id"])
    with pytest.raises(SpecError, match="has no session 7"):
        run_stored_session(path, 7)


# -- attention implementation, SDPA kernels, warm-up policy -----------------------------


def test_attention_settings_are_a_grid_and_recorded_per_trial(tmp_path, monkeypatch):
    from collectors._attention import enabled_sdpa_backends

    seen = set()
    real = engines.run_generation

    def spy(loaded, *args, **kwargs):
        seen.add((loaded.attn_implementation, enabled_sdpa_backends()))
        return real(loaded, *args, **kwargs)

    monkeypatch.setattr(engines, "run_generation", spy)
    before = enabled_sdpa_backends()
    spec = tiny(sessions=1, attn_implementation=["eager", "sdpa"], sdpa_backends=["math"])
    assert len(spec.cases()) == 2 * len(tiny().cases())
    result = run_sweep(spec, tmp_path / "run", progress=False)
    assert result.status == "complete" and result.measured == spec.total_trials()
    df = regimes.load(tmp_path / "run")
    assert seen == {("eager", ("math",)), ("sdpa", ("math",))}
    assert enabled_sdpa_backends() == before  # restored after each generation
    assert set(df["sdpa_backends"]) == {"math"}
    per_attn = measured(df).group_by("attn_implementation").len().sort("attn_implementation")
    assert per_attn.rows() == [("eager", 12), ("sdpa", 12)]
    keyed = measured(df).select([*TRIAL_KEY, "attn_implementation"])
    assert keyed.is_duplicated().sum() == 0


def test_default_attention_records_what_ran_and_resumes(tmp_path):
    from collectors._attention import enabled_sdpa_backends

    spec = tiny(sessions=1)
    path = tmp_path / "run"
    new_run(spec, path)
    asks = iter(range(100))
    run_session(spec, RunWriter(path, None), 0, should_stop=lambda: "x" if next(asks) > 4 else None)
    run_sweep(spec, path, progress=False)
    df = regimes.load(path)
    assert_complete_once(spec, df)
    assert set(df["attn_implementation"]) == {"sdpa"}  # transformers' default here
    assert set(df["sdpa_backends"]) == {",".join(enabled_sdpa_backends())}


def first_measured_order(df: pl.DataFrame) -> dict[int, int]:
    return dict(measured(df).group_by("session").agg(pl.col("order").min()).iter_rows())


@pytest.mark.parametrize("policy", ["per-case", "none", "max-first"])
def test_warmup_policies_put_their_warmups_in_the_trial_table(tmp_path, policy):
    spec = tiny(warmup_policy=policy, warmup=0 if policy == "none" else 2, budgets=[2, 6, 4])
    result = run_sweep(spec, tmp_path / "run", progress=False)
    assert result.status == "complete"
    df = regimes.load(tmp_path / "run")
    assert_complete_once(spec, df)
    warm = df.filter(pl.col("warmup"))
    assert warm.height == spec.warmups_per_session() * spec.sessions == result.warmups
    assert df.select("session", "process_id", "order").null_count().sum_horizontal().item() == 0
    if policy == "none":
        assert warm.height == 0
    elif policy == "max-first":
        # two warm-ups per session at the largest budget, before anything is measured
        assert warm.height == 2 * spec.sessions and set(warm["budget"]) == {6}
        last_warm = dict(warm.group_by("session").agg(pl.col("order").max()).iter_rows())
        first = first_measured_order(df)
        assert all(last_warm[s] < first[s] for s in first)
        assert warm.group_by("session").agg(pl.col("trial").sort())["trial"].to_list() == [
            [0, 1],
            [0, 1],
        ]
    else:
        assert_warmups_are_lazy(df, 2)


def test_max_first_rewarms_a_resumed_session_at_its_largest_budget(tmp_path):
    spec = tiny(sessions=1, warmup_policy="max-first", warmup=1)
    path = tmp_path / "run"
    new_run(spec, path)
    asks = iter(range(100))
    first = run_session(
        spec, RunWriter(path, None), 0, should_stop=lambda: "x" if next(asks) > 3 else None
    )
    assert (first.warmups, first.measured) == (1, 2)
    run_sweep(spec, path, progress=False)
    df = regimes.load(path)
    assert_complete_once(spec, df)
    warm = df.filter(pl.col("warmup")).sort("order")
    assert warm["budget"].to_list() == [6, 6] and warm["trial"].to_list() == [0, 1]
    assert df.select(TRIAL_KEY).is_duplicated().sum() == 0
