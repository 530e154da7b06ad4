"""Speed of ``detect_regimes`` against the straightforward pipeline, on synthetic sweeps.

The main case is the one of the specification: 1,000 curves x 50 budgets x 20 trials
(1,000,000 rows), 2,000-resample intervals, on the machine at hand. Curves are synthetic:
80 % smooth, 10 % with a spike, 10 % with a step; noise CV 2-15 %; one process per curve,
so every cell holds one session and gets the exact order-statistic interval.

Printed, each as the median of ``--repeats`` runs in this process:

* ``detect_regimes`` on the 1M rows, and its parts;
* the straightforward alternative on a slice of the same data (per cell
  ``scipy.stats.bootstrap`` of the median with 2,000 resamples, then
  ``ruptures.Pelt(model="l2")`` with its defaults on each curve's cell medians),
  extrapolated to all curves, and the speed ratio;
* how time grows with budgets per curve (50, 500, 5,000) at a fixed 1M rows;
* a multi-session case (3 sessions per cell: the hierarchical bootstrap).

Run: ``python bench/speed.py [--repeats 3] [--slice 20]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings

import numpy as np
import polars as pl
import ruptures as rpt
from scipy import stats

from regimes import RegimesWarning, detect_regimes
from regimes.data.simulate import simulate_sweep

NOISE = dict(cv=(0.02, 0.15), hiccup_rate=(0.0, 0.03), session_cv=(0.0, 0.05))


def sweep(
    n_curves: int, n_budgets: int, trials: int, sessions: int = 1, seed: int = 0
) -> pl.DataFrame:
    """Synthetic sweep: 80 % smooth curves, 10 % spikes, 10 % steps."""
    parts = []
    for k, (kind, share) in enumerate((("none", 0.8), ("spike", 0.1), ("step", 0.1))):
        count = max(1, int(round(n_curves * share)))
        trials_frame = simulate_sweep(
            count,
            anomaly=kind,
            n_budgets=n_budgets,
            trials=trials,
            sessions=sessions,
            ratio=(2.0, 4.0),
            width=(2, 4),
            seed=seed * 10 + k,
            **NOISE,
        ).trials
        parts.append(
            trials_frame.with_columns((pl.lit(f"{kind}-") + pl.col("model")).alias("model"))
        )
    return pl.concat(parts)


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def detect(frame: pl.DataFrame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        return detect_regimes(frame, n_boot=2000)


def straightforward(frame: pl.DataFrame) -> int:
    """Per-cell scipy bootstrap of the median, then Pelt (defaults) per curve."""
    found = 0
    for _, curve in frame.group_by("model", maintain_order=True):
        medians = []
        for _, cell in curve.sort("budget").group_by("budget", maintain_order=True):
            values = cell["latency_s"].to_numpy()
            stats.bootstrap(
                (values,), np.median, n_resamples=2000, method="percentile", random_state=0
            )
            medians.append(np.median(values))
        signal = np.log(np.asarray(medians)).reshape(-1, 1)
        found += len(rpt.Pelt(model="l2").fit(signal).predict(pen=3 * np.log(len(medians)))) - 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--slice", type=int, default=20, help="curves for the straightforward pipeline"
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} "
        "(other work on the machine slows every figure alike)"
    )

    frame = sweep(1000, 50, 20)
    print(
        f"\n1. {frame.height:,} rows: {frame['model'].n_unique()} curves x 50 budgets x 20 trials"
    )
    seconds, rep = timed(lambda: detect(frame), args.repeats)
    print(
        f"   detect_regimes (n_boot=2000): median {seconds:.2f} s over {args.repeats} runs; "
        f"{rep.anomalies.height} anomalies, "
        f"{rep.change_points.filter(pl.col('significant')).height} significant change points"
    )

    curves = frame["model"].unique(maintain_order=True).head(args.slice)
    part = frame.filter(pl.col("model").is_in(curves.implode()))
    base_seconds, _ = timed(lambda: straightforward(part), 1)
    ours_part, _ = timed(lambda: detect(part), args.repeats)
    scale = frame["model"].n_unique() / args.slice
    print(
        f"\n2. straightforward pipeline on {args.slice} curves ({part.height:,} rows): "
        f"{base_seconds:.2f} s -> {base_seconds * scale:.0f} s extrapolated to all curves"
    )
    print(f"   detect_regimes on the same slice: {ours_part:.3f} s")
    print(
        f"   speed ratio on the 1M rows: {base_seconds * scale / seconds:.0f}x "
        f"(extrapolated straightforward / measured detect_regimes)"
    )

    print("\n3. budgets per curve at 1M rows (20 trials):")
    print(f"   {'budgets':>8} {'curves':>7} {'seconds':>8} {'us/row':>7}")
    for n_budgets, n_curves in ((50, 1000), (500, 100), (5000, 10)):
        data = sweep(n_curves, n_budgets, 20, seed=n_budgets)
        secs, _ = timed(lambda data=data: detect(data), args.repeats)
        print(
            f"   {n_budgets:>8} {data['model'].n_unique():>7} {secs:>8.2f} "
            f"{secs / data.height * 1e6:>7.2f}"
        )

    multi = sweep(200, 50, 7, sessions=3, seed=5)
    secs, _ = timed(lambda: detect(multi), args.repeats)
    print(
        f"\n4. multi-session cells (hierarchical bootstrap, 2,000 resamples): "
        f"{multi.height:,} rows = 200 curves x 50 budgets x 3 sessions x 7 trials: {secs:.2f} s"
    )


if __name__ == "__main__":
    main()
