"""Measure operator attribution on real profiled CPU sweeps: power, false flags, overhead.

Each repeat collects two real sweeps of tiny-gpt2 (random weights) on this CPU with a
1024-token prompt, every budget profiled (spec key ``profile``): one with every
scaled-dot-product attention call at budgets 24..28 computed 4 times (``slow_attention``,
the known answer), one without (the null). :func:`regimes.attribute_operators` then
tests the known interval on each, per scope and per operator:

* ``attention flagged``: the attention scope is flagged in the slowed sweep (power);
* ``any other scope flagged``: a scope other than the attention is flagged in the slowed
  sweep (a false flag of the design); ``other scopes flagged`` counts them over every
  scope tested;
* ``operators outside attention flagged``: at the operator level, a flagged operator that
  never ran inside the attention scope;
* ``any scope flagged`` (no slowdown): anything flagged in the sweep without one, and
  ``detected anything``: detection finds an anomaly there;
* ``detected``: detection on the timed trials finds exactly 24..28;
* ``profiled / timed``: each budget's median profiled latency over its median timed one
  (the profiler's cost), median over budgets and repeats with the interquartile range.

The figures go to ``--out`` (default ``bench/results/operator_flags.json``). Run::

    OMP_NUM_THREADS=1 python bench/operator_flags.py --repeats 10
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
from record import Record

import regimes
from collectors.spec import SweepSpec
from collectors.sweep import run_sweep

ATTENTION = "aten::scaled_dot_product_attention"
START, STOP = 24, 28


def _spec(seed: int, slowed: bool) -> SweepSpec:
    budgets = list(range(8, 44, 4))
    return SweepSpec.from_dict(
        {
            "models": ["tiny-gpt2"],
            "backends": ["cpu"],
            "budgets": budgets,
            "prompt_tokens": [1024],
            "trials": 3,
            "warmup": 1,
            "engine": "loop",
            "attn_implementation": "sdpa",
            "seed": seed,
            "profile": {"budgets": budgets, "trials": 3},
            **({"slow_attention": {"start": START, "stop": STOP, "factor": 4}} if slowed else {}),
        }
    )


def _attribute(run: Path, unit: str) -> pl.DataFrame:
    anomalies = pl.DataFrame({"model": ["tiny-gpt2"], "start": [START], "end": [STOP]})
    known = SimpleNamespace(anomalies=anomalies, group_columns=["model"], x="budget", y="y")
    ops = regimes.load(run, table="ops")
    return regimes.attribute_operators(ops, known, unit=unit, n_boot=1000).operators


def _one(seed: int, slowed: bool, root: Path) -> dict[str, int]:
    run = root / f"{'slowed' if slowed else 'null'}-{seed}"
    run_sweep(_spec(seed, slowed), run, progress=False, command=["bench/operator_flags.py"])
    scopes, operators = _attribute(run, "scope"), _attribute(run, "operator")
    ops = regimes.load(run, table="ops")
    inside = set(ops.filter(pl.col("scope") == ATTENTION).get_column("operator"))
    trials = regimes.load(run).filter(~pl.col("warmup"))
    rep = regimes.detect_regimes(trials)
    timed = trials.group_by("budget").agg(pl.col("latency_s").median().alias("timed"))
    profiled = ops.group_by("budget", "session", "trial").agg(pl.col("latency_s").first())
    ratio = profiled.group_by("budget").agg(pl.col("latency_s").median()).join(timed, on="budget")
    others = scopes.filter(pl.col("operator") != ATTENTION)
    outside = operators.filter(~pl.col("operator").is_in(sorted(inside)))
    if not slowed:
        _OVERHEAD.extend((ratio["latency_s"] / ratio["timed"]).to_list())
    return {
        "attention": int(scopes.filter(pl.col("operator") == ATTENTION)["flagged"].any()),
        "flags": int(scopes["flagged"].sum()),
        "scopes": scopes.height,
        "other_flags": int(others["flagged"].sum()),
        "others": others.height,
        "outside_flags": int(outside["flagged"].sum()),
        "outside": outside.height,
        "detected": int(rep.anomalies.select("start", "end").rows() == [(START, STOP)]),
        "anomalies": rep.anomalies.height,
    }


_OVERHEAD: list[float] = []
"""Each budget's profiled over timed median latency, over the sweeps without a slowdown."""


def _total(rows: list[dict[str, int]], key: str, positive: bool = False) -> int:
    return sum(int(r[key] > 0) if positive else r[key] for r in rows)


def main() -> None:
    """Run the repeats and print and record the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    record = Record("operator_flags", vars(args))
    with tempfile.TemporaryDirectory() as tmp:
        slowed = [_one(seed, True, Path(tmp)) for seed in range(args.repeats)]
        null = [_one(seed, False, Path(tmp)) for seed in range(args.repeats)]
    n = args.repeats
    out = record.section("slowed attention, 4x on 24..28")
    print(out.name)
    print(out.rate("attention flagged", _total(slowed, "attention"), n))
    print(out.rate("any other scope flagged", _total(slowed, "other_flags", True), n))
    print(out.rate("other scopes flagged", _total(slowed, "other_flags"), _total(slowed, "others")))
    outside = _total(slowed, "outside")
    print(out.rate("operators outside attention flagged", _total(slowed, "outside_flags"), outside))
    print(out.rate("detected", _total(slowed, "detected"), n))
    base = record.section("no slowdown")
    print(base.name)
    print(base.rate("any scope flagged", _total(null, "flags", True), n))
    print(base.rate("scopes flagged", _total(null, "flags"), _total(null, "scopes")))
    print(base.rate("detected anything", _total(null, "anomalies", True), n))
    ratios = np.asarray(_OVERHEAD)
    q1, median, q3 = np.quantile(ratios, [0.25, 0.5, 0.75])
    print(
        base.value(
            "profiled / timed",
            float(median),
            f"{median:.3f}x (IQR {q1:.3f}-{q3:.3f}, {ratios.size} budgets)",
            unit="x",
            low=float(q1),
            high=float(q3),
            n=int(ratios.size),
        )
    )
    record.write(args.out)


if __name__ == "__main__":
    main()
