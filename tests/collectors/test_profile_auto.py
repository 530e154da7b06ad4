"""``profile = "auto"``: the timed trials choose the budgets to profile.

The sweeps here are real: tiny-gpt2 with random weights on this CPU, with a slowdown
injected over a budget interval where detection must find one (their data are synthetic).
"""

from __future__ import annotations

import json

import polars as pl
import pytest

import regimes
from collectors._profile_auto import _roles, resolved
from collectors.spec import AutoProfile, Profile, SpecError, SweepSpec
from collectors.sweep import run_sweep

GRID = list(range(4, 40, 4))
BASE = {
    "models": ["tiny-gpt2"],
    "backends": ["cpu"],
    "budgets": GRID,
    "trials": 3,
    "warmup": 1,
    "engine": "loop",
    "attn_implementation": "sdpa",
}
# min_ratio 2: a shared machine's noise stays below it, the injected 5x does not
AUTO = {"budgets": "auto", "trials": 1, "min_ratio": 2.0}


def _spec(**extra):
    return SweepSpec.from_dict({**BASE, **extra})


def _meta(path):
    return json.loads((path / "meta.json").read_text())


def test_auto_is_a_profile_whose_budgets_detection_chooses():
    assert _spec(profile="auto").profile == AutoProfile()
    assert _spec(profile="auto").to_dict()["profile"] == "auto"
    spec = _spec(profile=AUTO)
    assert spec.profile == AutoProfile(trials=1, min_ratio=2.0)
    assert spec.to_dict()["profile"] == AUTO
    assert SweepSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "sometimes",
            r"^'profile' must be a table \{ budgets = \[\.\.\.\], trials = N \} or 'auto'",
        ),
        (3, "'profile' must be a table"),
        ({"budgets": "auto", "trails": 2}, "unknown key 'trails' in 'profile'"),
        ({"budgets": "auto", "trials": 0}, "'profile.trials'"),
        ({"budgets": "auto", "alpha": 1.5}, "'profile.alpha' must be a number between 0 and 1"),
        ({"budgets": "auto", "min_ratio": 1}, "'profile.min_ratio' must be a number above 1"),
    ],
)
def test_a_bad_auto_profile_fails_in_one_line_naming_the_key(value, message):
    with pytest.raises(SpecError, match=message) as caught:
        _spec(profile=value)
    assert "\n" not in str(caught.value)


def test_each_anomaly_gets_its_ends_its_middle_and_the_flanks_its_test_needs():
    assert _roles(GRID, 16, 24) == {
        8: "trend before",
        12: "trend before",
        16: "start of",
        20: "middle of",
        24: "end of",
        28: "trend after",
        32: "trend after",
    }
    # an anomaly at an end of the grid has one flank, and its trend needs three cells
    assert _roles(GRID, 4, 8) == {
        4: "start of",
        8: "end of",
        12: "trend after",
        16: "trend after",
        20: "trend after",
    }
    assert _roles(GRID, 36, 36) == {
        24: "trend before",
        28: "trend before",
        32: "trend before",
        36: "start of",
    }
    assert _roles(GRID, 8, 12) == {
        4: "trend before",
        8: "start of",
        12: "end of",
        16: "trend after",
        20: "trend after",
    }


def test_the_spec_profiles_the_recorded_choice_and_nothing_before_it():
    spec = _spec(profile=AUTO)
    assert resolved(spec, {}) is spec and spec.profile.budgets == ()
    chosen = resolved(spec, {"profile_auto": {"budgets": [12, 16]}})
    assert chosen.profile == Profile((12, 16), 1)
    assert resolved(spec, {"profile_auto": {"budgets": []}}).profile is None


def test_auto_profiles_budgets_bracketing_an_injected_regime(tmp_path):
    # three profiled generations per budget: the attribution reads each operator's median
    # over a budget's generations, which one hiccup on a busy CPU does not move (with one, a
    # hiccup inside a matrix product gave aten::addmm the top share in a full-suite run).
    # Attention repeated 16 times: at 4, with the other core busy, its share of the excess
    # was 0.25 against aten::addmm's 0.14, and a full-suite run once put addmm first; at
    # 16, 0.50 against at most 0.11
    spec = _spec(
        profile={**AUTO, "trials": 3},
        inject={"start": 16, "stop": 24, "factor": 5.0},
        slow_attention={"start": 16, "stop": 24, "factor": 16},
        isolation="process",  # the session processes read the choice from meta.json
    )
    path = tmp_path / "run"
    result = run_sweep(spec, path, progress=False, command=["test"])
    assert result.status == "complete"
    chosen = _meta(path)["profile_auto"]
    budgets = chosen["budgets"]
    inside = [b for b in budgets if 16 <= b <= 24]
    assert inside and min(budgets) < 16 and max(budgets) > 24
    assert min(budgets) >= 8 and max(budgets) <= 32  # around the regime, nowhere else
    assert {w["budget"] for w in chosen["why"]} == set(budgets)
    assert any("trend before the anomaly" in w for entry in chosen["why"] for w in entry["why"])
    assert chosen["detection"] == {"alpha": None, "min_ratio": 2.0}
    ops = regimes.load(path, table="ops")
    assert sorted(set(ops.get_column("budget"))) == budgets
    assert ops.select("budget", "trial").unique().height == 3 * len(budgets)
    trials = regimes.load(path)
    assert trials.filter(~pl.col("warmup")).height == len(GRID) * 3  # no profiled row
    # the profiling process warms each profiled case again, as any fresh process does
    assert trials.filter(pl.col("warmup")).height == len(GRID) + len(budgets)
    assert any(m.startswith('profile = "auto": profiling budgets') for m in result.messages)
    again = run_sweep(spec, path, progress=False, command=["test"])  # resumed: nothing repeats
    assert again.measured == 0 and _meta(path)["profile_auto"] == chosen
    assert regimes.load(path, table="ops").height == ops.height
    # the chosen budgets are enough for the attribution to test the anomaly, and the
    # slowed attention carries the largest share of its excess; whether one generation per
    # budget makes it significant depends on this machine's hiccups in the flank cells
    found = regimes.attribute_operators(ops, regimes.detect_regimes(trials, min_ratio=2.0))
    assert found.untested.height == 0
    top = found.operators.sort("share", descending=True, nulls_last=True).row(0, named=True)
    assert "scaled_dot_product" in top["operator"]


def test_a_smooth_sweep_profiles_nothing_and_says_why(tmp_path):
    path = tmp_path / "run"
    result = run_sweep(_spec(profile=AUTO), path, progress=False, command=["test"])
    chosen = _meta(path)["profile_auto"]
    assert chosen["budgets"] == [] and chosen["anomalies"] == []
    assert chosen["reason"].startswith("no anomaly detected in 27 timed trial(s)")
    assert result.messages[0] == f'profile = "auto": nothing profiled: {chosen["reason"]}'
    assert regimes.load(path, table="ops").height == 0
