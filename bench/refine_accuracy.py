"""Accuracy and cost of ``refine_boundaries`` with a simulated probe oracle (synthetic).

Each case is a coarse grid (448..688 step 16, 3 trials and one warm-up per budget, one
session) of a smooth latency curve with a slowdown of ``factor`` injected on a random
interval ``start..stop`` (start in 470..560, 48-140 tokens long, so most boundaries fall
between grid points), trial noise ``cv`` (log-scale sd), a per-session factor of
``cv / 2`` and 1 % hiccups of 1.5-3x. ``refine_boundaries`` then probes with the same
oracle (a fresh session per round) at ``error_rate = 0.01``, ``resolution = 1``.

Per true boundary (onset ``start - 1 | start``, recovery ``stop | stop + 1``):

* **exact**: resolved to exactly the true bracket;
* **wrong**: the final bracket does not contain the true boundary (a wrong decision;
  resolved or not);
* **open**: not resolved, but the bracket still contains the truth (undecided or
  partial probes: honest);
* **missed**: the grid detection found no boundary whose grid bracket holds it
  (nothing to refine).

Cost: generations spent (warm-ups included) over those of a dense 1-token grid over
448..688 with the same 3 trials and warm-up per budget (964 generations).

The figures go to ``--out`` (default ``bench/results/refine_accuracy.json``, see
``bench/record.py``): the outcomes' rates and the median cost per factor and noise,
then over every case.

Run: ``python bench/refine_accuracy.py [--seeds 10] [--workers 2] [--out PATH]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from record import Record
from workers import process_pool

from regimes.refine import SimulatedProbe, refine_boundaries

GRID = list(range(448, 689, 16))
FACTORS = (1.5, 2.0, 3.0, 5.0, 10.0)
NOISE = (0.02, 0.05, 0.10, 0.20)
DENSE = (GRID[-1] - GRID[0] + 1) * 4
"""A dense 1-token grid over the same range: 3 trials and a warm-up per budget."""


def one_case(args: tuple[float, float, int]) -> list[dict]:
    factor, cv, seed = args
    rng = np.random.default_rng((int(factor * 10), int(cv * 100), seed))
    start = int(rng.integers(470, 561))
    stop = start + int(rng.integers(48, 141))
    oracle = SimulatedProbe(start, stop, factor, cv=cv, session_cv=cv / 2, seed=seed)
    coarse = oracle.sweep(GRID, trials=3)
    result = refine_boundaries(coarse, probe=oracle)
    latency = result.boundaries.filter(pl.col("source") == "latency")
    rows = []
    for kind, first in (("onset", start), ("recovery", stop + 1)):
        # the boundary whose grid bracket holds the truth (a significant change point
        # there refines it just as well as an anomaly's onset or recovery)
        found = latency.filter(
            pl.col("kind").is_in([kind, "change"])
            & (pl.col("grid_low") < first)
            & (pl.col("grid_high") >= first)
        )
        outcome = "missed"
        if found.height:
            row = found.row(0, named=True)
            contains = row["low"] <= first - 1 and row["high"] >= first
            if not contains:
                outcome = "wrong"
            elif row["resolved"] and (row["low"], row["high"]) == (first - 1, first):
                outcome = "exact"
            else:
                outcome = "open"
        rows.append(
            dict(
                factor=factor,
                cv=cv,
                seed=seed,
                kind=kind,
                outcome=outcome,
                generations=result.generations,
                dense=DENSE,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("refine_accuracy", vars(args))
    cases = [(f, cv, s) for f in FACTORS for cv in NOISE for s in range(args.seeds)]
    with process_pool(args.workers) as pool:
        rows = [r for part in pool.map(one_case, cases) for r in part]
    table = pl.DataFrame(rows)
    per_run = table.unique(["factor", "cv", "seed"]).with_columns(
        (pl.col("generations") / pl.col("dense")).alias("cost")
    )
    outcome = (
        table.group_by("factor", "cv")
        .agg(
            pl.len().alias("boundaries"),
            *[
                (pl.col("outcome") == o).mean().alias(o)
                for o in ("exact", "wrong", "open", "missed")
            ],
        )
        .join(
            per_run.group_by("factor", "cv").agg(pl.col("cost").median().alias("cost_median")),
            on=["factor", "cv"],
        )
        .sort("factor", "cv")
    )
    with pl.Config(tbl_rows=50, tbl_cols=12, float_precision=3):
        print(outcome)
    for row in outcome.iter_rows(named=True):
        section = f"factor {row['factor']:g}, noise {row['cv']:g}"
        for name in OUTCOMES:
            record.rate(section, name, round(row[name] * row["boundaries"]), row["boundaries"])
        record.value(section, "median cost vs dense grid", row["cost_median"], unit="share")
    report(table, per_run, record)
    record.write(args.out)


OUTCOMES = ("exact", "wrong", "open", "missed")
"""What became of a true boundary (the module docstring says each)."""


def report(table: pl.DataFrame, per_run: pl.DataFrame, record: Record) -> None:
    """Print and record the outcomes and the cost over every case."""
    share = {o: (table["outcome"] == o).mean() for o in OUTCOMES}
    found = table.filter(pl.col("outcome") != "missed")
    cost = per_run["cost"]
    section = f"all: {table.height} true boundaries in {per_run.height} runs"
    for name in OUTCOMES:
        record.rate(section, name, int((table["outcome"] == name).sum()), table.height)
    exact_found = int((found["outcome"] == "exact").sum())
    record.rate(section, "exact, of those the grid detection found", exact_found, found.height)
    for name, value in (
        ("median", cost.median()),
        ("90th percentile", cost.quantile(0.9)),
        ("max", cost.max()),
    ):
        record.value(section, f"cost vs dense grid, {name}", value, unit="share")
    seconds = record.meta()["seconds"]
    print(f"\n{table.height} true boundaries in {per_run.height} synthetic runs ({seconds:.0f} s)")
    print(
        f"  exact: {share['exact']:.1%} of all, "
        f"{(found['outcome'] == 'exact').mean():.1%} of those the grid detection found"
    )
    print(
        f"  wrong: {share['wrong']:.1%}; open (honest, unresolved): {share['open']:.1%}; "
        f"missed by the grid detection: {share['missed']:.1%}"
    )
    print(
        f"  cost vs dense 1-token grid: median {cost.median():.1%}, "
        f"90th percentile {cost.quantile(0.9):.1%}, max {cost.max():.1%}"
    )
    odd = table.filter(pl.col("outcome").is_in(["wrong", "open"]))
    if odd.height:
        print("  not exact:", odd.select("factor", "cv", "seed", "kind", "outcome").rows())


if __name__ == "__main__":
    main()
