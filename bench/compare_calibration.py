"""Calibration and power of ``compare_runs`` on pairs of synthetic runs.

Each pair is two runs of one smooth curve (the same intercept and per-token cost, drawn
per pair) with independent trial noise, process effects and hiccups
(:func:`regimes._compare.synthetic.synthetic_pair`, labelled synthetic), compared by its
own ``compare_runs`` call, the way a user runs it. Scenarios: the same 3x spike over
two budgets in both runs; no spike; no spike and the new run 10 % slower throughout;
the spike removed; the spike added; the spike moved one grid step later.

Main design: 24 budgets (16..384), 5 trials in each of 2 processes a run (each process
runs every budget), trial CV 5 %, process-to-process sd 5 % (the committed H200 gpt2
run measures about 5.5 %), 1 % of trials slowed 1.5-3x, alpha = 0.05. Figures per
scenario, with 95 % Clopper-Pearson intervals:

* **expected**: the share of pairs whose regimes got exactly the true statuses
  (``persists``; none; none; ``vanished``; ``appeared``; ``changed``);
* **false status**: the share with a status claiming a change the pair does not have
  (``appeared``, ``vanished`` or ``changed`` where the truth is otherwise; an
  ``inconclusive`` claims nothing);
* **false budget**: the share with a budget outside every regime reported as
  departing from the shift (none does in any scenario);
* **shift significant** and **shift covered** (the interval holds the true shift,
  1.10 or 1);
* **ratio of ratios covered**: of the pairs with one tested regime, the share whose
  interval holds the true ratio of ratios (1 for the same spike, 1/3 removed, 3 added;
  none for a moved one, see :func:`true_ratio_of_ratios`).

Then the shift's power with more processes or quieter ones, and the harder case of a
2x one-budget spike removed with 3 trials in a single process a run (where ``vanished``
needs the new run's power at that budget).

The figures go to ``--out`` (default ``bench/results/compare_calibration.json``, see
``bench/record.py``): one row per scenario or design and figure.

Run: ``python bench/compare_calibration.py [--pairs 200] [--workers 1] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
from record import Record
from workers import process_pool

from regimes import RegimesWarning
from regimes._compare.synthetic import EXPECTED_STATUSES as EXPECTED
from regimes._compare.synthetic import SCENARIOS, synthetic_pair
from regimes.compare import compare_runs

ALPHA = 0.05
CLAIMS = ("appeared", "vanished", "changed")


def true_ratio_of_ratios(scenario: str, design: dict[str, Any]) -> float | None:
    """Return the true ratio of ratios (new / base) of the scenario's regime.

    ``None`` for a moved spike: the union tested is elevated over different budgets in
    the two runs, so its ratio over trend depends on where within it each run's trend
    is drawn, and the boundary test, not the ratio, carries the claim.
    """
    ratio = float(design.get("ratio", 3.0))
    return {"same": 1.0, "removed": 1.0 / ratio, "added": ratio}.get(scenario)


def one_pair(job: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    scenario, seed, design = job
    pair = synthetic_pair(scenario, seed=seed, **design)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        result = compare_runs(pair.base, pair.new, n_boot=200, alpha=ALPHA)
    statuses = sorted(result.changes.get_column("status").to_list())
    claims = [s for s in statuses if s in CLAIMS]
    shift = result.shift.row(0, named=True)
    normal = result.budgets.filter(~result.budgets.get_column("in_anomaly"))
    rows = result.changes.filter(pl.col("ratio_of_ratios").is_not_null())
    truth, rr = pair.truth["shift"], true_ratio_of_ratios(scenario, design)
    return {
        "expected": statuses == EXPECTED[scenario],
        # a claim the truth does not hold; a missed regime is not a false status
        "false_status": bool(Counter(claims) - Counter(EXPECTED[scenario])),
        "false_budget": bool(normal.get_column("differs").fill_null(False).any()),
        "shift_significant": shift["q_value"] is not None and shift["q_value"] < ALPHA,
        "shift_covered": shift["shift_low"] is not None
        and shift["shift_low"] <= truth <= shift["shift_high"],
        "rr_tested": rr is not None and rows.height == 1,
        "rr_covered": rr is not None
        and rows.height == 1
        and rows["ratio_low"][0] <= rr <= rows["ratio_high"][0],
    }


def run(scenario: str, design: dict[str, Any], pairs: int, pool: Any) -> dict[str, int]:
    jobs = [(scenario, seed, design) for seed in range(pairs)]
    results = list(pool.map(one_pair, jobs, chunksize=4) if pool else map(one_pair, jobs))
    return {k: sum(r[k] for r in results) for k in results[0]}


FIGURES = {
    "expected": "expected statuses",
    "false_status": "false status",
    "false_budget": "false budget",
    "shift_significant": "shift significant",
    "shift_covered": "shift covered",
    "rr_covered": "ratio of ratios covered",
}
"""Each counted figure and its name in the table and the JSON rows."""


def row(record: Record, what: str, c: dict[str, int], n: int, columns: tuple[str, ...]) -> str:
    """Record one scenario's rates and return its line of the printed table."""
    cells = [
        record.rate(what, FIGURES[k], c["rr_covered"], c["rr_tested"])
        if k == "rr_covered"
        else record.rate(what, FIGURES[k], c[k], n)
        for k in columns
    ]
    return "| " + " | ".join([what, *cells]) + " |"


MAIN = ("expected", "false_status", "false_budget", "shift_significant", "shift_covered")
EXTRA = [
    ("10 % shift, 4 processes a run", "shift", {"sessions": 4}),
    ("10 % shift, process sd 1 %", "shift", {"session_cv": 0.01}),
    ("no change, 4 processes a run", "noise", {"sessions": 4}),
    ("no change, a fresh process per budget", "noise", {"session_design": "per_cell"}),
    ("10 % shift, a fresh process per budget", "shift", {"session_design": "per_cell"}),
    (
        "2x one-budget spike removed, 3 trials, 1 process a run",
        "removed",
        {"ratio": 2.0, "width": 1, "trials": 3, "sessions": 1},
    ),
    (
        "2x one-budget spike in both, 3 trials, 1 process a run",
        "same",
        {"ratio": 2.0, "width": 1, "trials": 3, "sessions": 1},
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="pairs per main scenario")
    parser.add_argument("--extra", type=int, default=100, help="pairs per extra design")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("compare_calibration", dict(vars(args), alpha=ALPHA))
    pool = process_pool(args.workers) if args.workers > 1 else None
    print(f"main design: {args.pairs} pairs per scenario, alpha={ALPHA}")
    columns = (*MAIN, "rr_covered")
    head = ["scenario", *(FIGURES[k] for k in columns)]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for scenario, what in SCENARIOS.items():
        c = run(scenario, {}, args.pairs, pool)
        print(row(record, what, c, args.pairs, columns), flush=True)
    print(f"\nother designs: {args.extra} pairs each")
    columns = ("expected", "false_status", "shift_significant", "shift_covered", "rr_covered")
    head = ["design", *(FIGURES[k] for k in columns)]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for what, scenario, design in EXTRA:
        c = run(scenario, design, args.extra, pool)
        print(row(record, what, c, args.extra, columns), flush=True)
    print(f"\n{record.meta()['seconds']:.0f} s")
    record.write(args.out)


if __name__ == "__main__":
    main()
