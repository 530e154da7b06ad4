"""Profiled generations (spec key ``profile``) and the attention slowdown (``slow_attention``).

The sweep here is real: tiny-gpt2 with random weights on this CPU; its data are
synthetic (the attention is slowed on purpose).
"""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest
import torch

import regimes
from collectors._progress import Progress
from collectors._schedule import generations_left, iter_measured, plan_session
from collectors._session import run_session
from collectors._state import RunState
from collectors.profiling import operator_rows, profiled, slowed_attention
from collectors.spec import Profile, SlowAttention, SpecError, SweepSpec
from collectors.sweep import run_sweep
from regimes.data.io import RunWriter

BASE = {"models": ["tiny-gpt2"], "backends": ["cpu"], "budgets": [8, 12, 16]}


def _spec(**extra):
    return SweepSpec.from_dict({**BASE, "trials": 2, "warmup": 0, **extra})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"budgets": [8]}, "lacks"),
        ({"budgets": [], "trials": 1}, "non-empty"),
        ({"budgets": [8, 8], "trials": 1}, "repeats"),
        ({"budgets": [8], "trials": 0}, "profile.trials"),
        ({"budgets": [8], "trials": 1, "trails": 2}, "did you mean 'trials'"),
        ([8], "must be a table"),
    ],
)
def test_a_bad_profile_fails_naming_the_key(value, message):
    with pytest.raises(SpecError, match=message):
        _spec(profile=value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"start": 8, "stop": 12, "factor": 1}, "slow_attention.factor"),
        ({"start": 8, "stop": 12, "factor": 2.5}, "slow_attention.factor"),
        ({"start": 12, "stop": 8, "factor": 2}, "slow_attention.stop"),
    ],
)
def test_a_bad_slow_attention_fails_naming_the_key(value, message):
    with pytest.raises(SpecError, match=message):
        _spec(slow_attention=value)


def test_profiled_budgets_outside_the_grid_are_refused(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(
        'models = ["tiny-gpt2"]\nbackends = ["cpu"]\nbudgets = [8, 12]\n'
        "profile = { budgets = [8, 20], trials = 1 }\n"
    )
    with pytest.raises(SpecError, match=r"\[20\] are not budgets of the grid"):
        SweepSpec.from_toml(path)


def test_the_spec_round_trips_through_its_dict():
    spec = _spec(
        profile={"budgets": [12, 8], "trials": 2},
        slow_attention={"start": 12, "stop": 16, "factor": 3},
    )
    assert spec.profile == Profile((8, 12), 2)
    assert spec.slow_attention == SlowAttention(12, 16, 3)
    assert SweepSpec.from_dict(spec.to_dict()) == spec


def test_profiled_generations_follow_the_measured_ones_and_leave_their_order_alone():
    plain = _spec()
    spec = _spec(profile={"budgets": [8, 16], "trials": 2})
    empty = RunState(frozenset(), frozenset(), {}, 0, "synthetic-run")
    plan = plan_session(spec, 0, empty)
    measured = [t for t in plan if not t.profiled]
    assert measured == list(iter_measured(plain, 0))
    profiled_items = [t for t in plan if t.profiled]
    assert plan[-len(profiled_items) :] == profiled_items
    assert sorted((t.case.budget, t.trial) for t in profiled_items) == [
        (8, 0),
        (8, 1),
        (16, 0),
        (16, 1),
    ]


def test_profile_first_runs_the_profiled_generations_before_the_measured_ones():
    plain = _spec()
    spec = _spec(profile={"budgets": [8, 16], "trials": 2, "first": True})
    assert spec.profile == Profile((8, 16), 2, first=True)
    assert spec.to_dict()["profile"] == {"budgets": [8, 16], "trials": 2, "first": True}
    assert _spec(profile={"budgets": [8], "trials": 1}).to_dict()["profile"] == {
        "budgets": [8],
        "trials": 1,
    }
    empty = RunState(frozenset(), frozenset(), {}, 0, "synthetic-run")
    plan = plan_session(spec, 0, empty)
    assert [t.profiled for t in plan] == [True] * 4 + [False] * 6
    assert [t for t in plan if not t.profiled] == list(iter_measured(plain, 0))
    after = plan_session(_spec(profile={"budgets": [8, 16], "trials": 2}), 0, empty)
    assert [t for t in plan if t.profiled] == [t for t in after if t.profiled]


def test_profile_first_must_be_a_boolean():
    with pytest.raises(SpecError, match="'profile.first' must be true or false"):
        _spec(profile={"budgets": [8], "trials": 1, "first": "yes"})


def _event(name, kind, *, id=0, linked=0, parent=None, host=0.0, device=0.0):
    return SimpleNamespace(
        name=name,
        device_type=f"DeviceType.{kind}",
        id=id,
        linked_correlation_id=linked,
        cpu_parent=parent,
        self_cpu_time_total=host,
        self_device_time_total=device,
    )


def test_kernels_are_scoped_to_the_operator_that_launched_them_and_counted_once():
    # a CUDA profile as Kineto gives it: the attention operator (id 7) calls the cuDNN
    # operator (id 8), which launches a kernel linked to it by correlation id; the
    # host operators' own device time repeats the kernel's.
    sdpa = _event("aten::scaled_dot_product_attention", "CPU", id=7, host=20.0, device=0.0)
    cudnn = _event(
        "aten::_scaled_dot_product_cudnn_attention", "CPU", id=8, parent=sdpa, host=900.0
    )
    cudnn.self_device_time_total = 30.0
    kernel = _event("cudnn_generated_fort_native_sdpa", "CUDA", linked=8, device=30.0)
    stray = _event("Memcpy HtoD", "CUDA", linked=99, device=5.0)
    rows = {
        (r["scope"], r["operator"]): r
        for r in operator_rows([sdpa, cudnn, kernel, stray], device_times=True)
    }
    k = rows[("aten::scaled_dot_product_attention", "cudnn_generated_fort_native_sdpa")]
    assert (k["device_type"], k["self_device_s"], k["self_host_s"]) == ("cuda", 30e-6, 0.0)
    host = rows[("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention")]
    assert (host["self_host_s"], host["self_device_s"]) == (900e-6, 0.0)
    assert rows[("Memcpy HtoD", "Memcpy HtoD")]["self_device_s"] == 5e-6  # no operator linked
    assert sum(r["self_device_s"] for r in rows.values()) == pytest.approx(35e-6)
    no_device = operator_rows([sdpa, cudnn], device_times=False)
    assert all(r["self_device_s"] is None for r in no_device)


def test_the_profilers_own_events_are_no_operators_scope():
    # a CUPTI buffer request overlapping the model's operators, as on a real H200 profile
    request = _event("Activity Buffer Request", "CPU", id=1, host=350.0)
    sdpa = _event("aten::scaled_dot_product_attention", "CPU", id=7, parent=request, host=20.0)
    cudnn = _event("aten::_cudnn_attention_forward", "CPU", id=8, parent=sdpa, host=400.0)
    launch = _event("cuLaunchKernelEx", "CPU", id=40, linked=8, parent=cudnn, host=5.0)
    kernel = _event("cudnn_generated_fort_native_sdpa", "CUDA", id=40, linked=8, device=30.0)
    rows = operator_rows([request, sdpa, cudnn, launch, kernel], device_times=True)
    scopes = {r["operator"]: r["scope"] for r in rows}
    assert scopes == {
        "Activity Buffer Request": "Activity Buffer Request",  # its own row, its own cost
        "aten::scaled_dot_product_attention": "aten::scaled_dot_product_attention",
        "aten::_cudnn_attention_forward": "aten::scaled_dot_product_attention",
        "cuLaunchKernelEx": "aten::scaled_dot_product_attention",
        "cudnn_generated_fort_native_sdpa": "aten::scaled_dot_product_attention",
    }


def test_slowed_attention_repeats_the_call_and_keeps_its_result():
    q = torch.randn(1, 2, 5, 8)
    expected = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    _, rows = profiled(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q), "cpu")
    with slowed_attention(3):
        out, slowed = profiled(
            lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q), "cpu"
        )
    assert torch.equal(out, expected)

    def calls(table):
        return sum(
            r["calls"] for r in table if r["operator"] == "aten::scaled_dot_product_attention"
        )

    assert calls(slowed) == 3 * calls(rows)
    assert torch.nn.functional.scaled_dot_product_attention is not None
    assert all(r["self_device_s"] is None for r in rows)  # the CPU reports no device times


def test_a_profiled_sweep_writes_ops_apart_from_trials_and_resumes(tmp_path):
    spec = _spec(
        attn_implementation="sdpa",
        profile={"budgets": [8, 16], "trials": 1},
        slow_attention={"start": 16, "stop": 16, "factor": 2},
    )
    path = tmp_path / "run"
    run_sweep(spec, path, progress=False, command=["test"])
    run = regimes.read_run(path)
    assert run.trials.height == 6  # 3 budgets x 2 trials: no profiled row among them
    ops = regimes.load(path, table="ops")
    assert ops.select("budget", "trial").unique().sort("budget").rows() == [(8, 0), (16, 0)]
    assert set(ops.get_column("run_id")) == {RunWriter(path, None).run_id}
    assert run.meta["synthetic"] and run.meta["slow_attention"]["factor"] == 2
    calls = ops.filter(pl.col("operator") == "aten::scaled_dot_product_attention")
    per_budget = dict(calls.group_by("budget").agg(pl.col("calls").sum()).rows())
    assert per_budget[16] == 2 * 2 * 16  # two layers, 16 steps, computed twice
    run_sweep(spec, path, progress=False, command=["test"])  # resumed: nothing repeats
    assert regimes.load(path, table="ops").height == ops.height


def test_slow_attention_refuses_a_model_without_sdpa(tmp_path):
    spec = _spec(attn_implementation="eager", slow_attention={"start": 8, "stop": 8, "factor": 2})
    run_sweep(spec, tmp_path / "run", progress=False, command=["test"])
    errors = regimes.read_run(tmp_path / "run").errors
    assert "attn_implementation = 'sdpa'" in errors.get_column("error")[0]


def test_on_a_real_cpu_sweep_the_attention_carries_the_excess(tmp_path):
    spec = SweepSpec.from_dict(
        {
            **BASE,
            "budgets": list(range(8, 44, 4)),
            "prompt_tokens": [1024],
            "trials": 1,
            "warmup": 1,
            "engine": "loop",
            "attn_implementation": "sdpa",
            # five profiled generations a budget: the attribution reads each operator's
            # median over them, and with three one hiccup of a busy 2-core machine in a
            # flank cell left no carrier in one full-suite run of 3
            "profile": {"budgets": list(range(8, 44, 4)), "trials": 5},
            "slow_attention": {"start": 24, "stop": 28, "factor": 8},
        }
    )
    run_sweep(spec, tmp_path / "run", progress=False, command=["test"])
    ops = regimes.load(tmp_path / "run", table="ops")
    anomalies = pl.DataFrame({"model": ["tiny-gpt2"], "start": [24], "end": [28]})
    known = SimpleNamespace(anomalies=anomalies, group_columns=["model"], x="budget", y="y")
    res = regimes.attribute_operators(ops, known, unit="scope", n_boot=400)
    assert res.carriers().get_column("operator").to_list() == ["aten::scaled_dot_product_attention"]


def test_the_progress_bar_counts_profiled_generations_and_ends_at_its_total(tmp_path):
    spec = _spec(profile={"budgets": [8, 16], "trials": 2}, warmup=1)
    writer = RunWriter(tmp_path / "run", {"spec": spec.to_dict()})
    state = RunState.read(writer)
    total = sum(generations_left(spec, 0, state).values())
    assert total == len(plan_session(spec, 0, state)) == 6 + 4 + 3  # measured, profiled, warm
    bar = Progress(total, True)
    run_session(spec, writer, 0, emit=bar)
    bar.close()
    assert bar.done == bar.total == total
    assert (bar.counts["measured"], bar.counts["profiled"], bar.counts["warmups"]) == (6, 4, 3)


def test_a_sweep_with_only_profiles_left_resumes_them_and_counts_them(tmp_path):
    spec = _spec(profile={"budgets": [8, 16], "trials": 2})
    path = tmp_path / "run"
    first = run_sweep(spec, path, progress=False, compact=False, command=["test"])
    assert (first.measured, first.profiled) == (6, 4)
    assert "4 profiled generation(s)" in first.summary()
    next(iter(sorted((path / "ops").glob("part-*.parquet")))).unlink()  # one profile lost
    state = RunState.read(RunWriter(path, None))
    assert sum(generations_left(spec, 0, state).values()) == 1 == len(plan_session(spec, 0, state))
    again = run_sweep(spec, path, progress=False, command=["test"])
    assert (again.measured, again.profiled) == (0, 1)
    assert regimes.load(path, table="ops").select("budget", "trial").unique().height == 4
