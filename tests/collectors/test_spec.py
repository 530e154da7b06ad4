"""Sweep specs: parsing, the case grid, and a clear SpecError for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors import _spec_checks as spec_checks
from collectors import spec as spec_module
from collectors.spec import Case, Injection, SpecError, SweepSpec
from regimes.data.schema import RegimesInputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sweeps"

BASE = {
    "models": ["tiny-gpt2"],
    "backends": ["cpu"],
    "dtypes": ["float32"],
    "use_cache": [True, False],
    "prompt_tokens": [8],
    "budgets": [2, 4, 6],
    "trials": 2,
}


def with_(**changes):
    data = dict(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_grid_counts_and_defaults():
    spec = SweepSpec.from_dict(with_(models=["tiny-gpt2", "tiny-opt"], prompt_tokens=[8, 16]))
    assert len(spec.cases()) == 2 * 2 * 2 * 3
    assert len(set(spec.cases())) == len(spec.cases())
    assert spec.total_trials() == 24 * 2 * spec.sessions
    assert spec.total_trials(include_warmup=True) == 24 * (2 + spec.warmup) * spec.sessions
    assert spec.cases()[0] == Case("tiny-gpt2", "cpu", "float32", True, 8, 2)
    assert (spec.weights, spec.isolation, spec.engine, spec.instrument) == (
        "random",
        "none",
        "generate",
        False,
    )


def test_budget_range_is_inclusive():
    spec = SweepSpec.from_dict(with_(budgets={"start": 16, "stop": 64, "step": 16}))
    assert spec.budgets == (16, 32, 48, 64)
    assert SweepSpec.from_dict(with_(budgets={"start": 5, "stop": 5})).budgets == (5,)


def test_to_dict_round_trips_and_differences():
    spec = SweepSpec.from_dict(with_(budgets={"start": 2, "stop": 10, "step": 4}, sessions=3))
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    other = SweepSpec.from_dict(with_(budgets={"start": 2, "stop": 10, "step": 4}, sessions=2))
    assert spec.differences(other) == ["sessions"]


def test_inject_is_an_inclusive_interval_and_round_trips():
    spec = SweepSpec.from_dict(with_(inject={"start": 3, "stop": 4, "factor": 2}))
    assert spec.inject == Injection(3, 4, 2.0)
    assert [spec.inject.factor_for(b) for b in (2, 3, 4, 5)] == [1.0, 2.0, 2.0, 1.0]
    assert spec.to_dict()["inject"] == {"start": 3, "stop": 4, "factor": 2.0}
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    assert SweepSpec.from_dict(BASE).inject is None
    assert SweepSpec.from_dict(BASE).differences(spec) == ["inject"]


def test_attention_and_warmup_keys_normalise_and_round_trip():
    spec = SweepSpec.from_dict(
        with_(attn_implementation="sdpa", sdpa_backends=["math", "flash"], warmup_policy="none")
    )
    assert spec.attn_implementation == ("sdpa",) and spec.sdpa_backends == ("flash", "math")
    assert spec.warmup == 0 and spec.warmups_per_session() == 0
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    default = SweepSpec.from_dict(BASE)
    assert default.attn_implementation == (None,) and default.sdpa_backends is None
    assert default.warmup_policy == "per-case" and SweepSpec.from_dict(default.to_dict()) == default
    grid = SweepSpec.from_dict(
        with_(attn_implementation=["eager", "sdpa"], warmup_policy="max-first")
    )
    assert {c.attn_implementation for c in grid.cases()} == {"eager", "sdpa"}
    assert grid.warmups_per_session() == 2 * grid.warmup  # one model, two implementations
    assert grid.total_trials(include_warmup=True) == (len(grid.cases()) * 2 + 2) * grid.sessions


def test_every_key_has_a_declared_constraint():
    assert set(spec_module._PARAMETER_CONSTRAINTS) == set(SweepSpec.keys())


def test_spec_error_is_an_input_error():
    assert issubclass(SpecError, RegimesInputError)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (with_(budget=[2]), "unknown key 'budget' (did you mean 'budgets'?)"),
        (with_(trails=3), "did you mean 'trials'?"),
        (with_(models=["tiny-gtp2"]), "did you mean 'tiny-gpt2'?"),
        (with_(models=["org/some-model"]), "unknown model preset 'org/some-model'"),
        (with_(models=[]), "'models' is empty"),
        (with_(dtypes=["float64"]), "unknown dtype 'float64'"),
        (with_(engine="beam"), "unknown engine 'beam'"),
        (with_(isolation="thread"), "unknown isolation 'thread'"),
        (with_(weights="trained"), "unknown weights 'trained'"),
        (with_(budgets=[]), "'budgets' is empty"),
        (with_(budgets=[4, 0]), "must be positive"),
        (with_(budgets=[4, -8]), "must be positive"),
        (with_(budgets=[4, 4]), "more than once"),
        (with_(budgets=[2.5]), "must hold integers"),
        (with_(budgets={"start": 64, "stop": 16}), "stop (16) < start (64)"),
        (with_(budgets={"start": 0, "stop": 16}), "'budgets.start' must be >= 1"),
        (with_(budgets={"start": 4, "stop": 16, "steps": 4}), "did you mean 'step'?"),
        (with_(budgets={"stop": 16}), "lacks ['start']"),
        (with_(budgets=[4000]), "exceeds tiny-gpt2's 2048 positions"),
        (with_(budgets=[2042]), "budget (2042) - 1 = 2049 positions (the last token is never"),
        (with_(budgets=None), "required key 'budgets'"),
        (with_(backends=["gpu"]), "unknown backend 'gpu'"),
        (with_(backends=["cuda:1"]), "CUDA_VISIBLE_DEVICES"),
        (with_(trials=0), "'trials' must be >= 1"),
        (with_(trials="3"), "'trials' must be an integer"),
        (with_(trials=True), "'trials' must be an integer"),
        (with_(warmup=-1), "'warmup' must be >= 0"),
        (with_(sessions=0), "'sessions' must be >= 1"),
        (with_(use_cache=[1]), "'use_cache' must hold true/false"),
        (with_(use_cache=True), "'use_cache' must be a list"),
        (with_(prompt_tokens=[0]), "'prompt_tokens' must be >= 1"),
        (with_(instrument="yes"), "'instrument' must be true or false"),
        (with_(seed=1.5), "'seed' must be an integer"),
        (with_(inject=3.0), "'inject' must be a table {start, stop, factor}"),
        (with_(inject={"start": 2, "stop": 4}), "'inject' lacks ['factor']"),
        (with_(inject={"start": 2, "stop": 4, "factr": 2}), "did you mean 'factor'?"),
        (with_(inject={"start": 4, "stop": 2, "factor": 2}), "'inject.stop' must be >= 4"),
        (with_(inject={"start": 0, "stop": 2, "factor": 2}), "'inject.start' must be >= 1"),
        (with_(inject={"start": 2, "stop": 4, "factor": 0.5}), "'inject.factor' must be"),
        (with_(inject={"start": 2, "stop": 4, "factor": "3"}), "'inject.factor' must be"),
        (with_(inject={"start": 2, "stop": 4, "factor": float("inf")}), "must be finite"),
        (with_(attn_implementation="sdp"), "unknown attn_implementation 'sdp' (did you mean"),
        (with_(attn_implementation=["eager", "eager"]), "'attn_implementation' lists"),
        (with_(attn_implementation=[]), "'attn_implementation' is empty"),
        (with_(attn_implementation=3), "'attn_implementation' must be a list"),
        (with_(sdpa_backends=["cdnn"]), "unknown sdpa_backends 'cdnn' (did you mean 'cudnn'?)"),
        (with_(sdpa_backends="math"), "'sdpa_backends' must be a list"),
        (with_(sdpa_backends=[]), "'sdpa_backends' is empty"),
        (with_(warmup_policy="first"), "unknown warmup_policy 'first'"),
        (with_(warmup_policy="none", warmup=2), 'warmup_policy = "none" runs no warm-up'),
        (with_(warmup_policy="max-first", warmup=0), "'warmup' must be >= 1 with warmup_policy"),
    ],
)
def test_bad_specs_name_the_problem(data, needle):
    with pytest.raises(SpecError) as info:
        SweepSpec.from_dict(data)
    assert needle in str(info.value)


def test_hub_ids_need_pretrained_weights():
    spec = SweepSpec.from_dict(with_(models=["openai-community/gpt2"], weights="pretrained"))
    assert spec.models == ("openai-community/gpt2",)
    with pytest.raises(SpecError, match="neither a preset"):
        SweepSpec.from_dict(with_(models=["not a model!"], weights="pretrained"))


class _Unavailable:
    def is_available(self):
        return False

    def unavailable_reason(self):
        return "no such device in this test"


def test_unavailable_backend_fails_unless_not_checked(monkeypatch):
    monkeypatch.setattr(spec_checks, "get_backend", lambda name: _Unavailable())
    with pytest.raises(
        SpecError, match="backend 'cpu' is not available on this machine: no such device"
    ):
        SweepSpec.from_dict(BASE)
    assert SweepSpec.from_dict(BASE, check_available=False).backends == ("cpu",)


def test_toml_file_errors(tmp_path):
    with pytest.raises(SpecError, match="no sweep spec at"):
        SweepSpec.from_toml(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text('models = ["tiny-gpt2"\nbudgets = 3\n')
    with pytest.raises(SpecError, match="is not valid TOML"):
        SweepSpec.from_toml(broken)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_example_specs_parse(path):
    spec = SweepSpec.from_toml(path, check_available=False)
    assert spec.total_trials() > 0


def test_example_specs_say_what_they_promise():
    mps = SweepSpec.from_toml(EXAMPLES / "mac-mps.toml", check_available=False)
    assert mps.budgets == tuple(range(480, 657, 16)) and len(mps.budgets) == 12
    assert (mps.backends, mps.dtypes, mps.models) == (
        ("mps",),
        ("float32", "float16"),
        ("gpt2-medium",),
    )
    assert (mps.trials, mps.warmup, mps.sessions, mps.isolation) == (5, 3, 2, "process")
    assert set(mps.use_cache) == {True, False} and mps.prompt_tokens == (65,)
    gpt2 = SweepSpec.from_toml(EXAMPLES / "cuda-h200-gpt2.toml", check_available=False)
    assert gpt2.budgets == tuple(range(16, 513, 16)) and not gpt2.instrument
    opt = SweepSpec.from_toml(EXAMPLES / "cuda-h200-opt125m.toml", check_available=False)
    assert opt.models == ("opt-125m",) and opt.budgets == tuple(range(32, 513, 32))
    inst = SweepSpec.from_toml(EXAMPLES / "cuda-h200-instrumented.toml", check_available=False)
    assert inst.instrument and inst.budgets == tuple(range(64, 513, 64)) and inst.sessions == 1
    window = SweepSpec.from_toml(
        EXAMPLES / "cuda-h200-gpt2-medium-window.toml", check_available=False
    )
    assert window.budgets == mps.budgets and window.models == mps.models
    tiny = SweepSpec.from_toml(EXAMPLES / "tiny-cpu.toml")  # must run here: backend checked
    assert tiny.backends == ("cpu",)


def test_history_specs_differ_from_the_no_warmup_sweep_in_one_thing_each():
    def history(name):
        return SweepSpec.from_toml(
            EXAMPLES / f"cuda-h200-history-{name}.toml", check_available=False
        )

    base = history("nowarmup")
    assert base.models == ("gpt2",) and base.dtypes == ("float16",) and base.backends == ("cuda",)
    assert base.attn_implementation == ("sdpa",) and base.use_cache == (True,)
    assert base.budgets == tuple(range(64, 513, 64)) and base.instrument
    assert (base.isolation, base.sessions, base.trials) == ("process", 2, 3)
    assert (base.warmup_policy, base.warmup, base.sdpa_backends) == ("none", 0, None)
    assert history("percase").differences(base) == ["warmup", "warmup_policy"]
    assert history("percase").warmup == 2
    assert history("nocudnn").differences(base) == ["sdpa_backends"]
    assert history("nocudnn").sdpa_backends == ("flash", "efficient", "math")
    assert history("float32").differences(base) == ["dtypes"]


def test_the_largest_budget_may_fill_the_position_table_to_its_last_position():
    """The last generated token is never fed back: prompt 8 + budget 2041 uses 2048."""
    assert SweepSpec.from_dict(with_(budgets=[2041])).budgets == (2041,)
