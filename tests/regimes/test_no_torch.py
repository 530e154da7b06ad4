"""The statistics core works where torch is not installed at all."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A finder whose loader refuses torch and transformers: every import of them raises
# ImportError, as on a broken or absent install. (Not sys.modules[name] = None: scipy
# looks torch up in sys.modules and would trip over the None; and the finder must still
# return a spec, since polars only probes for torch with importlib.util.find_spec.)
SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import importlib.machinery
    import sys

    class Refuse(importlib.abc.Loader):
        def create_module(self, spec):
            raise ImportError(f"{spec.name} is not installed here")

        def exec_module(self, module):
            raise ImportError(f"{module.__name__} is not installed here")

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "transformers"):
                return importlib.machinery.ModuleSpec(name, Refuse())
            return None

    sys.meta_path.insert(0, NoTorch())
    import regimes
    df = regimes.load("examples/data/cpu-distilgpt2")
    report = regimes.detect_regimes(df, n_boot=200)
    speedup = regimes.cache_speedup(df, n_boot=200)
    chart = regimes.plot.latency_chart(report, df)
    from regimes.cli import main
    assert main(["analyze", "examples/data/cpu-distilgpt2", "--n-boot", "200"]) == 0
    assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
    print("anomalies", report.anomalies.height, "collapses", speedup.collapses.height)
    """
)


def test_analysis_runs_without_torch():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "anomalies 0 collapses 0" in done.stdout
