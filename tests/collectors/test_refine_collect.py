"""Refinement of a real CPU run with a known injected slowdown (``tiny-gpt2``).

The collector's fault injection (spec key ``inject``) slows real generation by a known
factor on a known budget interval, so the exact brackets are known; such runs are
marked synthetic in ``meta.json``. The probes are measured by the run's own spec in
fresh sessions appended to the run (:mod:`collectors.refine`).

Torch runs single-threaded here: on a shared machine two threads fighting other work
made a token 15 times slower than one thread.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from collectors.refine import run_prober  # noqa: E402
from collectors.spec import SweepSpec  # noqa: E402
from collectors.sweep import run_sweep  # noqa: E402
from regimes.cli import main  # noqa: E402
from regimes.data.io import read_run  # noqa: E402
from regimes.refine import refine_boundaries  # noqa: E402


def _spec(budgets: dict[str, int], start: int, stop: int, factor: float = 3.0) -> SweepSpec:
    return SweepSpec.from_dict(
        {
            "models": ["tiny-gpt2"],
            "backends": ["cpu"],
            "use_cache": [True],
            "prompt_tokens": [65],
            "budgets": budgets,
            "trials": 3,
            "warmup": 1,
            "sessions": 1,
            "isolation": "none",
            "engine": "loop",
            "inject": {"start": start, "stop": stop, "factor": factor},
            "seed": 0,
        }
    )


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _brackets(result) -> list[tuple[str, int, int, bool]]:
    return result.boundaries.select("kind", "low", "high", "resolved").rows()


@pytest.mark.slow
def test_probes_are_appended_in_fresh_sessions_and_a_rerun_continues(tmp_path):
    """Budgets 8..72 step 8, 10x injected on 21..50; two short slices of refinement.

    A large factor: generations this short are dominated by fixed costs and jitter.
    Slow (over a minute on a shared 2-core machine); tests/regimes/test_refine.py covers
    the same logic with the simulated oracle.
    """
    run = tmp_path / "run"
    grid = list(range(8, 73, 8))
    spec = _spec({"start": 8, "stop": 72, "step": 8}, 21, 50, factor=10.0)
    assert run_sweep(spec, run, progress=False).status == "complete"
    before = read_run(run).trials.height
    first = refine_boundaries(run, probe=run_prober(run), max_generations=16)
    on_disk = read_run(run)
    assert 0 < first.generations <= 16
    assert on_disk.trials.height == before + first.generations
    assert on_disk.meta["synthetic"] is True and on_disk.meta["batches"]
    probes = on_disk.trials.filter(~pl.col("budget").is_in(grid))
    assert 0 not in set(probes.get_column("session"))  # fresh sessions only
    expected = [10.0 if 21 <= b <= 50 else 1.0 for b in probes.get_column("budget")]
    assert probes.get_column("injected_factor").to_list() == expected
    second = refine_boundaries(run, probe=run_prober(run), max_generations=16)
    assert second.probes.filter(pl.col("on_disk")).height >= 1
    assert read_run(run).trials.height == before + first.generations + second.generations
    # every bracket, resolved or not, holds a true boundary (21: onset, 51: recovery)
    for row in second.boundaries.iter_rows(named=True):
        held = [t for t in (21, 51) if row["low"] < t <= row["high"]]
        assert held, second.summary()


@pytest.mark.slow
def test_acceptance_cpu_injected_3x_on_505_633(tmp_path, capsys):
    """The issue's acceptance case: grid 480..656 step 16, 3x injected on 505..633.

    ``regimes refine RUN --format json`` must report the onset bracket (504, 505) and the
    recovery bracket (633, 634) and spend at most 15 % of the generations of a dense
    1-token grid over 480..656 with the same trials (177 budgets x (3 trials + 1
    warm-up) = 708).
    """
    run = tmp_path / "run"
    coarse = run_sweep(
        _spec({"start": 480, "stop": 656, "step": 16}, 505, 633), run, progress=False
    )
    assert coarse.status == "complete"
    assert main(["refine", str(run), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["low"], r["high"], r["resolved"]) for r in records] == [
        ("onset", 504, 505, True),
        ("recovery", 633, 634, True),
    ]
    dense = (656 - 480 + 1) * (3 + 1)
    spent = sum(r["generations"] for r in records)
    assert spent <= 0.15 * dense
    summary = refine_boundaries(run)  # what is on disk answers; nothing more is measured
    assert summary.generations == 0
    print(f"\nacceptance: {records}\n{summary.summary()}\nspent {spent} of {dense}")
