"""Accuracy of ``detect_regimes`` on synthetic curves with known truth: the public record.

Every curve is analysed by its own ``detect_regimes`` call (one model's sweep, the way a
user runs it), so Benjamini-Hochberg never borrows strength from other curves. The
curves come from :mod:`bench.scenarios` (synthetic): 12-40 budgets (step 16), 3-10
trials per session, 1-3 sessions shared by the curve or fresh per budget, trial noise
of 2-15 % with 0-3 % hiccups of 1.5-3x, session factors of 0-10 %, a per-(session,
budget) wobble of 0-3 %, and linear, quadratic or power-law trends, unless a scenario
says otherwise.

Figures, each with a 95 % Clopper-Pearson interval:

* null scenarios (no anomaly in the tested direction: smooth curves, also at a small
  ``min_ratio``, slope changes, a slow process, a slow kernel drawn per (session,
  budget), dips and down-steps with ``direction="up"``): share of curves with any
  reported anomaly, to stay <= alpha;
* a limit: a slow kernel drawn per budget when each budget ran in one fresh process of
  its own, which no analysis can tell from a one-budget spike (reported for the record);
* anomalies: recall (a reported anomaly of the right sign overlaps the truth), both
  boundaries within one grid step, precision of the reported intervals, coverage of
  the ratio interval (the reported one, and the ``t`` interval beside it) and the
  estimated over true ratio;
* edges: one-budget anomalies at a grid end reported as ``kind="edge"`` with
  ``recovered`` null;
* neighbours: a spike then a step, a spike on a step: each found, each ratio covered,
  and each ratio's coverage where its neighbour was found too and where not;
* coverage of the per-cell interval of the median, per design (trials x sessions);
* the published gpt2-medium example with 5 synthetic trials per budget at 10 % CV, as
  many seeds as curves per scenario (its ratio interval covered 0.910 over seeds 0-199,
  0.875 over seeds 0-599).

The figures go to ``--out`` (default ``bench/results/accuracy.json``, see
``bench/record.py``); a run with ``--only`` is written only to an ``--out`` given.

600 curves per scenario by default: a coverage near 0.95 measured on 200 detections has
a standard error of 0.015, so a scenario whose interval covers 0.95 of the time falls
under 0.93 in about one run in ten (seed 1 at 200 curves: 1.5x spikes of
five trials 0.924, 0.953 over seeds 1-3); at 600, 0.009 and one run in 80. A run
takes about 32 minutes with two workers on two cores.

Run: ``python bench/accuracy.py [--curves 600] [--workers 1] [--only NAME] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import Record, Section  # noqa: E402
from scenarios import Anomaly, Design, make_curves  # noqa: E402
from workers import process_pool  # noqa: E402

from regimes import RegimesWarning, detect_regimes  # noqa: E402
from regimes.data.simulate import published_gpt2_medium  # noqa: E402

STEP = 16
ALPHA = 0.05
BASE = Design()
SPIKE = Anomaly("spike", (2.0, 4.0), (2, 4))


@dataclass(frozen=True)
class Scenario:
    """One design, the direction it is analysed in, and how it is scored."""

    name: str
    design: Design
    score: str  # "null", "limit", "anomaly", "edge", "neighbours", "both"
    direction: str = "up"
    min_ratio: float = 1.25


SCENARIOS = [
    Scenario("null: smooth", BASE, "null"),
    Scenario("null: slope change 1.3-2x", BASE.with_(slope_factor=(1.3, 2.0)), "null"),
    Scenario(
        "null: slow kernel per (session, budget)",
        BASE.with_(sessions=3, kernel_rate=(0.05, 0.15)),
        "null",
    ),
    Scenario("null: slope change 2-4x", BASE.with_(slope_factor=(2.0, 4.0)), "null"),
    Scenario(
        "limit: slow kernel per budget, one fresh process each",
        BASE.with_(sessions=1, session_design="per_cell", kernel_rate=(0.05, 0.15)),
        "limit",
    ),
    Scenario(
        "null: dip 0.5-0.8x, 1-4 budgets (up)",
        BASE.with_(anomalies=[Anomaly("dip", (0.5, 0.8), (1, 4))]),
        "null",
    ),
    Scenario(
        "null: down-step 0.5-0.8x (up)",
        BASE.with_(anomalies=[Anomaly("downstep", (0.5, 0.8))]),
        "null",
    ),
    Scenario("null: log-normal sigma 0.3", BASE.with_(sigma=0.3, hiccup_rate=0.0), "null"),
    Scenario("null: t(3) noise", BASE.with_(noise="t", hiccup_rate=0.0), "null"),
    Scenario("null: 2-3 trials", BASE.with_(trials=(2, 3)), "null"),
    Scenario("null: smooth, min_ratio 1.1", BASE, "null", min_ratio=1.1),
    Scenario(
        "null: smooth, min_ratio 1.05, 10-20 trials, CV 2-5 %",
        BASE.with_(trials=(10, 20), sigma=(0.02, 0.05), hiccup_rate=0.0),
        "null",
        min_ratio=1.05,
    ),
    Scenario("spike 2-4x, 2-4 budgets", BASE.with_(anomalies=[SPIKE]), "anomaly"),
    Scenario(
        "spike 1.5x, 2-4 budgets, 5 trials",
        BASE.with_(anomalies=[Anomaly("spike", 1.5, (2, 4))], trials=5),
        "anomaly",
    ),
    Scenario(
        "spike 1.5x, 2-4 budgets, 5 trials, one process, CV 2-10 %",
        BASE.with_(
            anomalies=[Anomaly("spike", 1.5, (2, 4))],
            trials=5,
            sessions=1,
            session_design="shared",
            sigma=(0.02, 0.10),
        ),
        "anomaly",
    ),
    Scenario(
        "spike 1.5x, 2-4 budgets, 5 trials, a fresh process per budget, CV 2-10 %",
        BASE.with_(
            anomalies=[Anomaly("spike", 1.5, (2, 4))],
            trials=5,
            sessions=1,
            session_design="per_cell",
            sigma=(0.02, 0.10),
        ),
        "anomaly",
    ),
    Scenario(
        "spike 2-4x, single budget",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 4.0), 1)]),
        "anomaly",
    ),
    Scenario(
        "plateau 2-10x, 30-60 % of the grid",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 10.0), (5, 16))], n_budgets=(16, 40)),
        "anomaly",
    ),
    Scenario("step 2-4x", BASE.with_(anomalies=[Anomaly("step", (2.0, 4.0))]), "anomaly"),
    Scenario("step 1.6x", BASE.with_(anomalies=[Anomaly("step", 1.6)]), "anomaly"),
    Scenario(
        "spike 2-4x, log-normal sigma 0.3",
        BASE.with_(anomalies=[SPIKE], sigma=0.3, hiccup_rate=0.0),
        "anomaly",
    ),
    Scenario(
        "spike 2-4x, log-normal sigma 0.3, 3-5 trials",
        BASE.with_(anomalies=[SPIKE], sigma=0.3, hiccup_rate=0.0, trials=(3, 5)),
        "anomaly",
    ),
    Scenario("spike 2-4x, t(3) noise", BASE.with_(anomalies=[SPIKE], noise="t"), "anomaly"),
    Scenario("spike 2-4x, 2-3 trials", BASE.with_(anomalies=[SPIKE], trials=(2, 3)), "anomaly"),
    Scenario(
        "dip 0.5x, 1-4 budgets (both)",
        BASE.with_(anomalies=[Anomaly("dip", 0.5, (1, 4))]),
        "both",
        direction="both",
    ),
    Scenario(
        "down-step 0.6x (both)",
        BASE.with_(anomalies=[Anomaly("downstep", 0.6)]),
        "both",
        direction="both",
    ),
    Scenario(
        "edge: first budget 2-4x",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 4.0), 1, "start")]),
        "edge",
    ),
    Scenario(
        "edge: last budget 2-4x",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 4.0), 1, "end")]),
        "edge",
    ),
    Scenario(
        "edge: first 2-3 budgets 2-4x",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 4.0), (2, 3), "start")]),
        "anomaly",
    ),
    Scenario(
        "edge: last 2-3 budgets 2-4x",
        BASE.with_(anomalies=[Anomaly("spike", (2.0, 4.0), (2, 3), "end")]),
        "anomaly",
    ),
    Scenario(
        "neighbours: 3x spike then 1.6x step",
        BASE.with_(
            anomalies=[
                Anomaly("spike", 3.0, (2, 3), region=(0.0, 0.6)),
                Anomaly("step", 1.6, (1, 3), where="after"),
            ],
            n_budgets=(16, 40),
        ),
        "neighbours",
    ),
    Scenario(
        "neighbours: 3x spike on a 1.6x step",
        BASE.with_(
            anomalies=[Anomaly("step", 1.6), Anomaly("spike", 3.0, (1, 2), where="inside")],
            n_budgets=(24, 40),
        ),
        "neighbours",
    ),
]

COVERAGE = [
    (trials, sessions, session_sd)
    for trials in (2, 3, 5, 10)
    for sessions in (1, 2, 3)
    for session_sd in (0.0, 0.1)
    if not (sessions == 1 and session_sd > 0)
]


def analyse(job: tuple[pl.DataFrame, str, float]) -> pl.DataFrame:
    """Anomalies of one curve (its own call), with the ``t`` interval beside the reported one.

    The ``t`` interval comes from a second call with ``ratio_interval="t"`` on the same
    seed: the same anomalies (the interval chosen changes no test), the other interval.
    """
    frame, direction, min_ratio = job
    keys = ["model", "start", "end"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        found = detect_regimes(frame, direction=direction, min_ratio=min_ratio).anomalies.select(
            *keys, "ratio", "ratio_low", "ratio_high", "recovered", "kind", "ratio_interval"
        )
        if not found.height:
            return found.with_columns(
                t_low=pl.lit(None, pl.Float64), t_high=pl.lit(None, pl.Float64)
            )
        fixed = detect_regimes(
            frame, direction=direction, min_ratio=min_ratio, ratio_interval="t"
        ).anomalies.select(*keys, t_low="ratio_low", t_high="ratio_high")
    return found.join(fixed, on=keys, how="left")


def cells_of(frame: pl.DataFrame) -> pl.DataFrame:
    """Return the curve table of one curve's call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        return detect_regimes(frame).curve.select("model", "budget", "ci_low", "ci_high")


def _matches(truth: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """Pairs of a true anomaly and a reported one of the same sign that overlap."""
    pairs = truth.with_row_index("truth").join(found.with_row_index("found"), on="model")
    same_sign = (pl.col("ratio") > 1) == (pl.col("ratio_right") > 1)
    overlap = (pl.col("start_right") <= pl.col("end")) & (pl.col("end_right") >= pl.col("start"))
    return pairs.filter(same_sign & overlap)


def score_null(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Share of curves with any reported anomaly."""
    hits = found.get_column("model").n_unique()
    return [out.rate("share of curves with any anomaly", hits, n)]


def score_limit(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Share of curves with any anomaly where the data cannot tell a lottery from one."""
    hits = found.get_column("model").n_unique()
    return [
        out.rate("share of curves with any anomaly", hits, n),
        "  (a slow process that is the only one at its budget is a one-budget spike in the data)",
    ]


METRIC_BIAS = "estimated / true ratio (median, 10-90 %)"
METRIC_WIDTH = "ratio CI width, high / low (median, 10-90 %)"
METRIC_WIDTH_T = "t interval width, high / low (median, 10-90 %)"
"""The bias figure: its value is the median, its ``low`` and ``high`` the 10th and 90th
percentiles (a spread, not an interval)."""


def score_anomaly(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Recall, boundaries, precision, ratio coverage and bias."""
    pairs = _matches(truth, found)
    recalled = pairs.get_column("truth").n_unique()
    exact = pairs.filter(
        ((pl.col("start_right") - pl.col("start")).abs() <= STEP)
        & ((pl.col("end_right") - pl.col("end")).abs() <= STEP)
    )
    best = (
        pairs.with_columns(
            (
                (pl.min_horizontal("end", "end_right") - pl.max_horizontal("start", "start_right"))
                / (
                    pl.max_horizontal("end", "end_right")
                    - pl.min_horizontal("start", "start_right")
                )
            ).alias("_jaccard")
        )
        .sort(["truth", "_jaccard"], descending=[False, True])
        .unique("truth", keep="first", maintain_order=True)
    )
    covered = best.filter(
        (pl.col("ratio_low") <= pl.col("ratio")) & (pl.col("ratio_high") >= pl.col("ratio"))
    )
    covered_t = best.filter(
        (pl.col("t_low") <= pl.col("ratio")) & (pl.col("t_high") >= pl.col("ratio"))
    )
    drawn = best.filter(pl.col("ratio_interval") == "bootstrap")
    bias = best.select(
        (pl.col("ratio_right") / pl.col("ratio")).quantile(q).alias(str(q)) for q in (0.5, 0.1, 0.9)
    )
    lines = [
        out.rate("recall (a reported anomaly overlaps the truth)", recalled, truth.height),
        out.rate(
            "both boundaries within one grid step, of those found",
            exact.get_column("truth").n_unique(),
            recalled,
        ),
        out.rate(
            "precision of reported intervals", pairs.get_column("found").n_unique(), found.height
        ),
        out.rate("ratio CI covers the true ratio", covered.height, best.height),
        out.rate(
            "t interval (regime held fixed) covers the true ratio", covered_t.height, best.height
        ),
        out.rate("ratio CIs from the bootstrap (else t)", drawn.height, best.height),
    ]
    if best.height:
        median, low, high = bias.row(0)
        text = f"median {median:.3f}, 10-90 % {low:.3f}-{high:.3f}"
        lines.append(out.value(METRIC_BIAS, median, text, low=low, high=high, n=best.height))
        lines += _widths(best, out)
    return lines


def _widths(best: pl.DataFrame, out: Section) -> list[str]:
    """Median width of the reported and the t ratio intervals, as high over low.

    Coverage alone would reward an interval for being wide: each goes with its width.
    """
    lines = []
    for metric, low, high in (
        (METRIC_WIDTH, "ratio_low", "ratio_high"),
        (METRIC_WIDTH_T, "t_low", "t_high"),
    ):
        width = best.select(
            (pl.col(high) / pl.col(low)).quantile(q).alias(str(q)) for q in (0.5, 0.1, 0.9)
        )
        median, lo, hi = width.row(0)
        text = f"median {median:.3f}, 10-90 % {lo:.3f}-{hi:.3f}"
        lines.append(out.value(metric, median, text, low=lo, high=hi, n=best.height))
    return lines


def score_edge(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Anomaly figures, plus the share reported as an edge with unknown recovery."""
    pairs = _matches(truth, found)
    edge = pairs.filter((pl.col("kind_right") == "edge") & pl.col("recovered").is_null())
    return [
        *score_anomaly(truth, found, n, out),
        out.rate(
            "reported as kind='edge', recovered null",
            edge.get_column("truth").n_unique(),
            truth.height,
        ),
    ]


def score_both(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Dips analysed both ways: found, and alone."""
    pairs = _matches(truth, found)
    alone = found.group_by("model").len().filter(pl.col("len") == 1).get_column("model")
    only = pairs.filter(pl.col("model").is_in(alone.implode()))
    increased = found.filter(pl.col("ratio") > 1).get_column("model").n_unique()
    return [
        *score_anomaly(truth, found, n, out),
        out.rate(
            "curves reporting the dip and nothing else", only.get_column("model").n_unique(), n
        ),
        out.rate("curves reporting any increase", increased, n),
    ]


def _assigned(truth: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """Return one-to-one pairs of a true and a reported anomaly.

    Each reported one goes to the truth it overlaps best (Jaccard), and each truth keeps
    its best of those.
    """
    span = pl.max_horizontal("end", "end_right") - pl.min_horizontal("start", "start_right")
    inter = pl.min_horizontal("end", "end_right") - pl.max_horizontal("start", "start_right")
    return (
        _matches(truth, found)
        .with_columns(((inter + STEP) / (span + STEP)).alias("_jaccard"))
        .sort(["_jaccard", "truth", "found"], descending=[True, False, False])
        .unique("found", keep="first", maintain_order=True)
        .unique("truth", keep="first", maintain_order=True)
    )


def score_neighbours(truth: pl.DataFrame, found: pl.DataFrame, n: int, out: Section) -> list[str]:
    """Both anomalies of each curve found, each with its own ratio.

    A reported anomaly counts for one truth only (:func:`_assigned`): a spike reported
    where a step holds it is the spike's, never also the step's.
    """
    pairs = _assigned(truth, found)
    lines = []
    for kind in ("spike", "step"):
        part = truth.with_row_index("truth").filter(pl.col("kind") == kind)
        own = pairs.filter(pl.col("truth").is_in(part.get_column("truth").implode()))
        mine = found.with_row_index("found").filter(
            pl.col("found").is_in(own.get_column("found").implode())
        )
        lines.append(f"  -- the {kind} (each reported anomaly matched to one truth):")
        own_section = out.record.section(f"{out.name}: the {kind}")
        lines += score_anomaly(part.drop("truth"), mine.drop("found"), n, own_section)
    return lines + _covered_beside(truth, found, pairs, n, out)


def _covered_beside(
    truth: pl.DataFrame, found: pl.DataFrame, pairs: pl.DataFrame, n: int, out: Section
) -> list[str]:
    """Curves with both found, and each ratio's coverage where its neighbour was found too.

    The pairs are one to one, so a curve with two pairs found both as two anomalies. A
    ratio is read against the level around its regime: where the model misses the
    neighbour, or writes it otherwise, that level is not the truth's, whatever the
    interval's own spread (docs/method.md, Known limits).
    """
    kinds = truth.with_row_index("truth").select("truth", "model", "kind", true="ratio")
    reported = found.with_row_index("found").select("found", "ratio_low", "ratio_high")
    matched = (
        pairs.select("truth", "found")
        .join(kinds, on="truth")
        .join(reported, on="found")
        .with_columns(
            (
                (pl.col("ratio_low") <= pl.col("true")) & (pl.col("ratio_high") >= pl.col("true"))
            ).alias("covered"),
            (pl.len().over("model") == 2).alias("beside"),
        )
    )
    both = matched.filter("beside").get_column("model").n_unique()
    lines = [out.rate("curves with both found as two anomalies", both, n)]
    for kind in ("spike", "step"):
        own = matched.filter(pl.col("kind") == kind)
        for beside, words in ((True, "found too"), (False, "not found")):
            part = own.filter(pl.col("beside") == beside)
            metric = f"the {kind}, its neighbour {words}: ratio interval covers the true ratio"
            lines.append(out.rate(metric, int(part.get_column("covered").sum()), part.height))
    return lines


SCORES: dict[str, Callable[[pl.DataFrame, pl.DataFrame, int, Section], list[str]]] = {
    "null": score_null,
    "limit": score_limit,
    "anomaly": score_anomaly,
    "edge": score_edge,
    "both": score_both,
    "neighbours": score_neighbours,
}


def scenario_seed(scenario: Scenario, seed: int) -> int:
    """Return the seed of one scenario's curves.

    It comes from the scenario's name, so adding a scenario changes no other's curves.
    """
    return seed * 1000 + zlib.crc32(scenario.name.encode()) % 1000


def run_scenario(
    scenario: Scenario, n_curves: int, seed: int, pool: Any, out: Section
) -> list[str]:
    """Simulate, analyse and score one scenario."""
    frames, truth, _ = make_curves(scenario.design, n_curves, seed)
    jobs = [(f, scenario.direction, scenario.min_ratio) for f in frames]
    found = pl.concat(list(pool.map(analyse, jobs)))
    truth = truth.with_columns(pl.col("ratio"))
    return SCORES[scenario.score](truth, found, n_curves, out)


def coverage(n_curves: int, seed: int, pool: Any, out: Section) -> list[str]:
    """Coverage of each cell's 95 % interval of the median, per design."""
    lines = [f"  {'trials':>6} {'sessions':>8} {'session sd':>10}  coverage of the true median"]
    for k, (trials, sessions, session_sd) in enumerate(COVERAGE):
        design = BASE.with_(
            trials=trials, sessions=sessions, session_sd=session_sd, hiccup_rate=0.0
        )
        frames, _, truth = make_curves(design, n_curves, seed + k)
        cells = pl.concat(list(pool.map(cells_of, frames))).join(truth, on=["model", "budget"])
        hits = cells.filter(
            (pl.col("ci_low") <= pl.col("true_median"))
            & (pl.col("ci_high") >= pl.col("true_median"))
        ).height
        design_name = f"{trials} trials x {sessions} sessions, session sd {session_sd}"
        shown = out.record.rate(out.name, design_name, hits, cells.height)
        lines.append(f"  {trials:>6} {sessions:>8} {session_sd:>10}  {shown}")
    return lines


def _fixed_interval_p(frame: pl.DataFrame, seed: int) -> float:
    """Return the two-sided p-value of one random interior interval's fixed test.

    Not scan-adjusted: the interval is fixed in advance, as ``compare_backends``
    carries it to another backend.
    """
    from scipy import stats

    from regimes._stats.between_cell import curve_taus
    from regimes._stats.curves import curve_from_levels, index_curves
    from regimes._stats.fixed_intervals import fixed_interval_test
    from regimes._stats.levels import cell_levels
    from regimes.data._prepare import prepare_trials

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        trials, groups = prepare_trials(frame, "budget", "latency_s", None, None)
    index = index_curves(trials, groups, "budget")
    curve = curve_from_levels(cell_levels(index.frame, "_curve", "_x", "_ly", "_session"))
    rng = np.random.default_rng(seed)
    t = curve.x.size
    width = int(rng.integers(1, 5))
    start = int(rng.integers(3, t - 3 - width + 1))
    test = fixed_interval_test(curve, start, start + width - 1, curve_taus([curve])[0])
    z = abs(float(test.estimate[0]) / float(test.se[0]))
    return float(2.0 * stats.t.sf(z, float(test.df[0])))


def fixed_intervals(n_curves: int, seed: int, out: Section) -> list[str]:
    """Share of null curves whose fixed-interval test has p < 0.05, by slow-kernel design."""
    lines = []
    fresh = BASE.with_(sessions=1, session_design="per_cell")
    for name, design in (
        (
            "slow process per session (one fresh process per budget)",
            fresh.with_(session_sd=(0.1, 0.3)),
        ),
        (
            "slow kernel per (session, budget) (one per budget)",
            fresh.with_(kernel_rate=(0.05, 0.15)),
        ),
        (
            "slow kernel per (session, budget) (3 shared sessions)",
            BASE.with_(sessions=3, session_design="shared", kernel_rate=(0.05, 0.15)),
        ),
    ):
        frames, _, _ = make_curves(design.with_(n_budgets=(16, 40)), n_curves, seed)
        p = np.asarray([_fixed_interval_p(f, seed + k) for k, f in enumerate(frames)])
        lines.append(out.rate(f"{name}, p < 0.05", int((p < 0.05).sum()), p.size))
    return lines


def published(n_seeds: int, out: Section) -> list[str]:
    """Score the published gpt2-medium example over many synthetic draws."""
    exact_one, covers, covers_t = 0, 0, 0
    ratios = []
    truth = published_gpt2_medium().truth["ratio"][0]
    for seed in range(n_seeds):
        trials = published_gpt2_medium(trials=5, cv=0.10, seed=seed).trials
        a = detect_regimes(trials).anomalies
        if a.height == 1 and a["start"][0] == 512 and a["end"][0] == 624:
            exact_one += 1
            covers += a["ratio_low"][0] <= truth <= a["ratio_high"][0]
            fixed = detect_regimes(trials, ratio_interval="t").anomalies
            covers_t += fixed["ratio_low"][0] <= truth <= fixed["ratio_high"][0]
            ratios.append(a["ratio"][0])
    median = float(np.median(ratios)) if ratios else float("nan")
    return [
        out.rate("exactly one anomaly, 512 to 624", exact_one, n_seeds),
        out.rate(f"ratio CI covers the published geometric ratio {truth:.2f}x", covers, exact_one),
        out.rate(
            f"t interval covers the published geometric ratio {truth:.2f}x", covers_t, exact_one
        ),
        out.value("median ratio estimate", median, f"{median:.2f}x", unit="x", n=len(ratios)),
    ]


def main() -> None:
    """Run every scenario (or those named by ``--only``) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", type=int, default=600, help="curves per scenario")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=None, help="run scenarios whose name contains this")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    record = Record("accuracy", vars(args))
    print(f"detect_regimes accuracy: {args.curves} synthetic curves per scenario, seed {args.seed}")
    with process_pool(args.workers) as pool:
        for scenario in SCENARIOS:
            if args.only and args.only not in scenario.name:
                continue
            started = time.perf_counter()
            seed = scenario_seed(scenario, args.seed)
            lines = run_scenario(scenario, args.curves, seed, pool, record.section(scenario.name))
            print(f"\n{scenario.name}  [{time.perf_counter() - started:.0f} s]")
            print("\n".join(lines), flush=True)
        if not args.only or "fixed" in args.only:
            title = "fixed-interval test (compare_backends, cache_speedup) on null curves"
            print(f"\n{title}")
            print("\n".join(fixed_intervals(args.curves, args.seed * 131, record.section(title))))
        if not args.only or "coverage" in args.only:
            title = "coverage of per-cell 95 % intervals (no hiccups)"
            print(f"\n{title}")
            n_curves = max(10, args.curves // 10)
            print("\n".join(coverage(n_curves, args.seed * 7919, pool, record.section(title))))
    if not args.only or "published" in args.only:
        title = (
            "published gpt2-medium (MPS), 5 synthetic trials per budget, CV 10 %, "
            f"{args.curves} seeds"
        )
        print(f"\n{title}")
        print("\n".join(published(args.curves, record.section(title))))
    record.write(args.out, partial=args.only is not None)


if __name__ == "__main__":
    main()
