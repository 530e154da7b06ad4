"""Boundary refinement with a simulated probe oracle (synthetic trials, known truth).

The oracle draws trials from a smooth curve with a known injected slow interval, so
every bracket can be checked against the truth. The real CPU case with an injected
slowdown is in tests/collectors/test_refine_collect.py.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import regimes
from regimes._refine.brackets import Boundary, Component, Line
from regimes._refine.design import BoundaryState, Evidence
from regimes._refine.sprt import (
    LEFT,
    RIGHT,
    Noise,
    Thresholds,
    decide,
    log_likelihood_ratio,
    planned_trials,
    separable,
)
from regimes.cli import main
from regimes.data.io import RunWriter
from regimes.errors import RegimesInputError
from regimes.refine import ProbeRequest, SimulatedProbe, refine_boundaries

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]

GRID = list(range(480, 657, 16))
"""The coarse grid of the acceptance case (the published MPS window)."""


def brackets(result: regimes.RefineResult) -> list[tuple[str, str, int, int, bool]]:
    return result.boundaries.select("source", "kind", "low", "high", "resolved").rows()


@pytest.fixture(scope="module")
def acceptance():
    """480..656 step 16, 3 trials, a 3x slowdown injected on 505..633 (synthetic)."""
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=11)
    coarse = oracle.sweep(GRID, trials=3)
    return oracle, coarse, refine_boundaries(coarse, probe=oracle)


# --- the sequential test ---------------------------------------------------------------


def test_wald_thresholds_are_log_odds_of_the_error_rates():
    t = Thresholds.from_error_rate(0.01)
    assert t.upper == pytest.approx(math.log(99))
    assert t.lower == pytest.approx(-math.log(99))


def test_llr_favours_the_nearer_level_and_vanishes_midway():
    assert log_likelihood_ratio(1.0, 0.01, 0.0, 1.1) > 0
    assert log_likelihood_ratio(0.1, 0.01, 0.0, 1.1) < 0
    assert log_likelihood_ratio(0.55, 0.01, 0.0, 1.1) == pytest.approx(0.0)
    t = Thresholds.from_error_rate(0.01)
    assert decide(10.0, t) == RIGHT and decide(-10.0, t) == LEFT and decide(1.0, t) is None


def test_more_noise_needs_more_trials_and_too_much_wobble_is_not_separable():
    t = Thresholds.from_error_rate(0.01)
    quiet, loud = Noise(0.02, 0.0, 0.01), Noise(0.3, 0.0, 0.01)
    assert planned_trials(math.log(1.5), [quiet], 0, 0, t, 3, 24) == 3
    assert planned_trials(math.log(1.5), [loud], 0, 0, t, 3, 24) > 3
    assert planned_trials(math.log(1.5), [loud], 24, 1, t, 3, 24) == 0  # at the cap
    assert separable(math.log(3.0), [quiet], t, 3, 24)
    assert not separable(math.log(1.5), [Noise(0.02, 0.0, 0.2)], t, 3, 24)


# --- the acceptance case, simulated ------------------------------------------------------


def test_acceptance_case_finds_the_exact_brackets(acceptance):
    _, _, result = acceptance
    assert brackets(result) == [
        ("latency", "onset", 504, 505, True),
        ("latency", "recovery", 633, 634, True),
    ]
    assert result.status == "tested"


def test_acceptance_case_costs_under_15_percent_of_a_dense_grid(acceptance):
    _, coarse, result = acceptance
    dense = (656 - 480 + 1) * coarse.filter(pl.col("budget") == 480).height
    assert result.dense_generations == dense
    assert result.generations == result.collected.height
    assert result.generations <= 0.15 * dense
    assert result.boundaries.get_column("generations").sum() == result.generations


def test_probes_carry_their_evidence(acceptance):
    _, _, result = acceptance
    probes = result.probes
    assert probes.height >= 8
    assert set(probes.get_column("decision")) <= {"normal", "anomalous"}
    for row in probes.iter_rows(named=True):
        anomalous = 505 <= row["budget"] <= 633
        assert row["decision"] == ("anomalous" if anomalous else "normal")
        assert row["n"] >= 3
        assert (row["llr"] > 0) == (
            row["decision"] == ("anomalous" if row["boundary"] == 0 else "normal")
        )


def test_new_trials_are_fresh_sessions_labelled_synthetic(acceptance):
    _, coarse, result = acceptance
    new = result.collected
    assert set(new.get_column("source")) == {"synthetic"}
    assert set(new.get_column("session")).isdisjoint(set(coarse.get_column("session")))
    assert new.filter(pl.col("warmup")).height > 0


def test_result_protocol(acceptance):
    _, _, result = acceptance
    assert repr(result).startswith("RefineResult(boundaries=2, probes=")
    assert "(504, 505)" in result.summary() and "of the 708" in result.summary()
    payload = json.loads(result.to_json())
    assert payload["result"] == "RefineResult"
    assert [b["kind"] for b in payload["boundaries"]] == ["onset", "recovery"]
    assert "<h4>Boundary refinement</h4>" in result._repr_html_()


# --- resuming, honesty, allowance --------------------------------------------------------


def test_rerun_continues_from_the_probes_already_measured():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=3)
    coarse = oracle.sweep(GRID, trials=3)
    first = refine_boundaries(coarse, probe=oracle, max_generations=12)
    assert first.generations <= 12
    assert set(first.boundaries.get_column("status")) == {"max_generations"}
    assert not first.boundaries.get_column("resolved").any()
    so_far = pl.concat([coarse, first.collected], how="diagonal_relaxed")
    second = refine_boundaries(so_far, probe=oracle, grid=GRID)
    assert brackets(second) == [
        ("latency", "onset", 504, 505, True),
        ("latency", "recovery", 633, 634, True),
    ]
    # continued where the first call stopped, not restarted: every probe it left
    # undecided is taken up from the trials on disk
    pending = first.probes.filter(pl.col("decision") == "pending").get_column("budget")
    reused = second.probes.filter(pl.col("on_disk")).get_column("budget")
    assert pending.len() >= 1
    assert set(pending.to_list()) <= set(reused.to_list())
    # the interrupted refinement costs no more than one uninterrupted refinement (its
    # rerun's brackets come from the coarse grid and the probes measured so far, which
    # can narrow them)
    whole = refine_boundaries(coarse, probe=SimulatedProbe(505, 633, factor=3.0, seed=3))
    assert first.generations + second.generations <= whole.generations


class _Ramp(SimulatedProbe):
    """Synthetic: budget 505 sits halfway (in log latency) between the two levels."""

    def latency(self, budget, case):
        out = super().latency(budget, case)
        return np.where(np.asarray(budget) == 505, out / math.sqrt(self.factor), out)


def test_an_undecided_probe_does_not_narrow_the_bracket():
    oracle = _Ramp(505, 633, factor=3.0, cv=0.03, seed=5)
    result = refine_boundaries(oracle.sweep(GRID, trials=3), probe=oracle, max_trials=9)
    onset = result.boundaries.filter(pl.col("kind") == "onset").row(0, named=True)
    assert (onset["low"], onset["high"]) == (504, 506)
    assert not onset["resolved"] and onset["status"] == "undecided"
    at_505 = result.probes.filter((pl.col("boundary") == 0) & (pl.col("budget") == 505))
    assert at_505.get_column("decision").to_list() == ["between"]


def _state(level_at_probe: float, trials: int, cap: int) -> BoundaryState:
    """A boundary between levels 0 and 1 on (100, 116), evidence at 108 only."""
    flat = Line(100.0, 0.0, 0.0)
    noise = Noise(sigma_w=1.0, sigma_s=0.0, tau=0.0)
    boundary = Boundary(
        "latency", {}, "onset", 100, 116, (Component((), 1.0, noise),),
        flat, flat.shifted(1.0), "normal", "anomalous",
    )  # fmt: skip
    values = np.random.default_rng(0).normal(0.0, 1.0, trials)
    values = values - np.median(values) + level_at_probe
    evidence = Evidence(
        pl.DataFrame({"budget": [108] * trials, "_ly": values, "_session": ["a"] * trials}),
        [],
        {(): noise},
    )
    state = BoundaryState(boundary, Thresholds.from_error_rate(0.01), 3, cap, 1)
    state.start(evidence)
    return state


def test_a_probe_at_the_cap_between_thresholds_is_undecided_and_skipped():
    state = _state(0.5, 24, cap=24)  # exactly midway: the log-likelihood ratio is 0
    probe = state.probes[108]
    assert probe.llr == pytest.approx(0.0) and probe.decision is None and probe.exhausted
    assert (state.low, state.high) == (100, 116)
    budget, trials = state.next_request()
    assert budget != 108 and trials >= 3


@pytest.mark.parametrize(("level", "misfit"), [(0.65, "between"), (3.0, "beyond")])
def test_a_level_that_fits_neither_side_decides_nothing(level, misfit):
    short = _state(level, 3, cap=24)  # measured on while the cap allows
    assert short.probes[108].decision is None and not short.probes[108].exhausted
    at_cap = _state(level, 96, cap=96)
    probe = at_cap.probes[108]
    assert probe.llr > at_cap.thresholds.upper  # the test alone would say "anomalous"
    assert probe.decision is None and probe.misfit == misfit and probe.exhausted
    assert (at_cap.low, at_cap.high) == (100, 116)


def test_an_unfinished_probe_is_continued_before_a_new_one():
    state = _state(0.2, 3, cap=24)  # leaning left, far from decided with three trials
    probe = state.probes[108]
    assert probe.decision is None and not probe.exhausted and probe.llr < 0
    budget, trials = state.next_request()
    assert budget == 108 and 3 <= trials <= 21


def test_contradicting_probes_on_disk_make_the_bracket_inconsistent_not_narrow():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=8)
    coarse = oracle.sweep(GRID, trials=3)
    slow, fast = SimulatedProbe(0, 10_000, 3.0, seed=9), SimulatedProbe(0, 0, 3.0, seed=10)
    case = {k: coarse.get_column(k)[0] for k in ("backend", "device", "model", "dtype")}
    early = ProbeRequest(case | {"use_cache": True}, 500, 3)
    late = ProbeRequest(case | {"use_cache": True}, 502, 3)
    # two sessions each: a decision rests on at least two
    disk = pl.concat(
        [
            coarse,
            *[
                slow([early]).with_columns(pl.lit(s, dtype=pl.Int64).alias("session"))
                for s in (90, 92)
            ],
            *[
                fast([late]).with_columns(pl.lit(s, dtype=pl.Int64).alias("session"))
                for s in (91, 93)
            ],
        ],
        how="diagonal_relaxed",
    )
    result = refine_boundaries(disk, probe=oracle, grid=GRID)
    onset = result.boundaries.filter(pl.col("kind") == "onset").row(0, named=True)
    assert onset["status"] == "inconsistent" and not onset["resolved"]
    # anomalous at 500 below normal at 502: the bracket holds both crossings
    assert onset["low"] < 500 and onset["high"] > 502


def test_max_generations_is_never_exceeded():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=4)
    result = refine_boundaries(oracle.sweep(GRID, trials=3), probe=oracle, max_generations=9)
    assert result.generations <= 9
    assert "max_generations" in set(result.boundaries.get_column("status"))


def test_without_a_prober_the_grid_brackets_are_reported_unresolved():
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=4)
    result = refine_boundaries(oracle.sweep(GRID, trials=3))
    assert brackets(result) == [
        ("latency", "onset", 496, 512, False),
        ("latency", "recovery", 624, 640, False),
    ]
    assert set(result.boundaries.get_column("status")) == {"no prober"}
    assert result.generations == 0


def test_speedup_collapse_is_refined_with_both_cache_settings():
    oracle = SimulatedProbe(505, 633, factor=3.0, inject_cache=(True,), seed=2)
    coarse = oracle.sweep(range(384, 769, 16), trials=3, use_cache=(True, False))
    result = refine_boundaries(coarse, probe=oracle)
    found = brackets(result)
    assert ("speedup", "onset", 504, 505, True) in found
    assert ("speedup", "recovery", 633, 634, True) in found
    speedup_probes = result.probes.join(
        result.boundaries.select("boundary", "source"), on="boundary"
    ).filter(pl.col("source") == "speedup")
    assert set(speedup_probes.get_column("decision")) <= {"normal", "collapsed"}


@pytest.mark.parametrize("seed", range(4))
# a 1.5x interval over three trials with hiccups sits at the grid detection's power limit
# (one of four draws: p 0.08); refinement is what is tested here
@pytest.mark.parametrize(("start", "stop", "factor"), [(517, 590, 1.7), (490, 601, 10.0)])
def test_brackets_are_exact_across_intervals_and_factors(seed, start, stop, factor):
    oracle = SimulatedProbe(start, stop, factor=factor, cv=0.05, seed=seed)
    result = refine_boundaries(oracle.sweep(range(448, 689, 16), trials=3), probe=oracle)
    assert brackets(result) == [
        ("latency", "onset", start - 1, start, True),
        ("latency", "recovery", stop, stop + 1, True),
    ]


def test_the_h200_injection_spec_has_boundaries_to_refine():
    """The GPU run's grid and injection, with the oracle standing in for gpt2 (synthetic)."""
    spec = tomllib.loads((REPO / "examples/sweeps/cuda-h200-inject.toml").read_text())
    grid = range(spec["budgets"]["start"], spec["budgets"]["stop"] + 1, spec["budgets"]["step"])
    inject = spec["inject"]
    oracle = SimulatedProbe(
        inject["start"], inject["stop"], inject["factor"], per_token_s=0.0062, seed=1
    )
    result = refine_boundaries(oracle.sweep(grid, trials=spec["trials"]), probe=oracle)
    assert brackets(result) == [
        ("latency", "onset", inject["start"] - 1, inject["start"], True),
        ("latency", "recovery", inject["stop"], inject["stop"] + 1, True),
    ]


class _TotalLengthOnset(SimulatedProbe):
    """Synthetic: the onset at total length 570 (prompt + budget), recovery at budget 633."""

    def latency(self, budget, case):
        x = np.asarray(budget, dtype=float)
        inside = (x + case["prompt_tokens"] >= 570) & (x <= 633)
        return (self.intercept_s + self.per_token_s * x) * np.where(inside, self.factor, 1.0)


def test_align_boundaries_answers_at_token_resolution_on_refined_data():
    oracle = _TotalLengthOnset(0, 0, 3.0, seed=4)
    coarse = oracle.sweep(GRID, trials=3, prompt_tokens=(65, 3))
    refined = refine_boundaries(coarse, probe=oracle)
    assert refined.boundaries.get_column("resolved").all()
    both = pl.concat([coarse, refined.collected], how="diagonal_relaxed")
    alignment = regimes.align_boundaries(both, n_boot=200)
    verdict = dict(alignment.boundaries.select("boundary", "follows").iter_rows())
    assert verdict == {"onset": "total_tokens", "recovery": "budget"}
    positions = alignment.positions.sort("boundary", "prompt_tokens")
    assert positions.select("budget_low", "budget_high").rows() == [
        (566, 567),
        (504, 505),
        (633, 634),
        (633, 634),
    ]
    spreads = alignment.boundaries.select("budget_spread", "total_spread").rows()
    assert spreads == [(62, 0), (0, 62)]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("resolution", 0),
        ("min_trials", 1),
        ("max_trials", 2),
        ("error_rate", 0.6),
        ("max_generations", -1),
    ],
)
def test_bad_arguments_name_the_problem(option, value):
    coarse = SimulatedProbe(505, 633, factor=3.0).sweep(GRID, trials=3)
    with pytest.raises(RegimesInputError, match=option):
        refine_boundaries(coarse, **{option: value})


def test_a_grid_too_short_to_detect_on_is_an_input_error():
    coarse = SimulatedProbe(505, 633, factor=3.0).sweep([480, 496], trials=3)
    with pytest.raises(RegimesInputError, match="at least 3 budgets"):
        refine_boundaries(coarse)


# --- the command line ---------------------------------------------------------------------


def test_cli_json_reports_each_boundary_of_a_refined_run(acceptance, tmp_path, capsys):
    _, coarse, result = acceptance
    writer = RunWriter(tmp_path / "run", {"spec": {"budgets": GRID}, "source": "synthetic"})
    keep = [c for c in regimes.TRIAL_SCHEMA if c in coarse.columns]
    writer.write_trials(coarse.select(keep))
    writer.write_trials(result.collected.select(keep))
    assert main(["refine", str(tmp_path / "run"), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["low"], r["high"], r["resolved"]) for r in records] == [
        ("onset", 504, 505, True),
        ("recovery", 633, 634, True),
    ]
    assert list(records[0])[:6] == ["kind", "low", "high", "resolved", "generations", "tokens"]
    # everything needed was on disk: nothing new, and what was spent is counted
    assert [r["new_generations"] for r in records] == [0, 0]
    spent = result.boundaries.get_column("generations").to_list()
    assert [r["generations"] for r in records] == spent


def test_cli_missing_run_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["refine", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _coarse_run(path: Path) -> pl.DataFrame:
    coarse = SimulatedProbe(505, 633, factor=3.0, seed=1).sweep(GRID, trials=3)
    writer = RunWriter(path, {"spec": {"budgets": GRID}, "source": "synthetic"})
    writer.write_trials(coarse.select([c for c in regimes.TRIAL_SCHEMA if c in coarse.columns]))
    return coarse


def test_no_generation_allowed_reads_a_run_back_without_building_a_prober(
    tmp_path, monkeypatch, capsys
):
    coarse = _coarse_run(tmp_path / "run")
    # the collectors cannot be imported: neither the library nor the command needs them
    monkeypatch.setitem(sys.modules, "collectors.refine", None)
    result = refine_boundaries(tmp_path / "run", max_generations=0)
    assert set(result.boundaries.get_column("status")) == {"max_generations"}
    assert result.generations == 0 and result.trials.height == coarse.height
    assert main(["refine", str(tmp_path / "run"), "--max-generations", "0"]) == 0
    assert "max_generations" in capsys.readouterr().out


def test_a_run_to_probe_without_a_prober_is_refused_naming_how_to_get_one(tmp_path):
    _coarse_run(tmp_path / "run")
    with pytest.raises(RegimesInputError, match=r"run_prober\(RUN\).*max_generations=0"):
        refine_boundaries(tmp_path / "run")
