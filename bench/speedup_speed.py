"""Speed of ``cache_speedup`` and how it grows with the grid.

``cache_speedup`` tests every interval of each speedup curve that has enough flank
support: about ``T^2 / 2`` intervals on a grid of ``T`` budgets, each with its own robust
trend (level shifts at its boundaries), between-cell variance and gated test. Printed,
each the median of ``--repeats`` runs in this process:

* the committed real CUDA run (gpt2 on an H200, 32 budgets, cache on and off):
  ``cache_speedup`` (its intervals are t intervals: it resamples nothing);
* one synthetic curve pair (5 trials per cell) at 8 to 128 budgets: time, intervals
  tested, and time per interval, which says whether the cost grows as ``T^2``;
* the baseline in the same run: the same scan with each interval's trend fitted by its
  own :func:`regimes._stats.trends.level_trend` call instead of one batch, and the ratio.

The figures go to ``--out`` (default ``bench/results/speedup_speed.json``, see
``bench/record.py``).

Run: ``python bench/speedup_speed.py [--repeats 5] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from pathlib import Path

import polars as pl
from record import Record

import regimes
import regimes._stats.fixed_intervals as fixed_intervals
from regimes import RegimesWarning
from regimes._stats.trends import level_trend
from regimes.data.simulate import simulate_sweep
from regimes.speedup import cache_speedup

REAL_RUN = Path(__file__).resolve().parents[1] / "examples" / "data" / "cuda-h200-gpt2"


def median_time(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def synthetic_pair(n_budgets: int) -> pl.DataFrame:
    """One synthetic model measured with the cache on and off (smooth speedup)."""
    grid = dict(n_budgets=n_budgets, budget_step=16, trials=5, cv=0.1, seed=1)
    on = simulate_sweep(1, per_token_s=0.004, **grid).trials
    off = simulate_sweep(1, per_token_s=0.02, trend="quadratic", **grid).trials
    return pl.concat(
        [on, off.with_columns(pl.lit(False).alias("use_cache"), pl.col("session") + 1)]
    )


def one_by_one(curve, total_var, intervals):
    """Fit one robust trend per interval (the baseline)."""
    out = []
    for start, end in intervals:
        breaks = fixed_intervals.interval_segments(start, end, curve.u.size)[0]
        out.append((breaks, level_trend(curve.u, curve.level, total_var, breaks)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("speedup_speed", vars(args))
    warnings.simplefilter("ignore", RegimesWarning)
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"median of {args.repeats} runs"
    )
    real = regimes.load(REAL_RUN)
    cache_speedup(real)  # imports and first-call set-up out of the timings
    seconds = median_time(lambda: cache_speedup(real), args.repeats)
    record.value("real CUDA run (cuda-h200-gpt2)", "cache_speedup", seconds, unit="s")
    print(f"real CUDA run, 32 budgets: cache_speedup {seconds:.3f} s")
    print(
        f"{'budgets':>8} {'intervals':>10} {'seconds':>9} {'ms/interval':>12} "
        f"{'one-by-one s':>13} {'ratio':>6}"
    )
    batched = fixed_intervals.interval_trends
    for n_budgets in (8, 16, 32, 64, 128):
        df = synthetic_pair(n_budgets)
        n_intervals = len(fixed_intervals.supported_intervals(n_budgets))
        fast = median_time(lambda df=df: cache_speedup(df), args.repeats)
        fixed_intervals.interval_trends = one_by_one
        try:
            slow = median_time(lambda df=df: cache_speedup(df), max(1, args.repeats // 2))
        finally:
            fixed_intervals.interval_trends = batched
        section = f"synthetic pair, {n_budgets} budgets, {n_intervals} intervals"
        record.value(section, "cache_speedup", fast, unit="s")
        record.value(section, "per interval", 1e3 * fast / max(1, n_intervals), unit="ms")
        record.value(section, "trends fitted one by one", slow, unit="s")
        record.value(section, "one by one / batched", slow / fast, unit="x")
        print(
            f"{n_budgets:>8} {n_intervals:>10} {fast:>9.3f} "
            f"{1e3 * fast / max(1, n_intervals):>12.3f} "
            f"{slow:>13.3f} {slow / fast:>6.1f}"
        )
    record.write(args.out)


if __name__ == "__main__":
    main()
