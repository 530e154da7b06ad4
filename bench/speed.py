"""Speed and memory of ``detect_regimes`` on synthetic sweeps, single- and multi-session.

All figures come from one run on the machine at hand, each the median of ``--repeats``
runs, so ratios between them hold however busy the machine is. Curves are synthetic
(:func:`regimes.simulate_sweep`): 80 % smooth, 10 % with a spike, 10 % with a step;
noise CV 2-15 %, 0-3 % hiccups, session factors of 0-5 %.

1. ``detect_regimes`` on 1,000,000 rows of one session per curve (1,000 curves x 50
   budgets x 20 trials), and on 1,008,000 rows of 3 sessions x 7 trials per cell (1,000
   curves x 48 budgets): the multi-session run over the single-session one;
2. the straightforward pipeline on a slice of the single-session rows (per cell
   ``scipy.stats.bootstrap`` of the median with 2,000 resamples, then
   ``ruptures.Pelt(model="l2")`` on each curve's cell medians), extrapolated to all
   curves, over ``detect_regimes`` on the 1M rows;
3. peak memory (resident set) of a fresh process that builds the 1M rows and runs
   ``detect_regimes`` on them, for both designs;
4. a mixed sweep of curves with 1 to 3 sessions per cell (about 330,000 rows), how
   time grows with budgets per curve at a fixed 1M rows, and a short grid (1,000 curves
   x 9 budgets x 5 trials), where every curve simulates its own power;
5. where the time of one call on the single-session rows goes: each stage's share of
   one call under ``cProfile`` (the profiler's own cost falls on every stage alike, in
   proportion to the Python calls it makes), so that work on speed starts where it pays.

The figures go to ``--out`` (default ``bench/results/speed.json``, see
``bench/record.py``). ``--scale`` shrinks every design by that factor (curves, or rows
at a fixed curve length): a quick run, never written over the full figures unless
``--out`` says so.

Run: ``python bench/speed.py [--repeats 3] [--slice 20] [--scale 1] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import os
import platform
import pstats
import resource
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import ruptures as rpt
from record import Record
from scipy import stats

from regimes import RegimesWarning, detect_regimes
from regimes.data.simulate import simulate_sweep

NOISE = dict(cv=(0.02, 0.15), hiccup_rate=(0.0, 0.03), session_cv=(0.0, 0.05))
SINGLE = dict(n_curves=1000, n_budgets=50, trials=20, sessions=1)
MULTI = dict(n_curves=1000, n_budgets=48, trials=7, sessions=3)


def sweep(
    n_curves: int,
    n_budgets: int,
    trials: int | tuple[int, int],
    sessions: int | tuple[int, int] = 1,
    seed: int = 0,
) -> pl.DataFrame:
    """Build a synthetic sweep: 80 % smooth curves, 10 % spikes, 10 % steps."""
    parts = []
    for k, (kind, share) in enumerate((("none", 0.8), ("spike", 0.1), ("step", 0.1))):
        count = max(1, int(round(n_curves * share)))
        trials_frame = simulate_sweep(
            count,
            anomaly=kind,
            n_budgets=n_budgets,
            trials=trials,
            sessions=sessions,
            session_design="per_cell",
            ratio=(2.0, 4.0),
            width=(2, 4),
            seed=seed * 10 + k,
            **NOISE,
        ).trials
        parts.append(
            trials_frame.with_columns((pl.lit(f"{kind}-") + pl.col("model")).alias("model"))
        )
    return pl.concat(parts)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def detect(frame: pl.DataFrame) -> Any:
    """Run ``detect_regimes`` with its defaults, warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        return detect_regimes(frame)


def straightforward(frame: pl.DataFrame) -> int:
    """Run per-cell scipy bootstrap of the median, then Pelt (defaults) per curve."""
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


def _peak_memory(design: dict[str, int]) -> tuple[float, float]:
    """Return the peak resident memory (GB) after building the rows and after analysing.

    Run in a fresh process.
    """
    frame = sweep(**design)
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    detect(frame)
    return built, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def peak_memory(design: dict[str, int]) -> tuple[float, float]:
    """:func:`_peak_memory` in a fresh spawned process (``ru_maxrss`` is in KB on Linux)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(_peak_memory, (design,))


def scaled(design: dict[str, int], scale: float) -> dict[str, int]:
    """``design`` with ``scale`` times its curves (at least 2: a spike and a step)."""
    return dict(design, n_curves=max(2, round(design["n_curves"] * scale)))


def detection_times(
    single: pl.DataFrame, multi: pl.DataFrame, part: pl.DataFrame, repeats: int
) -> tuple[dict[str, float], Any]:
    """Median seconds of the three calls of figures 1 and 2, run in interleaved rounds.

    A busy machine slows each of the three alike.
    """
    detect(single.head(50_000))  # imports and first-call set-up out of the timings
    times: dict[str, list[float]] = {"single": [], "multi": [], "base": []}
    rep = None
    for _ in range(repeats):
        for name, call in (
            ("single", lambda: detect(single)),
            ("multi", lambda: detect(multi)),
            ("base", lambda: straightforward(part)),
        ):
            seconds, result = timed(call, 1)
            times[name].append(seconds)
            rep = result if name == "single" else rep
    return {name: statistics.median(values) for name, values in times.items()}, rep


def main() -> None:
    """Print every figure of the module docstring and write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slice", type=int, default=20, help="curves for the baseline")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every design")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("speed", vars(args))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} "
        "(other work on the machine slows every figure alike)"
    )
    designs = {"single": scaled(SINGLE, args.scale), "multi": scaled(MULTI, args.scale)}
    single, multi = sweep(**designs["single"]), sweep(**designs["multi"])
    curves = single["model"].unique(maintain_order=True).head(args.slice)
    part = single.filter(pl.col("model").is_in(curves.implode()))
    times, rep = detection_times(single, multi, part, args.repeats)
    single_s, multi_s, base_s = times["single"], times["multi"], times["base"]
    section = f"1. detect_regimes, median of {args.repeats} interleaved runs"
    record.value(section, f"{single.height} rows, 1 session x 20 trials", single_s, unit="s")
    record.value(section, f"{multi.height} rows, 3 sessions x 7 trials", multi_s, unit="s")
    record.value(section, "multi-session / single-session", multi_s / single_s, unit="x")
    print(f"\n{section}:")
    print(
        f"   {single.height:,} rows, 1 session x 20 trials per cell: {single_s:.2f} s "
        f"({rep.anomalies.height} anomalies)"
    )
    print(f"   {multi.height:,} rows, 3 sessions x 7 trials per cell: {multi_s:.2f} s")
    print(f"   multi-session / single-session: {multi_s / single_s:.2f}x (target <= 1.5x)")
    baseline(record, single, part, base_s, single_s, args)
    memory(record, designs)
    scaling(record, args)
    stages(record, single)
    record.write(args.out, partial=args.scale != 1.0)


def baseline(
    record: Record,
    single: pl.DataFrame,
    part: pl.DataFrame,
    base_s: float,
    single_s: float,
    args: argparse.Namespace,
) -> None:
    """Figure 2: the straightforward pipeline, extrapolated, against detect_regimes."""
    scale = single["model"].n_unique() / args.slice
    section = f"2. straightforward pipeline on {args.slice} curves ({part.height} rows)"
    record.value(section, "seconds", base_s, unit="s")
    record.value(section, "extrapolated to all curves", base_s * scale, unit="s")
    record.value(section, "extrapolated / detect_regimes", base_s * scale / single_s, unit="x")
    print(
        f"\n2. straightforward pipeline on {args.slice} curves ({part.height:,} rows, median of "
        f"{args.repeats}): "
        f"{base_s:.2f} s -> {base_s * scale:.0f} s extrapolated to the {single.height:,} rows"
    )
    print(
        f"   speed ratio on the single-session rows: {base_s * scale / single_s:.0f}x "
        "(extrapolated straightforward / measured detect_regimes; target >= 80x)"
    )


def memory(record: Record, designs: dict[str, dict[str, int]]) -> None:
    """Figure 3: the peak resident memory of a fresh process, per design."""
    section = "3. peak resident memory of a fresh process"
    print(f"\n{section} (GB): after building, after analysing")
    for name, design in (
        ("single-session", designs["single"]),
        ("3 sessions x 7", designs["multi"]),
    ):
        built, peak = peak_memory(design)
        record.value(section, f"{name}, after building", built, unit="GB")
        record.value(section, f"{name}, after analysing", peak, unit="GB")
        print(f"   {name:>16}: {built:.2f} -> {peak:.2f} (target < 2)")


def scaling(record: Record, args: argparse.Namespace) -> None:
    """Figure 4: a mixed sweep, and time against budgets per curve at fixed rows."""
    mixed = sweep(max(2, round(1000 * args.scale)), (12, 40), (3, 10), sessions=(1, 3), seed=7)
    mixed_s, _ = timed(lambda: detect(mixed), args.repeats)
    section = "4. mixed 1-3 sessions per cell"
    record.value(section, f"{mixed.height} rows", mixed_s, unit="s")
    print(f"\n{section}, {mixed.height:,} rows: {mixed_s:.2f} s")
    print(f"   {'budgets':>8} {'curves':>7} {'seconds':>8} {'us/row':>7}")
    # and a short grid, where every curve simulates its own power
    for n_budgets, n_curves, trials in (
        (50, 1000, 20),
        (500, 100, 20),
        (5000, 10, 20),
        (9, 1000, 5),
    ):
        n_curves = max(2, round(n_curves * args.scale))
        data = sweep(n_curves, n_budgets, trials, seed=n_budgets)
        secs, _ = timed(lambda data=data: detect(data), args.repeats)
        curves = data["model"].n_unique()
        where = f"4. {n_budgets} budgets x {curves} curves x {trials} trials"
        record.value(where, "seconds", secs, unit="s")
        record.value(where, "per row", secs / data.height * 1e6, unit="us")
        print(f"   {n_budgets:>8} {curves:>7} {secs:>8.2f} {secs / data.height * 1e6:>7.2f}")


STAGES = {
    "trial table (checks, first trials, drift, sessions, cells)": [
        ("_prepare.py", "prepare_trials"),
        ("curves.py", "index_curves"),
        ("_pipeline.py", "_canonical_order"),
        ("_trials.py", "adjust_trials"),
        ("_trials.py", "cell_arrays"),
    ],
    "resampling pools": [("_trials.py", "residual_pools")],
    "null draws (p-values)": [("_model.py", "_null_maxima")],
    "model draws (bounds, ratio intervals)": [("_model.py", "_add_spread")],
    "sensitivity (power tables)": [("_sensitivity.py", "curve_sensitivities")],
    "result tables": [("_tables.py", "assemble")],
}
"""Each stage of a call, as the functions whose cumulative time it is."""

INSIDE_FIT = (
    "null draws (p-values)",
    "model draws (bounds, ratio intervals)",
    "sensitivity (power tables)",
)
"""The stages of :data:`STAGES` that run inside the fits (``fit_grid``)."""


def _cumulative(stats: pstats.Stats, functions: list[tuple[str, str]]) -> float:
    """Seconds spent in ``functions`` (file name, function name) and what they call."""
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    return sum(
        row[3]
        for (path, _, name), row in table.items()
        if any(path.endswith(f"/{file}") and name == function for file, function in functions)
    )


def stages(record: Record, single: pl.DataFrame) -> None:
    """Figure 5: each stage's share of one profiled call on the single-session rows."""
    profile = cProfile.Profile()
    profile.runcall(detect, single)
    stats = pstats.Stats(profile)
    total = _cumulative(stats, [("speed.py", "detect")])
    fit = _cumulative(stats, [("_model.py", "fit_grid")])
    shares = {name: _cumulative(stats, functions) for name, functions in STAGES.items()}
    inside_fit = sum(shares[name] for name in INSIDE_FIT)
    shares["the data's fit and tests (the rest of the fits)"] = fit - inside_fit
    shares["other"] = total - sum(shares.values())
    section = "5. where one call's time goes (share of a profiled call)"
    print(f"\n{section}, {total:.1f} s under the profiler:")
    for name, seconds in shares.items():
        record.value(section, name, seconds / total, unit="share")
        print(f"   {seconds / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
