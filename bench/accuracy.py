"""Accuracy of ``detect_regimes`` on synthetic sweeps with known truth.

Every curve is analysed by its own ``detect_regimes`` call (one model's sweep, the way a
user runs it), so Benjamini-Hochberg never borrows strength from other curves. Each
scenario draws, per curve: 12-40 budgets (step 16), 3-10 trials per session, trial noise
CV 2-15 %, 0-3 % hiccups of 1.5-3x, 1-3 sessions with factors of 0-10 %, a
per-(session, budget) wobble of 0-3 %, linear or quadratic trends, and sessions shared
by the whole curve or fresh per budget (half of the curves each).

Figures (all printed):

* null scenarios (smooth, slope change, one slow process): share of curves with any
  reported anomaly, with a 95 % Clopper-Pearson interval; must stay <= alpha = 0.05;
* spikes: recall (a reported anomaly overlaps the true interval), boundaries exact to
  one grid step, precision of reported intervals;
* steps: share with a significant change point at the step, share reported as a step
  (not recovered), share wrongly reported as a recovered spike over the step;
* the published gpt2-medium example with 5 synthetic trials per budget at 10 % CV.

Run: ``python bench/accuracy.py [--curves 500] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
from statsmodels.stats.proportion import proportion_confint

from regimes import RegimesWarning, detect_regimes
from regimes.data.simulate import published_gpt2_medium, simulate_sweep

STEP = 16
CONDITIONS = dict(
    n_budgets=(12, 40),
    budget_step=STEP,
    trials=(3, 10),
    cv=(0.02, 0.15),
    hiccup_rate=(0.0, 0.03),
    hiccup_ratio=(1.5, 3.0),
    session_cv=(0.0, 0.10),
    cell_cv=(0.0, 0.03),
)


@dataclass(frozen=True)
class Scenario:
    """One simulated condition and whether its curves hold no anomaly."""

    name: str
    anomaly: str
    options: dict
    null: bool


SCENARIOS = [
    Scenario("null: smooth", "none", {"sessions": (1, 3)}, True),
    Scenario("null: slope change", "slope", {"sessions": (1, 3)}, True),
    Scenario("null: one slow process", "slow_process", {"sessions": (2, 3)}, True),
    Scenario(
        "spike >= 2x, 2-4 budgets",
        "spike",
        {"sessions": (1, 3), "ratio": (2.0, 4.0), "width": (2, 4)},
        False,
    ),
    Scenario(
        "plateau >= 2x, 30-60 % of grid",
        "plateau",
        {"sessions": (1, 3), "ratio": (2.0, 10.0)},
        False,
    ),
    Scenario(
        "spike 1.5x, 2-4 budgets",
        "spike",
        {"sessions": (1, 3), "ratio": 1.5, "width": (2, 4)},
        False,
    ),
    Scenario(
        "spike >= 2x, single budget",
        "spike",
        {"sessions": (1, 3), "ratio": (2.0, 4.0), "width": 1},
        False,
    ),
    Scenario("step >= 2x", "step", {"sessions": (1, 3), "ratio": (2.0, 4.0)}, False),
]


def make_curves(
    scenario: Scenario, n_curves: int, seed: int
) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Synthetic curves of one scenario, split over trends and session designs."""
    frames, truths = [], []
    quarter = n_curves // 4
    sizes = [quarter, quarter, quarter, n_curves - 3 * quarter]
    combos = [(t, d) for t in ("linear", "quadratic") for d in ("shared", "per_cell")]
    for k, ((trend, design), size) in enumerate(zip(combos, sizes, strict=True)):
        sweep = simulate_sweep(
            size,
            anomaly=scenario.anomaly,
            trend=trend,
            session_design=design,
            seed=seed * 100 + k,
            **CONDITIONS,
            **scenario.options,
        )
        prefix = f"{trend}-{design}-"
        trials = sweep.trials.with_columns((pl.lit(prefix) + pl.col("model")).alias("model"))
        truths.append(
            sweep.truth.with_columns(
                (pl.lit(prefix) + pl.col("model")).alias("model"),
                pl.lit(trend).alias("trend"),
                pl.lit(design).alias("design"),
            )
        )
        frames.extend(trials.partition_by("model", maintain_order=True))
    return frames, pl.concat(truths, how="diagonal_relaxed")


def analyse(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        rep = detect_regimes(frame)
    return (
        rep.anomalies.select(
            "model", "start", "end", "ratio", "ratio_low", "ratio_high", "recovered", "kind"
        ),
        rep.change_points.select("model", "x_before", "x_after", "ratio", "significant"),
    )


def rate(hits: int, n: int) -> str:
    low, high = proportion_confint(hits, n, alpha=0.05, method="beta") if n else (np.nan, np.nan)
    return f"{hits / n if n else float('nan'):.3f}  ({hits}/{n}; 95% CI {low:.3f}-{high:.3f})"


def score(
    scenario: Scenario, truth: pl.DataFrame, anomalies: pl.DataFrame, changes: pl.DataFrame
) -> list[str]:
    n = truth.height
    flagged = anomalies.get_column("model").unique()
    if scenario.null:
        hits = truth.filter(pl.col("model").is_in(flagged.implode())).height
        by = (
            truth.with_columns(pl.col("model").is_in(flagged.implode()).alias("hit"))
            .group_by("design")
            .agg(pl.col("hit").sum(), pl.len())
            .sort("design")
        )
        lines = [f"  share of curves with any anomaly: {rate(hits, n)}"]
        lines += [
            f"    sessions {r['design']}: {rate(int(r['hit']), int(r['len']))}"
            for r in by.iter_rows(named=True)
        ]
        return lines
    joined = anomalies.join(
        truth.select(
            "model",
            pl.col("start").alias("t_start"),
            pl.col("end").alias("t_end"),
            pl.col("ratio").alias("t_ratio"),
        ),
        on="model",
    )
    overlap = joined.filter(
        (pl.col("start") <= pl.col("t_end")) & (pl.col("end") >= pl.col("t_start"))
    )
    found = overlap.get_column("model").unique()
    exact = overlap.filter(
        ((pl.col("start") - pl.col("t_start")).abs() <= STEP)
        & ((pl.col("end") - pl.col("t_end")).abs() <= STEP)
    )
    covered = overlap.filter(
        (pl.col("ratio_low") <= pl.col("t_ratio")) & (pl.col("ratio_high") >= pl.col("t_ratio"))
    )
    lines = [
        f"  recall (an anomaly overlaps the truth): {rate(found.len(), n)}",
        "  both boundaries within one grid step: "
        f"{rate(exact.get_column('model').n_unique(), found.len())} of those found",
        f"  precision of reported intervals: {rate(overlap.height, anomalies.height)}",
        f"  ratio CI covers the true ratio: {rate(covered.height, overlap.height)}",
        "  estimated / true ratio: median {:.3f}, 10-90 % {:.3f}-{:.3f}".format(
            *overlap.select(
                (pl.col("ratio") / pl.col("t_ratio")).quantile(q).alias(str(q))
                for q in (0.5, 0.1, 0.9)
            ).row(0)
        )
        if overlap.height
        else "  estimated / true ratio: -",
    ]
    if scenario.anomaly == "step":
        at_step = changes.join(truth.select("model", "start"), on="model").filter(
            pl.col("significant") & ((pl.col("x_after") - pl.col("start")).abs() <= STEP)
        )
        as_step = overlap.filter(pl.col("kind") == "step")
        as_spike = overlap.filter(pl.col("recovered"))
        lines += [
            "  significant change point at the step: "
            f"{rate(at_step.get_column('model').n_unique(), n)}",
            "  reported as a step (no recovery): "
            f"{rate(as_step.get_column('model').n_unique(), n)}",
            "  reported as a recovered spike over the step: "
            f"{rate(as_spike.get_column('model').n_unique(), n)}",
        ]
    return lines


def published(n_seeds: int) -> list[str]:
    exact_one, covers_ten, covers_truth = 0, 0, 0
    ratios = []
    for seed in range(n_seeds):
        sweep = published_gpt2_medium(trials=5, cv=0.10, seed=seed)
        rep = detect_regimes(sweep.trials)
        a = rep.anomalies
        if a.height == 1 and a["start"][0] == 512 and a["end"][0] == 624:
            exact_one += 1
            lo, hi = a["ratio_low"][0], a["ratio_high"][0]
            covers_ten += lo <= 10.0 <= hi
            covers_truth += lo <= sweep.truth["ratio"][0] <= hi
            ratios.append(a["ratio"][0])
    truth = published_gpt2_medium().truth["ratio"][0]
    return [
        f"  exactly one anomaly, 512 to 624: {rate(exact_one, n_seeds)}",
        f"  ratio CI covers 10x: {rate(covers_ten, exact_one)}",
        f"  ratio CI covers the published geometric ratio {truth:.2f}x: "
        f"{rate(covers_truth, exact_one)}",
        f"  median ratio estimate: {np.median(ratios):.2f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", type=int, default=500, help="curves per scenario")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=None, help="run scenarios whose name contains this")
    args = parser.parse_args()
    print(f"detect_regimes accuracy: {args.curves} synthetic curves per scenario, seed {args.seed}")
    print(f"conditions: {CONDITIONS}")
    # spawn, not fork: polars' thread pool does not survive a fork
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for k, scenario in enumerate(SCENARIOS):
            if args.only and args.only not in scenario.name:
                continue
            started = time.perf_counter()
            frames, truth = make_curves(scenario, args.curves, args.seed * 1000 + k)
            results = list(pool.map(analyse, frames, chunksize=8))
            anomalies = pl.concat([r[0] for r in results])
            changes = pl.concat([r[1] for r in results])
            print(f"\n{scenario.name}  [{time.perf_counter() - started:.0f} s]")
            for line in score(scenario, truth, anomalies, changes):
                print(line, flush=True)
    if not args.only or "published" in args.only:
        print("\npublished gpt2-medium (MPS), 5 synthetic trials per budget, CV 10 %, 200 seeds")
        for line in published(200):
            print(line)


if __name__ == "__main__":
    main()
