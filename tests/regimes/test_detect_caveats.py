"""The summary and the anomalies' ``caveat`` say where simulation found an interval short.

Synthetic curves (labelled so): smooth linear latency with 5 % log-normal noise, 5
trials per budget, one session, and an anomaly placed where simulation shows the
interval falls short (docs/method.md, Known limits), or where it does not.
"""

from __future__ import annotations

import numpy as np
import polars as pl

import regimes


def _curve(factor_at: dict[int, float], seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    budgets = np.arange(16, 16 * 21, 16)
    rows = []
    for order, (budget, trial) in enumerate((b, t) for b in budgets for t in range(5)):
        latency = 0.05 + 0.004 * budget
        latency *= factor_at.get(int(budget), 1.0) * rng.lognormal(0.0, 0.05)
        rows.append(
            dict(backend="cpu", model="synthetic", use_cache=True, budget=int(budget),
                 trial=trial, order=order,
                 latency_s=latency)
        )  # fmt: skip
    return pl.DataFrame(rows)


def test_an_anomaly_at_the_first_budgets_is_flagged() -> None:
    report = regimes.detect_regimes(_curve({16: 3.0, 32: 3.0}))
    assert report.anomalies.get_column("start").to_list() == [16]
    assert "starts at the grid's first budgets" in report.summary()
    assert report.anomalies["caveat"][0] == regimes.detect.CAVEATS["first budgets"]


def test_a_spike_next_to_a_step_is_flagged() -> None:
    factors = {b: 3.0 for b in (128, 144, 160)} | {b: 1.8 for b in range(176, 336, 16)}
    report = regimes.detect_regimes(_curve(factors, seed=1))
    assert report.anomalies.height == 2, report.summary()
    assert report.summary().count("borders or holds another anomaly") == 2
    assert report.anomalies["caveat"].to_list() == [regimes.detect.CAVEATS["neighbour"]] * 2


def test_a_lone_spike_in_the_middle_carries_no_note() -> None:
    report = regimes.detect_regimes(_curve({b: 3.0 for b in (128, 144, 160)}))
    assert report.anomalies.height == 1
    assert "Note:" not in report.summary()
    assert report.anomalies["caveat"].is_null().all()
