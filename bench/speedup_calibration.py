"""Calibration and power of ``cache_speedup`` collapses on synthetic sweeps.

Every curve pair (one model measured with the cache on and off) is analysed by its own
``cache_speedup`` call, the way a user runs it, so nothing is pooled across curves.

* **Null scenarios**: smooth speedup curves with no collapse. Cache on is a linear
  latency trend, cache off a quadratic one with a larger per-token cost (the speedup
  grows with the budget), or both share one trend (a flat speedup near 1, as gpt2 on an
  H200 measures). Grids of 6, 12, 24 and 32 budgets; trial noise, hiccups, session
  factors shared by the curve or a fresh process per budget. Figure: the share of curves
  with any reported collapse, with a 95 % Clopper-Pearson interval; it must stay at or
  under alpha = 0.05.
* **Power**: a cache-on spike or plateau of 2-4x (the speedup collapses by as much) on
  12 or 24 budgets. Figures: recall (a reported collapse overlaps the truth) and the
  share with a collapse whose boundaries are within one grid step.
* **The published example**: the published gpt2-medium MPS cache table (docs/data.md;
  budgets 128..768) with 5 synthetic trials per cell at 10 % CV, one process per cell. Figures:
  the share of seeds whose one reported collapse is exactly 512 (recall), the share
  reporting anything else, and the share where the speedup's CI at 512 excludes every
  other budget's.

The figures go to ``--out`` (default ``bench/results/speedup_calibration.json``, see
``bench/record.py``).

Run: ``python bench/speedup_calibration.py [--curves 200] [--seeds 40] [--workers 2]
[--out PATH]``.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from record import Record
from workers import process_pool

from regimes import RegimesWarning
from regimes.data.simulate import published_gpt2_medium_cache, simulate_sweep
from regimes.speedup import cache_speedup

ALPHA = 0.05


@dataclass(frozen=True)
class Scenario:
    """One simulated design of cache-on and cache-off sweeps."""

    name: str
    grid: dict
    noise: dict
    flat: bool


NOISE = dict(trials=(3, 6), cv=(0.03, 0.15), hiccup_rate=(0.0, 0.03), session_cv=(0.0, 0.08))
SCENARIOS = [
    Scenario(
        "rising, 6 budgets, process per budget",
        dict(n_budgets=6, budget_step=128),
        {**NOISE, "sessions": 1, "session_design": "per_cell"},
        False,
    ),
    Scenario(
        "rising, 12 budgets, 1-2 shared sessions",
        dict(n_budgets=12, budget_step=32),
        {**NOISE, "sessions": (1, 2)},
        False,
    ),
    Scenario(
        "rising, 24 budgets, process per budget",
        dict(n_budgets=24, budget_step=32),
        {**NOISE, "sessions": 1, "session_design": "per_cell", "cell_cv": (0.0, 0.03)},
        False,
    ),
    Scenario(
        "flat ~1, 6 budgets, process per budget",
        dict(n_budgets=6, budget_step=128),
        {**NOISE, "sessions": 1, "session_design": "per_cell"},
        True,
    ),
    Scenario(
        "flat ~1, 32 budgets, 2 sessions, CV 10-25 % (H200-like)",
        dict(n_budgets=32, budget_step=16),
        {**NOISE, "cv": (0.10, 0.25), "trials": (4, 5), "sessions": 2},
        True,
    ),
    # process factors far above the trial noise: the between-cell variance dwarfs
    # what a cell's replicates show
    Scenario(
        "rising, 6 budgets, process factor >> trial noise",
        dict(n_budgets=6, budget_step=128),
        {
            **NOISE,
            "cv": (0.01, 0.04),
            "session_cv": (0.05, 0.12),
            "sessions": 1,
            "session_design": "per_cell",
        },
        False,
    ),
    Scenario(
        "flat ~1, 12 budgets, process factor >> trial noise",
        dict(n_budgets=12, budget_step=32),
        {
            **NOISE,
            "cv": (0.01, 0.04),
            "session_cv": (0.05, 0.12),
            "sessions": 1,
            "session_design": "per_cell",
        },
        True,
    ),
    Scenario(
        "rising, 24 budgets, kernel wobble per budget >> trial noise",
        dict(n_budgets=24, budget_step=32),
        {**NOISE, "cv": (0.01, 0.04), "cell_cv": (0.04, 0.10), "sessions": (1, 2)},
        False,
    ),
]


POWER = [
    Scenario(
        "cache-on spike 2-4x over 2-4 budgets, 12 budgets",
        dict(n_budgets=12, budget_step=32),
        {**NOISE, "sessions": (1, 2), "anomaly": "spike", "width": (2, 4)},
        False,
    ),
    Scenario(
        "cache-on spike 2-4x over 2-4 budgets, 24 budgets",
        dict(n_budgets=24, budget_step=32),
        {**NOISE, "sessions": (1, 2), "anomaly": "spike", "width": (2, 4)},
        False,
    ),
    Scenario(
        "cache-on plateau 2-4x over 30-60 % of 24 budgets",
        dict(n_budgets=24, budget_step=32),
        {**NOISE, "sessions": (1, 2), "anomaly": "plateau"},
        False,
    ),
]


def smooth_pair(scenario: Scenario, seed: int) -> pl.DataFrame:
    """Simulate cache-on and cache-off trials of one model.

    The speedup is smooth (or, with an ``anomaly`` in the scenario's noise, a cache-on
    anomaly: a collapse).
    """
    return _pair(scenario, seed)[0]


def _pair(scenario: Scenario, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    intercept, per_token = float(rng.uniform(0.02, 0.2)), float(rng.uniform(0.002, 0.02))
    noise = {k: v for k, v in scenario.noise.items() if k not in ("anomaly", "width")}
    cache_on = simulate_sweep(
        1,
        **scenario.grid,
        **scenario.noise,
        intercept_s=intercept,
        per_token_s=per_token,
        seed=2 * seed,
    )
    on = cache_on.trials
    off_trend = (
        dict(intercept_s=intercept, per_token_s=per_token)
        if scenario.flat
        else dict(
            trend="quadratic",
            intercept_s=intercept,
            per_token_s=per_token * float(rng.uniform(3.0, 10.0)),
        )
    )
    off = simulate_sweep(1, **scenario.grid, **noise, **off_trend, seed=2 * seed + 1).trials
    off = off.with_columns(pl.lit(False).alias("use_cache"), pl.col("session") + 10_000)
    return pl.concat([on, off], how="diagonal_relaxed"), cache_on.truth


def _null_curve(job: tuple[int, int]) -> int:
    scenario, seed = SCENARIOS[job[0]], job[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        result = cache_speedup(smooth_pair(scenario, seed))
    return int(result.collapses.height > 0)


def _power_curve(job: tuple[int, int]) -> tuple[bool, bool]:
    """Score one draw with a true cache-on anomaly.

    Whether a reported collapse overlaps the true cache-on anomaly, and whether one
    matches its boundaries to one grid step.
    """
    scenario, seed = POWER[job[0]], job[1]
    trials, truth = _pair(scenario, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        found = cache_speedup(trials).collapses
    row = truth.row(0, named=True)
    step = scenario.grid["budget_step"]
    overlap = found.filter((pl.col("start") <= row["end"]) & (pl.col("end") >= row["start"]))
    exact = overlap.filter(
        ((pl.col("start") - row["start"]).abs() <= step)
        & ((pl.col("end") - row["end"]).abs() <= step)
    )
    return overlap.height > 0, exact.height > 0


def _published(seed: int) -> tuple[bool, bool, bool]:
    result = cache_speedup(published_gpt2_medium_cache(seed=seed))
    found = result.collapses
    exact = (
        found.height == 1
        and found.row(0, named=True)["start"] == 512 == found.row(0, named=True)["end"]
    )
    table = result.speedup
    at = table.filter(pl.col("budget") == 512)
    apart = (
        float(at.get_column("ci_high")[0])
        < table.filter(pl.col("budget") != 512).get_column("ci_low").min()
    )
    return exact, found.height > 0 and not exact, apart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", type=int, default=200, help="curves per null scenario")
    parser.add_argument("--seeds", type=int, default=40, help="seeds of the published example")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("speedup_calibration", dict(vars(args), alpha=ALPHA))
    with process_pool(args.workers) as pool:
        print(
            f"Null scenarios ({args.curves} curves each, alpha = {ALPHA}): share of curves "
            "with any reported collapse"
        )
        for k, scenario in enumerate(SCENARIOS):
            hits = sum(pool.map(_null_curve, [(k, s) for s in range(args.curves)], chunksize=8))
            shown = record.rate(scenario.name, "any collapse", hits, args.curves)
            print(f"  {scenario.name:<58} {shown}")
        print(
            f"Collapses ({args.curves} curves each): recall (overlap), boundaries within one step"
        )
        for k, scenario in enumerate(POWER):
            found = list(pool.map(_power_curve, [(k, s) for s in range(args.curves)], chunksize=8))
            recall = record.rate(scenario.name, "recall", sum(f[0] for f in found), args.curves)
            exact = record.rate(
                scenario.name, "boundaries within one step", sum(f[1] for f in found), args.curves
            )
            print(f"  {scenario.name:<58} {recall}; exact {exact}")
        outcomes = list(pool.map(_published, range(args.seeds)))
    title = f"Published cache table, 5 synthetic trials per cell at 10 % CV ({args.seeds} seeds)"
    print(title)
    out = record.section(title)
    published = ("the one collapse is 512", "some other collapse reported", "CI at 512 apart")
    for i, metric in enumerate(published):
        print(out.rate(metric, sum(o[i] for o in outcomes), args.seeds))
    print(f"({record.meta()['seconds']:.0f} s)")
    record.write(args.out)


if __name__ == "__main__":
    main()
