"""The statistics core works where torch is not installed at all."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import regimes
    df = regimes.load("examples/data/cpu-distilgpt2")
    report = regimes.detect_regimes(df, n_boot=200)
    speedup = regimes.cache_speedup(df)
    chart = regimes.plot.latency_chart(report, df)
    from regimes.cli import main
    assert main(["analyze", "examples/data/cpu-distilgpt2", "--n-boot", "200"]) == 0
    assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
    print("anomalies", report.anomalies.height, "collapses", speedup.collapses.height)
    """
)


def test_analysis_runs_without_torch(without_torch):
    done = subprocess.run(
        [sys.executable, "-c", without_torch + SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "anomalies 0 collapses 0" in done.stdout
