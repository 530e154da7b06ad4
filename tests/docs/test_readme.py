"""The README is a user's guide that holds what it claims: its code runs, its paths exist,
and what it says about the demo is what the demo does."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tomli backport, as pyproject.toml names it
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README has no section {title!r}"
    return " ".join(match.group(1).split())  # one line: sentences wrap anywhere


def test_the_readme_is_a_guide_of_at_most_300_lines():
    assert len(README.splitlines()) <= 300


@pytest.mark.parametrize(
    "phrase",
    ["this round", "earlier version", "previous version", "at the start of", "midway", "used to"],
)
def test_the_readme_tells_no_development_history(phrase):
    assert phrase not in README.lower()


def test_the_quickstart_runs_as_written(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    quickstart = next(b for b in blocks if b.startswith("import regimes"))
    monkeypatch.chdir(ROOT)
    exec(compile(quickstart, "README.md", "exec"), {})
    assert "Regime detection" in capsys.readouterr().out


def test_every_path_the_readme_names_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    top = "examples|docs|bench|tests|constraints|collectors|regimes"
    quoted = re.findall(rf"`((?:{top})/[^`* ]+)`", README)
    named = {p.rstrip("/") for p in links + quoted if "*" not in p and "RUN" not in p}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing
    assert len(named) >= 10


def test_what_the_readme_says_of_the_demo_is_what_it_runs():
    # the spec file as written (collectors.spec checks it with torch, absent from the
    # analysis-only environments this page is tested in too); budgets' stop is inclusive
    demo = _section("Try it")
    spec = tomllib.loads((ROOT / "examples" / "sweeps" / "demo-injected.toml").read_text())
    inject, grid = spec["inject"], spec["budgets"]
    n_budgets = (grid["stop"] - grid["start"]) // grid["step"] + 1
    assert "examples/sweeps/demo-injected.toml" in demo
    assert f"{inject['factor']:g}x slowdown" in demo
    assert f"budgets {inject['start']}..{inject['stop']}" in demo
    assert f"{n_budgets} budgets" in demo
    source = (ROOT / "examples" / "demo.py").read_text(encoding="utf-8")
    cap = float(re.search(r"^MAX_SECONDS = ([\d.]+)", source, re.M).group(1))
    assert f"capped at {cap:g} s" in demo
    commands = _section("The two commands: collect, then analyze")
    assert "regimes collect examples/sweeps/demo-injected.toml" in commands


def test_the_readme_says_mps_never_ran_on_apple_hardware():
    hardware = _section("What was and was not run on which hardware")
    mps = hardware.split("| MPS |")[1]
    assert "never run on real Apple hardware" in mps and "fakes" in mps
