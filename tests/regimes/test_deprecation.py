"""Parameters that steer nothing leave their signatures through one release's warning.

``cache_speedup`` draws nothing, so its ``n_boot`` and ``seed`` are deprecated; the
analyses that detect (and so resample) keep theirs and pass them on to the detection.
Every table here is synthetic.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import regimes
from regimes._deprecation import REMOVED_IN, deprecate_parameters
from regimes.cli import main
from regimes.data.simulate import published_gpt2_medium_cache

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def test_the_removal_release_is_still_ahead_of_the_project_version():
    """Reaching it fails here: the deprecated parameters must then go."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _release(REMOVED_IN) > _release(version)


@pytest.fixture(scope="module")
def cache_table() -> pl.DataFrame:
    return published_gpt2_medium_cache(trials=3, cv=0.10, seed=0)


@pytest.mark.parametrize("given", [{"n_boot": 200}, {"seed": 3}, {"n_boot": 50, "seed": 1}])
def test_cache_speedup_warns_for_its_bootstrap_options_and_ignores_them(cache_table, given):
    expected = regimes.cache_speedup(cache_table)
    with pytest.warns(DeprecationWarning, match=rf"removed in {re.escape(REMOVED_IN)}") as caught:
        result = regimes.cache_speedup(cache_table, **given)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("cache_speedup(): ") and all(name in message for name in given)
    # the caller's line is named, not the package's
    assert caught[0].filename == __file__
    assert result.speedup.equals(expected.speedup)
    assert result.collapses.equals(expected.collapses)


def test_cache_speedup_no_longer_has_them_in_its_signature_or_params(cache_table):
    assert {"n_boot", "seed"}.isdisjoint(inspect.signature(regimes.cache_speedup).parameters)
    assert {"n_boot", "seed"}.isdisjoint(regimes.cache_speedup(cache_table).params)


def test_a_call_without_them_warns_nothing(cache_table):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        regimes.cache_speedup(cache_table, alpha=0.05, level=0.95)


def test_the_decorator_keeps_positional_and_other_keyword_arguments():
    @deprecate_parameters("n_boot", reason="nothing is drawn")
    def scaled(value: float, *, by: float = 1.0) -> float:
        return value * by

    with pytest.warns(DeprecationWarning, match="scaled\\(\\): n_boot does nothing"):
        assert scaled(2.0, by=3.0, n_boot=10) == 6.0
    assert list(inspect.signature(scaled).parameters) == ["value", "by"]
    with pytest.raises(TypeError):
        scaled(2.0, seed=1)  # only the named parameters are taken in


def test_the_report_and_refinement_pass_no_bootstrap_option_to_the_speedup(cache_table):
    from regimes.analysis import analyze
    from regimes.refine import refine_boundaries
    from regimes.viz.html import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        report = build_report(analyze(cache_table, n_boot=100, seed=2))
        refine_boundaries(cache_table, max_generations=0, n_boot=100, seed=2)
    assert report.speedup is not None and "n_boot" not in report.speedup.params
    assert report.regimes.params["n_boot"] == 100 and report.regimes.params["seed"] == 2


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record the options every detection of the call is given."""
    import regimes.detect as detect

    calls: list[dict[str, Any]] = []
    real = detect.detect_regimes

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(detect, "detect_regimes", recorded)
    return calls


def test_compare_runs_passes_its_bootstrap_options_to_each_detection():
    grid = dict(n_budgets=12, trials=3, sessions=2, intercept_s=0.05, per_token_s=0.005)
    base = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid).trials
    new = regimes.simulate_sweep(seed=2, **grid).trials
    result = regimes.compare_runs(base, new, n_boot=100, seed=7)
    for report in (result.base_report, result.new_report):
        assert (report.params["n_boot"], report.params["seed"]) == (100, 7)


def test_compare_runs_defaults_to_the_detections_draws():
    default = inspect.signature(regimes.compare_runs).parameters["n_boot"].default
    assert default == inspect.signature(regimes.detect_regimes).parameters["n_boot"].default


@pytest.mark.parametrize("explain", ["memory_confound", "align_boundaries", "compare_backends"])
def test_explanations_pass_their_bootstrap_options_to_the_detection(monkeypatch, explain):
    calls = _recording(monkeypatch)
    trials = regimes.simulate_sweep(1, anomaly="spike", ratio=4.0, trials=3, seed=1).trials
    trials = trials.with_columns(
        pl.lit(1 << 30).alias("mem_driver_bytes"), pl.lit("mps").alias("backend")
    )
    # two prompt lengths, so that the alignment has curves to align
    trials = pl.concat([trials, trials.with_columns(pl.col("prompt_tokens") - 62)])
    try:
        getattr(regimes, explain)(trials, n_boot=100, seed=5)
    except regimes.RegimesInputError:
        pass  # one backend or one prompt: the explanation says so after the detection
    assert calls and (calls[0]["n_boot"], calls[0]["seed"]) == (100, 5)


@pytest.mark.parametrize("command", ["analyze", "report", "compare", "refine"])
def test_cli_help_gives_the_detections_default_draws(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 2000" not in text
    assert re.search(r"--n-boot N_BOOT bootstrap draws of .*\(default (500|200)\)", text)


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("regimes", "RegimeReport", "RegimeResult"),
        ("regimes.detect", "RegimeReport", "RegimeResult"),
        ("regimes", "PhaseAttribution", "PhaseResult"),
        ("regimes", "MemoryConfound", "MemoryResult"),
        ("regimes", "BoundaryAlignment", "AlignmentResult"),
        ("regimes", "BackendComparison", "BackendResult"),
        ("regimes.explain.phases", "PhaseAttribution", "PhaseResult"),
        ("regimes.explain.memory", "MemoryConfound", "MemoryResult"),
        ("regimes.explain.alignment", "BoundaryAlignment", "AlignmentResult"),
        ("regimes.explain.backends", "BackendComparison", "BackendResult"),
    ],
)
def test_a_former_class_name_warns_naming_its_replacement_and_the_release(module, old, new):
    imported = importlib.import_module(module)
    assert old not in getattr(imported, "__all__", ()) and old not in dir(imported)
    warning = rf"{old} is renamed {new}.*removed in {REMOVED_IN}"
    with pytest.warns(DeprecationWarning, match=warning):
        value = getattr(imported, old)
    assert value is getattr(imported, new)
    with pytest.raises(AttributeError):
        imported.NoSuchName  # noqa: B018
