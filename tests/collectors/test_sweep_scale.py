"""Sweeps of millions of trials: planned lazily, counted, sliced with progress, estimated.

A spec of a few hundred thousand trials (the ``tiny-gpt2`` preset on the CPU) stands for
the millions a long sweep holds: planning is counted with counters (trials built,
failed-case look-ups), never timed, so the tests say what grows with the spec's size.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import regimes
from collectors import _estimate, _schedule, cli, sweep
from collectors._schedule import ScheduledTrial, generations_left, plan_session
from collectors._state import RunState
from collectors.spec import Case, SweepSpec
from collectors.sweep import run_sweep
from regimes.cli import main

BIG = {
    "models": ["tiny-gpt2"],
    "backends": ["cpu"],
    "use_cache": [True],
    "prompt_tokens": [2],
    "budgets": {"start": 1, "stop": 1000},
    "trials": 200,
    "warmup": 0,
    "sessions": 2,
    "isolation": "none",
}
"""400,000 measured trials: planned in full, each session took seconds."""

BIG_TOML = """models = ["tiny-gpt2"]
backends = ["cpu"]
use_cache = [true]
prompt_tokens = [2]
budgets = {start = 1, stop = 1000}
trials = 200
warmup = 0
sessions = 2
isolation = "none"
"""


def count_built(monkeypatch) -> list[int]:
    """Count every ScheduledTrial the schedule builds from now on."""
    built = [0]

    class Counted(ScheduledTrial):
        def __post_init__(self) -> None:
            built[0] += 1

    monkeypatch.setattr(_schedule, "ScheduledTrial", Counted)
    return built


def test_a_big_sweep_plans_lazily_and_counts_its_total(tmp_path, monkeypatch):
    totals: list[int] = []

    class Recording(sweep.Progress):
        def __init__(self, total: int, enabled: bool):
            totals.append(total)
            super().__init__(total, enabled)

    monkeypatch.setattr(sweep, "Progress", Recording)
    built = count_built(monkeypatch)
    spec = SweepSpec.from_dict(BIG)
    result = run_sweep(spec, tmp_path / "run", max_seconds=1e-9, progress=False)
    assert totals == [spec.total_trials()]  # counted, not planned
    assert result.status == "incomplete" and result.measured == 1
    assert built[0] < 100  # the one trial run, not the 400,000 of the plan


def test_the_failed_case_check_is_made_once_per_case(monkeypatch):
    spec = SweepSpec.from_dict({**BIG, "budgets": {"start": 1, "stop": 100}, "trials": 50})
    failed = spec.cases()[7]
    state = RunState(frozenset(), frozenset({(failed, 0)}), {}, 0, "r")
    looked_up = [0]
    base = Case.base

    def counted(case: Case) -> Case:
        looked_up[0] += 1
        return base.fget(case)  # type: ignore[attr-defined]

    monkeypatch.setattr(Case, "base", property(counted))
    plan = plan_session(spec, 0, state)
    assert len(plan) == (len(spec.cases()) - 1) * spec.trials
    assert failed not in {t.case for t in plan}
    assert looked_up[0] <= 2 * len(spec.cases())  # not once per trial (5,000 here)
    assert sum(generations_left(spec, 0, state).values()) == len(plan)


@pytest.mark.parametrize("policy, warmup", [("per-case", 2), ("max-first", 1), ("none", 0)])
def test_counted_generations_match_the_plan_after_a_partial_run(policy, warmup):
    spec = SweepSpec.from_dict(
        {**BIG, "budgets": [2, 3, 5], "trials": 3, "warmup": warmup, "warmup_policy": policy}
    )
    full = [t for t in _schedule.schedule(spec, 1) if not t.warmup]
    done = frozenset(t.key for t in full[:4]) | frozenset(t.key for t in full[-2:])
    state = RunState(done, frozenset({(spec.cases()[2], 1)}), {}, 0, "r")
    plan = plan_session(spec, 1, state)
    counted = generations_left(spec, 1, state)
    assert sum(counted.values()) == len(plan)
    assert counted == Counter(t.case for t in plan)


def test_every_slice_of_a_big_sweep_makes_progress(tmp_path, capsys):
    spec_path = tmp_path / "big.toml"
    spec_path.write_text(BIG_TOML)
    out = tmp_path / "run"
    on_disk = []
    for _ in range(3):
        argv = ["collect", str(spec_path), "-o", str(out), "-q", "--max-seconds", "0.001"]
        assert main(argv) == 3
        on_disk.append(regimes.load(out).filter(~pl.col("warmup")).height)
    assert on_disk == [1, 2, 3]  # before: planning outlasted the slice, 0 every time
    err = capsys.readouterr().err
    assert "collect: estimate: about" in err and "measured on the run's trials" in err


def test_the_deadline_counts_from_the_start_of_the_call(tmp_path, monkeypatch):
    seen: list[float | None] = []
    run_plans, run_meta = sweep._run_plans, sweep._run_meta

    def slow_meta(*args, **kwargs):
        time.sleep(0.3)  # reading the environment, the run, the plan: the call's own time
        return run_meta(*args, **kwargs)

    def recording(pending, writer, deadline, *rest):
        seen.append(deadline)
        return run_plans(pending, writer, deadline, *rest)

    monkeypatch.setattr(sweep, "_run_meta", slow_meta)
    monkeypatch.setattr(sweep, "_run_plans", recording)
    spec = SweepSpec.from_dict({**BIG, "budgets": [2], "trials": 1, "sessions": 1})
    started = time.time()
    run_sweep(spec, tmp_path / "run", max_seconds=0.2, progress=False, hygiene={})
    assert seen[0] is not None and seen[0] <= started + 0.2 + 0.05


def big_spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.toml"
    path.write_text(BIG_TOML)
    return path


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_sweep_is_refused_without_a_terminal_unless_yes(tmp_path, capsys, monkeypatch):
    spec = big_spec_file(tmp_path)
    out = tmp_path / "run"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["collect", str(spec), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if "error" in line]
    assert len(errors) == 1 and "--yes" in errors[0] and "may run about" in errors[0]
    assert any(line.startswith("collect: estimate: about") for line in err)
    assert not out.exists()
    # declined on a terminal: nothing created either
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert main(["collect", str(spec), "-o", str(out), "-q"]) == 2
    assert "start it? [y/N]" in capsys.readouterr().err and not out.exists()


def test_a_confirmed_or_bounded_long_sweep_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_estimate, "CONFIRM_ABOVE_S", 0.0)  # every sweep is long here
    spec = tmp_path / "small.toml"
    spec.write_text(BIG_TOML.replace("{start = 1, stop = 1000}", "[2]").replace("200", "1"))
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert main(["collect", str(spec), "-o", str(tmp_path / "asked"), "-q"]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["collect", str(spec), "-o", str(tmp_path / "yes"), "-q", "--yes"]) == 0
    assert "error" not in capsys.readouterr().err


def test_the_confirmation_threshold_is_one_number():
    assert cli._CONFIRM_HOURS * 3600 == _estimate.CONFIRM_ABOVE_S
