"""Fixtures shared across the test suite.

Test modules never import each other (pytest runs with ``--import-mode=importlib``, so
test files of the same basename may live in different folders). What several modules
need lives here, as fixtures.

All data built here is synthetic (``regimes.data.simulate``; run ids and model names
start with ``synthetic-``).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from regimes.data.simulate import Sweep, simulate_sweep

REPO = Path(__file__).resolve().parent.parent
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class SyntheticRun:
    """A small synthetic sweep with one known spike, as trials or as a run directory.

    ``synthetic-spiky`` has a 4-budget spike of ``spike_ratio`` with the cache on; every
    other curve is smooth. Cache-off latency grows faster (quadratic), as without a KV
    cache. The spike covers budgets 96-144 (the sweep's truth).
    """

    grid = 16
    spike_ratio = 6.0
    spike_seed = 2

    def sweeps(self, *, both_cache: bool = True) -> list[tuple[str, bool, Sweep]]:
        """The synthetic curves of the run: ``(model, use_cache, sweep)``."""
        common: dict[str, Any] = dict(n_budgets=self.grid, trials=4, sessions=2)
        spiky = simulate_sweep(
            1, anomaly="spike", width=4, ratio=self.spike_ratio, seed=self.spike_seed, **common
        )
        curves = [
            ("synthetic-spiky", True, spiky),
            ("synthetic-smooth", True, simulate_sweep(1, seed=11, **common)),
        ]
        if both_cache:
            curves += [
                (
                    name,
                    False,
                    simulate_sweep(1, trend="quadratic", per_token_s=0.06, seed=seed, **common),
                )
                for name, seed in (("synthetic-spiky", 12), ("synthetic-smooth", 13))
            ]
        return curves

    @property
    def truth(self) -> dict[str, Any]:
        """The planted spike: ``start``, ``end``, ``ratio`` ..."""
        return self.sweeps()[0][2].truth.row(0, named=True)

    def trials(self, *, instrumented: bool = True, both_cache: bool = True) -> pl.DataFrame:
        """The trial table of :meth:`sweeps`, with phase times when instrumented."""
        trials = pl.concat(
            [
                sweep.trials.with_columns(
                    pl.lit(model).alias("model"), pl.lit(cache).alias("use_cache")
                )
                for model, cache, sweep in self.sweeps(both_cache=both_cache)
            ]
        ).drop("source")  # not a trial-table column; run_id still says synthetic
        if instrumented:
            # About 10 ms of prefill with 5% noise, never more than 30% of the latency.
            noise = np.random.default_rng(0).lognormal(0.0, 0.05, trials.height)
            prefill = pl.min_horizontal(pl.col("latency_s") * 0.3, pl.lit(noise) * 0.01)
            trials = trials.with_columns(
                prefill.alias("prefill_s"),
                (pl.col("latency_s") - prefill).alias("decode_s"),
                pl.lit(True).alias("instrumented"),
            )
        return trials

    def meta(self) -> dict[str, Any]:
        """The run metadata written next to the trials."""
        return {
            "name": "synthetic-report-test",
            "environment": {"os": "Linux (synthetic)", "torch": "synthetic", "chip": "none"},
            "env_vars": {"PYTORCH_ENABLE_MPS_FALLBACK": "1"},
            "spec": {"budgets": [16 * i for i in range(1, self.grid + 1)], "trials": 4},
        }

    def write(self, path: Path, *, instrumented: bool = True, both_cache: bool = True) -> Path:
        """Write :meth:`trials` as a run directory with metadata; return ``path``."""
        from regimes import RunWriter

        trials = self.trials(instrumented=instrumented, both_cache=both_cache)
        RunWriter(path, self.meta()).write_trials(trials)
        return path


@pytest.fixture(scope="session")
def synthetic_run() -> SyntheticRun:
    """The synthetic run shared by the report, chart, browser and CLI tests."""
    return SyntheticRun()


def public_modules(package: str) -> list[str]:
    """Every module of ``package`` whose dotted name has no ``_``-prefixed part."""
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return sorted(names)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``public_module`` over the public modules of the test module's
    ``DOCTEST_PACKAGE``, so that a new module's examples are run without a new test.
    """
    if "public_module" in metafunc.fixturenames:
        package = metafunc.module.DOCTEST_PACKAGE
        metafunc.parametrize("public_module", public_modules(package))


@pytest.fixture
def run_doctests(monkeypatch: pytest.MonkeyPatch) -> Callable[[Sequence[doctest.DocTest]], int]:
    """Run doctests from the repository root; fail with doctest's report; return the
    number of examples run.
    """

    def run(tests: Sequence[doctest.DocTest]) -> int:
        monkeypatch.chdir(REPO)
        runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
        report: list[str] = []
        for test in tests:
            runner.run(test, out=report.append)
        if runner.failures:
            pytest.fail("".join(report), pytrace=False)
        return runner.tries

    return run


@pytest.fixture(scope="session")
def assert_frame_close() -> Callable[[pl.DataFrame, pl.DataFrame, float], None]:
    """``assert_frame_equal`` with a relative tolerance, on every supported polars.

    The keyword is ``rtol`` in older polars and ``rel_tol`` in newer ones; the test
    suite runs on both (``make test-floors``).
    """
    parameters = inspect.signature(assert_frame_equal).parameters
    keyword = "rel_tol" if "rel_tol" in parameters else "rtol"

    def check(left: pl.DataFrame, right: pl.DataFrame, rel: float) -> None:
        assert_frame_equal(left, right, check_exact=False, **{keyword: rel})

    return check


# A finder whose loader refuses torch and transformers: every import of them raises
# ModuleNotFoundError, as on a broken or absent install. (Not sys.modules[name] = None:
# scipy looks torch up in sys.modules and would trip over the None; and the finder must
# still return a spec, since polars only probes for torch with importlib.util.find_spec.)
_WITHOUT_TORCH = """
import importlib.abc, importlib.machinery, sys

class Refuse(importlib.abc.Loader):
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

    def exec_module(self, module):
        raise ModuleNotFoundError(f"No module named {module.__name__!r}")

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            return importlib.machinery.ModuleSpec(name, Refuse())
        return None

sys.meta_path.insert(0, NoTorch())
"""


@pytest.fixture
def without_torch() -> str:
    """Python source to start a ``python -c`` script with: torch and transformers absent."""
    return _WITHOUT_TORCH
