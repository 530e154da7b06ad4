"""``regimes analyze`` on bad arguments and uninstrumented runs, and its reproducibility.

The runs are synthetic (``simulate_sweep``), written by the library.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import regimes
from regimes.cli import main
from regimes.data.simulate import simulate_sweep

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """Two sessions of three synthetic curves with a spike each, not instrumented."""
    trials = simulate_sweep(
        3, anomaly="spike", ratio=4.0, n_budgets=16, trials=4, sessions=2, seed=2
    ).trials.drop("source")
    path = tmp_path_factory.mktemp("analyze") / "run"
    writer = regimes.RunWriter(path, {"name": "synthetic-analyze", "source": "synthetic"})
    for chunk in np.array_split(np.arange(trials.height), 3):
        writer.write_trials(trials[chunk.tolist()])
    return path


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--seed", "-1"], "argument --seed: seed must be a whole number >= 0, got -1"),
        (["--seed", "a"], "argument --seed: expected a whole number, got 'a'"),
        (["--n-boot", "1"], "n_boot=1 is too few for a 95% interval"),
        (["--n-boot", "1.5"], "argument --n-boot: expected a whole number"),
        (["--n-boot", str(10**9)], "n_boot=1000000000 would need about"),
        (["--alpha", "2"], "argument --alpha: must be between 0 and 1"),
        (["--x", "tokens"], "lacks required column(s): 'tokens'"),
        (["--y", "latency"], "did you mean 'latency_s' for 'latency'?"),
        (["--fail-on", "anomalies"], "argument --fail-on: unknown finding(s) ['anomalies']"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(run, capsys, args, says):
    assert main(["analyze", str(run), *args]) == 2
    err = one_line(capsys)
    assert err.startswith("regimes analyze: error: ") and says in err


def test_phase_time_of_an_uninstrumented_run_says_so(run, capsys):
    for y in ("decode_s", "prefill_s"):
        assert main(["analyze", str(run), "--y", y]) == 2
        err = one_line(capsys)
        assert "the run is not instrumented" in err and "null value" not in err


def test_python_m_regimes_writes_identical_tables_on_two_calls(run, tmp_path):
    """Two processes (different hash seeds), the same multi-session run and seed."""
    outputs = []
    for call in range(2):
        out = tmp_path / f"call{call}"
        done = subprocess.run(
            [sys.executable, "-m", "regimes", "analyze", str(run), "-o", str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert sorted(outputs[0]) == ["anomalies.csv", "change_points.csv", "curve.csv"]
    assert outputs[0] == outputs[1]
    assert outputs[0]["anomalies.csv"].count(b"\n") == 4  # the header and a spike per curve


def test_x_and_y_take_any_numeric_column(run, tmp_path, capsys):
    """``--x``/``--y`` take what the API takes: a table of the user's own column names."""
    own = tmp_path / "own.csv"
    trials = regimes.load(run).filter(~pl.col("warmup"))
    trials.select(tokens="budget", seconds="latency_s", model="model").write_csv(own)
    args = ["analyze", str(own), "--x", "tokens", "--y", "seconds", "--format", "json"]
    assert main([*args, "--n-boot", "200"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["params"]["x"], result["params"]["y"]) == ("tokens", "seconds")
    assert len(result["anomalies"]) == 3 and {"tokens", "median"} <= set(result["curve"][0])
