"""Can a verdict be trusted on shapes it was not built for: the randomised sweep benchmark.

For each family of :mod:`bench.shapes` (two-moded trials, a slow first trial, short
geometric grids, drift, curvature, and everything mixed) and each variant (null: no
anomaly; anomaly: one planted), ``--curves`` curves each draw their own design and get
their own ``detect_regimes`` call (alpha 0.05, min_ratio 1.25), over a pool of
``--workers`` processes. Every figure carries a 95 % Clopper-Pearson interval.

* null variants: the share of curves with any anomaly and the share with any
  significant change point (over the curves the call analysed);
* anomaly variants: recall (a reported anomaly of the planted direction overlaps the
  planted interval; a call that raised or left the curve untested is a miss), exact
  boundaries (start and end equal, of those found), precision (reported anomalies that
  overlap the truth), and, where anomalies carry ``start_low``, ``start_high``,
  ``end_low``, ``end_high``, the share of detections whose bounds hold the true start
  and end and the median bound width in grid steps;
* where the result has ``sensitivity``: the median width-2 detectable ratio, the share
  over 3 (inconclusive) and its calibration: a width-2 spike at that ratio planted in a
  fresh draw of the same design is found in what share of curves (promised: 0.8);
* errors: the share of curves whose call raised (a ``RegimesInputError`` included),
  and of curves left untested; the runner itself never stops on them.

Results go to ``--out`` (default ``bench/results/trust.json``): ``meta`` and ``rows``
of family, variant, metric, value, low, high, n. ``--before PATH`` prints a saved run
beside this one.

Run: ``python bench/trust.py [--curves 100] [--workers 2] [--only drift,mixed]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shapes import FAMILIES, VARIANTS, Batch, Shape, make_family, place, simulate  # noqa: E402
from workers import process_pool  # noqa: E402

import regimes  # noqa: E402
from regimes import detect_regimes  # noqa: E402
from regimes.errors import RegimesInputError  # noqa: E402

ALPHA = 0.05
MIN_RATIO = 1.25
BOUNDS = ("start_low", "start_high", "end_low", "end_high")
ANOMALY_COLUMNS = ("start", "end", "ratio", *BOUNDS)
OUT = Path(__file__).resolve().parent / "results" / "trust.json"

Row = dict[str, Any]
Outcome = dict[str, Any]


def _polars(frame: Any) -> pl.DataFrame:
    """Return a result table as polars, whichever dataframe library holds it."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if hasattr(frame, "to_polars"):
        return frame.to_polars()
    return pl.from_pandas(frame)


def _detectable(rep: Any, width: int = 2) -> float | None:
    """Return the result's detectable ratio at one spike width, if it reports one."""
    sensitivity = getattr(rep, "sensitivity", None)
    if sensitivity is None:
        return None
    table = _polars(sensitivity)
    if not {"width", "detectable_ratio"} <= set(table.columns):
        return None
    values = table.filter(pl.col("width") == width).get_column("detectable_ratio")
    if values.is_empty() or values[0] is None:
        return None
    return float(values[0])


def analyse(job: tuple[pl.DataFrame, str]) -> Outcome:
    """Run one curve's ``detect_regimes`` call and keep what the scores read.

    Parameters
    ----------
    job : tuple of (polars.DataFrame, str)
        The curve's trial table and the direction to analyse.

    Returns
    -------
    dict
        ``error`` (None, or what the call raised), ``anomalies`` (start, end, ratio and
        any bounds), ``significant`` (significant change points, None where the table
        has no such column), ``untested`` and ``detectable`` (width-2 detectable ratio).
    """
    frame, direction = job
    out: Outcome = dict(
        error=None, anomalies=None, significant=None, untested=False, detectable=None
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = detect_regimes(frame, alpha=ALPHA, min_ratio=MIN_RATIO, direction=direction)
    except RegimesInputError as exc:
        out["error"] = f"RegimesInputError: {exc}"
        return out
    except Exception as exc:  # a crash on one curve is a finding, not the end of the run
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    anomalies = _polars(rep.anomalies)
    out["anomalies"] = anomalies.select(c for c in ANOMALY_COLUMNS if c in anomalies.columns)
    points = _polars(rep.change_points)
    if "significant" in points.columns:
        out["significant"] = int(points.get_column("significant").sum())
    out["untested"] = _polars(rep.untested).height > 0
    out["detectable"] = _detectable(rep)
    return out


def rate(family: str, variant: str, metric: str, hits: int, n: int) -> Row:
    """Return one share as a result row, with its 95 % Clopper-Pearson interval."""
    if n == 0:
        return dict(
            family=family, variant=variant, metric=metric, value=None, low=None, high=None, n=0
        )
    ci = binomtest(hits, n).proportion_ci(0.95, method="exact")
    return dict(
        family=family,
        variant=variant,
        metric=metric,
        value=hits / n,
        low=float(ci.low),
        high=float(ci.high),
        n=n,
    )


def median_row(family: str, variant: str, metric: str, values: Sequence[float]) -> Row:
    """Return a median as a result row (no interval)."""
    value = float(np.median(values)) if len(values) else None
    return dict(
        family=family,
        variant=variant,
        metric=metric,
        value=value,
        low=None,
        high=None,
        n=len(values),
    )


def _failures(family: str, variant: str, outcomes: list[Outcome]) -> list[Row]:
    """Return the shares of curves whose call raised and of curves left untested."""
    n = len(outcomes)
    raised = sum(o["error"] is not None for o in outcomes)
    untested = sum(bool(o["untested"]) for o in outcomes)
    return [
        rate(family, variant, "call raised", raised, n),
        rate(family, variant, "untested", untested, n),
    ]


def score_null(family: str, variant: str, outcomes: list[Outcome]) -> list[Row]:
    """Score a null variant: curves with any anomaly, any significant change point."""
    analysed = [o for o in outcomes if o["error"] is None and not o["untested"]]
    anomalous = sum(o["anomalies"].height > 0 for o in analysed)
    judged = [o for o in analysed if o["significant"] is not None]
    moved = sum(o["significant"] > 0 for o in judged)
    rows = [
        rate(family, variant, "any anomaly", anomalous, len(analysed)),
        rate(family, variant, "any significant change point", moved, len(judged)),
    ]
    return rows + _failures(family, variant, outcomes)


def best_match(truth: dict[str, Any], anomalies: pl.DataFrame | None) -> dict[str, Any] | None:
    """Return the reported anomaly of the truth's direction that overlaps it best.

    Overlap is measured by the Jaccard index of the budget intervals; None where no
    reported anomaly of that direction overlaps the planted interval.
    """
    if anomalies is None or anomalies.is_empty():
        return None
    best, score = None, -1.0
    up = truth["ratio"] > 1
    for row in anomalies.iter_rows(named=True):
        if (row["ratio"] > 1) != up or row["start"] > truth["end"] or row["end"] < truth["start"]:
            continue
        inter = min(row["end"], truth["end"]) - max(row["start"], truth["start"])
        span = max(row["end"], truth["end"]) - min(row["start"], truth["start"])
        jaccard = (inter + 1) / (span + 1)
        if jaccard > score:
            best, score = row, jaccard
    return best


def _overlapping(truth: dict[str, Any], anomalies: pl.DataFrame | None) -> tuple[int, int]:
    """Return how many anomalies a curve reported, and how many overlap its truth."""
    if anomalies is None:
        return 0, 0
    hits = anomalies.filter(
        (pl.col("start") <= truth["end"])
        & (pl.col("end") >= truth["start"])
        & ((pl.col("ratio") > 1) == (truth["ratio"] > 1))
    )
    return anomalies.height, hits.height


def _bound_scores(
    family: str, variant: str, found: list[tuple[dict[str, Any], dict[str, Any], Shape]]
) -> list[Row]:
    """Score the boundary bounds of the detections that carry them."""
    held, widths_start, widths_end = 0, [], []
    bounded = [(t, m, s) for t, m, s in found if all(m.get(b) is not None for b in BOUNDS)]
    for truth, match, shape in bounded:
        held += (match["start_low"] <= truth["start"] <= match["start_high"]) and (
            match["end_low"] <= truth["end"] <= match["end_high"]
        )
        grid = np.asarray(shape.budgets)
        steps = np.searchsorted(grid, [match[b] for b in BOUNDS])
        widths_start.append(float(steps[1] - steps[0]))
        widths_end.append(float(steps[3] - steps[2]))
    if not bounded:
        return []
    return [
        rate(family, variant, "bounds hold start and end", held, len(bounded)),
        median_row(family, variant, "start bound width (grid steps, median)", widths_start),
        median_row(family, variant, "end bound width (grid steps, median)", widths_end),
    ]


def score_anomaly(family: str, variant: str, batch: Batch, outcomes: list[Outcome]) -> list[Row]:
    """Score an anomaly variant: recall, exact boundaries, precision and bounds."""
    truths = {row["curve"]: row for row in batch.truth.iter_rows(named=True)}
    found, reported, overlapping = [], 0, 0
    for frame, shape, outcome in zip(batch.frames, batch.shapes, outcomes, strict=True):
        truth = truths[frame.get_column("model")[0]]
        total, hits = _overlapping(truth, outcome["anomalies"])
        reported, overlapping = reported + total, overlapping + hits
        match = best_match(truth, outcome["anomalies"])
        if match is not None:
            found.append((truth, match, shape))
    exact = sum(m["start"] == t["start"] and m["end"] == t["end"] for t, m, _ in found)
    rows = [
        rate(family, variant, "recall", len(found), len(outcomes)),
        rate(family, variant, "exact boundaries (of found)", exact, len(found)),
        rate(family, variant, "precision (reported overlapping truth)", overlapping, reported),
    ]
    rows += _bound_scores(family, variant, found)
    return rows + _failures(family, variant, outcomes)


def calibration(
    family: str, batch: Batch, outcomes: list[Outcome], pool: Any, seed: int
) -> list[Row]:
    """Check the width-2 detectable ratio: plant a spike at it in fresh draws.

    Each null curve that reports a finite detectable ratio gets a fresh draw of its own
    design with a two-budget interior spike at that ratio; the share found should be
    near the 0.8 promised.
    """
    pairs = [
        (s, o["detectable"]) for s, o in zip(batch.shapes, outcomes, strict=True) if o["detectable"]
    ]
    if not pairs:
        return []
    ratios = [r for _, r in pairs]
    testable = [(s, r) for s, r in pairs if np.isfinite(r) and r > 1]
    rng = np.random.default_rng(seed)
    jobs, truths = [], []
    for k, (shape, ratio) in enumerate(testable):
        planted = place(rng, len(shape.budgets), "spike", ratio, 2)
        name = f"{family}-calibration-{k:04d}"
        jobs.append((simulate(shape, [planted], rng, name), "up"))
        grid = shape.budgets
        truths.append(dict(start=grid[planted.first], end=grid[planted.last], ratio=ratio))
    results = list(pool.map(analyse, jobs, chunksize=2)) if jobs else []
    found = sum(
        best_match(t, o["anomalies"]) is not None for t, o in zip(truths, results, strict=True)
    )
    over = sum(not np.isfinite(r) or r > 3 for r in ratios)
    return [
        median_row(family, "null", "width-2 detectable ratio (median)", ratios),
        rate(family, "null", "detectable ratio over 3 (inconclusive)", over, len(ratios)),
        rate(family, "null", "spike at width-2 detectable ratio found", found, len(testable)),
    ]


def run_block(family: str, variant: str, n_curves: int, seed: int, pool: Any) -> list[Row]:
    """Draw, analyse and score one family and variant."""
    started = time.perf_counter()
    batch = make_family(family, variant, n_curves, seed)
    jobs = [
        (frame, shape.direction) for frame, shape in zip(batch.frames, batch.shapes, strict=True)
    ]
    outcomes = list(pool.map(analyse, jobs, chunksize=2))
    if variant == "null":
        rows = score_null(family, variant, outcomes)
        rows += calibration(family, batch, outcomes, pool, seed * 7 + len(family))
    else:
        rows = score_anomaly(family, variant, batch, outcomes)
    errors = sorted({o["error"] for o in outcomes if o["error"] is not None})
    print(f"\n{family} / {variant}: {n_curves} curves [{time.perf_counter() - started:.0f} s]")
    for error in errors[:3]:
        print(f"  raised: {error[:160]}")
    print(table(rows), flush=True)
    return rows


def _cell(row: Row | None) -> str:
    """Format a row's value with its interval, or a dash."""
    if row is None or row["value"] is None:
        return "-"
    if row["low"] is None:
        return f"{row['value']:.2f}"
    return f"{row['value']:.3f} ({row['low']:.3f}-{row['high']:.3f})"


def table(rows: list[Row], before: list[Row] | None = None) -> str:
    """Return a readable table of result rows, a saved run's figures beside them."""
    saved = {(r["family"], r["variant"], r["metric"]): r for r in before or []}
    lines = []
    for row in rows:
        line = f"  {row['family']:<16} {row['variant']:<8} {row['metric']:<42} {row['n']:>4}  "
        if before is not None:
            line += f"{_cell(saved.get((row['family'], row['variant'], row['metric']))):<26} -> "
        lines.append(line + _cell(row))
    return "\n".join(lines)


def _commit() -> str:
    """Return the checkout's commit, ``+changes`` where its ``regimes`` is dirty.

    The mark is left off when the analysed ``regimes`` is not this checkout's (it may
    come from elsewhere: ``meta["regimes"]`` says where).
    """
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "regimes"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    ours = Path(regimes.__file__).resolve().parent == root / "regimes"
    return head + ("+changes" if dirty and ours else "")


def _arguments() -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--curves", type=int, default=100, help="curves per family and variant")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated families to run")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON goes")
    parser.add_argument("--before", type=Path, default=None, help="a saved run to print beside")
    parser.add_argument("--note", default="", help="a line kept in the JSON's meta")
    return parser.parse_args()


def main() -> None:
    """Run every family and variant, print the figures and write them as JSON."""
    args = _arguments()
    families = [f for f in FAMILIES if not args.only or f in args.only.split(",")]
    started = time.perf_counter()
    rows: list[Row] = []
    with process_pool(args.workers) as pool:
        for family in families:
            for variant in VARIANTS:
                rows += run_block(family, variant, args.curves, args.seed, pool)
    meta = dict(
        curves=args.curves,
        seed=args.seed,
        alpha=ALPHA,
        min_ratio=MIN_RATIO,
        commit=_commit(),
        regimes=str(Path(regimes.__file__).resolve().parent),
        note=args.note,
        seconds=round(time.perf_counter() - started, 1),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    before = json.loads(args.before.read_text())["rows"] if args.before else None
    print(f"\nall families ({meta['seconds']:.0f} s, commit {meta['commit']}):")
    print(table(rows, before))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
