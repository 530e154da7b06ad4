"""Analysis at fleet scale: ``regimes.load`` over many hosts' runs, then ``detect_regimes``.

Writes ``--hosts`` synthetic run directories (one per host, ``--rows`` trials each) to a
temporary directory, then measures, each in a fresh process so that peak memory is the
step's own, as the median of ``--repeats`` runs:

* ``regimes.load(list_of_runs)``: the lazy multi-run scan (``scan_parquet`` per part,
  environment columns from each ``meta.json``), collected;
* ``detect_regimes`` on all hosts' rows (``host`` varies, so each machine's curves are
  analysed apart);
* ``regimes.scan(list_of_runs)`` filtered to one host, collected: the lazy path, every
  part verified, only that host's rows kept in memory;
* the same two steps on one host's run, the baseline the ratios are taken against.

Every row is synthetic (``run_id`` and ``model`` start with ``synthetic-``): per host 20
curves (models x cache) over 50 budgets, smooth linear trends with multiplicative
log-normal noise, 5 sessions, one curve per host with a 3x spike over two budgets.

The figures go to ``--out`` (default ``bench/results/fleet_scale.json``, see
``bench/record.py``).

Run: ``python bench/fleet_scale.py [--hosts 10] [--rows 1000000] [--repeats 3] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from record import Record

CURVES, BUDGETS, SESSIONS = 20, 50, 5


def write_host(root: Path, host: int, rows: int, seed: int) -> Path:
    """Write one synthetic host's run directory of about ``rows`` trials."""
    rng = np.random.default_rng((seed, host))
    trials = max(2, rows // (CURVES * BUDGETS))
    n = CURVES * BUDGETS * trials
    curve = np.repeat(np.arange(CURVES), BUDGETS * trials)
    budget = np.tile(np.repeat(np.arange(1, BUDGETS + 1) * 16, trials), CURVES)
    trial = np.tile(np.arange(trials), CURVES * BUDGETS)
    base = 0.05 + 0.004 * budget * (1 + 0.1 * curve / CURVES)
    spike = (curve == 0) & (budget >= 400) & (budget < 432)
    latency = base * np.where(spike, 3.0, 1.0) * rng.lognormal(0.0, 0.05, n)
    run_id = f"synthetic-fleet-host-{host:02d}"
    curves = pl.DataFrame(
        {
            "model": [f"synthetic-model-{c // 2}" for c in range(CURVES)],
            "use_cache": [c % 2 == 0 for c in range(CURVES)],
        }
    )
    frame = curves[curve].with_columns(
        pl.lit(run_id).alias("run_id"),
        pl.Series("session", trial % SESSIONS),
        pl.lit("mps").alias("backend"),
        pl.lit("synthetic-chip").alias("device"),
        pl.Series("budget", budget),
        pl.Series("trial", trial // SESSIONS),
        pl.Series("order", rng.permutation(n)),
        pl.lit(False).alias("warmup"),
        pl.Series("latency_s", latency),
        pl.lit(65).alias("prompt_tokens"),
        pl.lit("float32").alias("dtype"),
        pl.lit(f"synthetic-host-{host:02d}").alias("host"),
    )
    path = root / run_id
    (path / "trials").mkdir(parents=True)
    frame.write_parquet(path / "trials" / "part-0.parquet", compression="zstd")
    meta = {"run_id": run_id, "synthetic": True, "environment": {"hostname": f"host-{host}"}}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def child(paths: list[str], step: str) -> None:
    """Time one step in this fresh process; print seconds, rows and peak RSS as JSON."""
    import warnings

    import regimes

    warnings.simplefilter("ignore")
    import polars as pl

    started = time.perf_counter()
    if step == "scan":
        host = pl.col("host") == "synthetic-host-00"
        trials = regimes.scan(paths).filter(host).collect()
    else:
        trials = regimes.load(paths)  # a list: the multi-run reader, even for one run
    loaded = time.perf_counter()
    if step == "detect":
        regimes.detect_regimes(trials, seed=0)
    done = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (
        1 if sys.platform == "darwin" else 1024
    )
    print(
        json.dumps(
            {
                "load_s": loaded - started,
                "detect_s": done - loaded,
                "rows": trials.height,
                "peak_bytes": peak,
            }
        )
    )


def measure(paths: list[Path], step: str, repeats: int) -> dict[str, float]:
    """Median of ``repeats`` fresh-process runs of ``step`` on ``paths``."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, __file__, "--child", step, *map(str, paths)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--rows", type=int, default=1_000_000, help="trials per host")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        child(rest, args.child)
        return
    record = Record("fleet_scale", {k: v for k, v in vars(args).items() if k != "child"})
    load_average = os.getloadavg()[0]
    print(f"{platform.platform()}, {os.cpu_count()} CPU(s), load average {load_average:.1f}")
    with tempfile.TemporaryDirectory(prefix="regimes-fleet-scale-") as tmp:
        paths = [write_host(Path(tmp), h, args.rows, args.seed) for h in range(args.hosts)]
        disk = sum(p.stat().st_size for p in Path(tmp).rglob("*.parquet"))
        print(f"synthetic: {args.hosts} hosts x {args.rows:,} rows, {disk / 2**20:.0f} MiB on disk")
        results = {}
        for label, subset in (("1 host", paths[:1]), (f"{args.hosts} hosts", paths)):
            for step in ("load", "scan", "detect"):
                results[(label, step)] = measure(subset, step, args.repeats)
    record.options["disk_mib"] = round(disk / 2**20, 1)
    report(results, args.hosts, args.repeats, record)
    record.write(args.out)


def report(
    results: dict[tuple[str, str], dict[str, float]], hosts: int, repeats: int, record: Record
) -> None:
    """Print the table and the ratios of all hosts against one, and record them."""
    many_label = f"{hosts} hosts"
    for (label, step), figures in results.items():
        section = f"{label}, {step}"
        record.value(section, "rows", figures["rows"], unit="rows")
        record.value(
            section, "seconds", figures[f"{'detect' if step == 'detect' else 'load'}_s"], unit="s"
        )
        record.value(section, "peak memory", figures["peak_bytes"] / 2**20, unit="MiB")
    print(
        f"{'':>10} {'rows':>12} {'load s':>8} {'load MiB':>9} {'scan 1 host s':>14} "
        f"{'scan MiB':>9} {'detect s':>9} {'peak MiB':>9}"
    )
    for label in ("1 host", many_label):
        load, scan = results[(label, "load")], results[(label, "scan")]
        detect = results[(label, "detect")]
        print(
            f"{label:>10} {int(detect['rows']):>12,} {load['load_s']:>8.2f} "
            f"{load['peak_bytes'] / 2**20:>9.0f} {scan['load_s']:>14.2f} "
            f"{scan['peak_bytes'] / 2**20:>9.0f} {detect['detect_s']:>9.2f} "
            f"{detect['peak_bytes'] / 2**20:>9.0f}"
        )
    one, many = results[("1 host", "detect")], results[(many_label, "detect")]
    load_ratio = results[(many_label, "load")]["load_s"] / results[("1 host", "load")]["load_s"]
    section = f"{many_label} / 1 host, medians of {repeats}"
    record.value(section, "rows", many["rows"] / one["rows"], unit="x")
    record.value(section, "load", load_ratio, unit="x")
    record.value(section, "detect", many["detect_s"] / one["detect_s"], unit="x")
    record.value(section, "peak memory", many["peak_bytes"] / one["peak_bytes"], unit="x")
    print(
        f"{many_label} / 1 host (medians of {repeats}): rows {many['rows'] / one['rows']:.0f}x, "
        f"load {load_ratio:.1f}x, detect {many['detect_s'] / one['detect_s']:.1f}x, "
        f"peak memory {many['peak_bytes'] / one['peak_bytes']:.1f}x"
    )


if __name__ == "__main__":
    main()
