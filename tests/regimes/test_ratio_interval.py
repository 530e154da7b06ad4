"""The ratio's interval: the basic bootstrap over the model's draws, or the ``t`` interval.

The curves are synthetic (``regimes.simulate``); the interval's coverage over many
curves is measured in ``bench/accuracy.py``, not here.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import regimes
from regimes import RegimesInputError, detect_regimes
from regimes.detect import _regimes


@pytest.fixture(scope="module")
def trials():
    return regimes.simulate.published_gpt2_medium(trials=5, cv=0.10, seed=0).trials


def test_the_default_interval_is_the_bootstrap_and_holds_its_estimate(trials) -> None:
    rep = detect_regimes(trials)
    row = rep.anomalies.row(0, named=True)
    assert row["ratio_interval"] == "bootstrap" and rep.params["ratio_interval"] == "bootstrap"
    assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    assert "ratio bootstrap" in rep.summary()


def test_the_t_interval_is_symmetric_on_the_log_scale_and_tests_are_unchanged(trials) -> None:
    drawn = detect_regimes(trials).anomalies
    fixed = detect_regimes(trials, ratio_interval="t").anomalies
    row = fixed.row(0, named=True)
    assert row["ratio_interval"] == "t"
    up, down = np.log(row["ratio_high"] / row["ratio"]), np.log(row["ratio"] / row["ratio_low"])
    # symmetric about the estimate, but for the reading with a step after the plateau
    # (the two cells after it read as a step, the trend from the two before it), which
    # reaches lower (docs/method.md, section 5, "Beside a step")
    assert down > up > 0.0
    assert np.log(row["ratio_low"]) == pytest.approx(np.log(drawn["ratio_low"][0]), rel=1e-9)
    # the interval chosen changes no estimate, test or boundary
    same = ["start", "end", "ratio", "p_value", "q_value", "start_low", "end_high"]
    assert drawn.select(same).equals(fixed.select(same))
    assert (drawn["ratio_high"] != fixed["ratio_high"]).all()


def test_an_unknown_interval_is_refused_by_name(trials) -> None:
    with pytest.raises(RegimesInputError, match="ratio_interval must be one of"):
        detect_regimes(trials, ratio_interval="percentile")


def _draws(monkeypatch: pytest.MonkeyPatch, deltas: np.ndarray) -> None:
    """Make every draw's one regime cells 3..5 with the given deltas."""
    k = deltas.size
    columns = np.full((k, 4), np.nan)
    columns[:, 0] = deltas
    found = (np.full((k, 4), 3), np.full((k, 4), 5), columns)
    monkeypatch.setattr(_regimes, "canonical", lambda fit, t: found)


def test_the_basic_interval_turns_the_draws_bias_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # draws that sit 0.1 below the estimate say the estimator runs low: the interval
    # moves up by as much, and still holds the estimate
    deltas = 0.9 + np.linspace(-0.2, 0.2, 400)
    _draws(monkeypatch, deltas)
    bounds, interval = _regimes.spread(None, 12, (3, 5, 1.0, 0.1), 0.95, 1e9)  # type: ignore[arg-type]
    q_lo, q_hi = np.quantile(deltas, [0.025, 0.975])
    assert bounds == (3, 3, 5, 5)
    assert interval == pytest.approx((2.0 - q_hi, 2.0 - q_lo))
    assert interval[0] <= 1.0 <= interval[1]


def test_the_interval_widens_as_t_for_a_noise_estimated_on_few_df(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deltas = 0.9 + np.linspace(-0.2, 0.2, 400)
    _draws(monkeypatch, deltas)
    known = _regimes.spread(None, 12, (3, 5, 1.0, 0.1), 0.95, 1e9)[1]  # type: ignore[arg-type]
    few = _regimes.spread(None, 12, (3, 5, 1.0, 0.1), 0.95, 8.0)[1]  # type: ignore[arg-type]
    assert known is not None and few is not None
    widen = stats.t.ppf(0.975, 8.0) / stats.norm.ppf(0.975)  # 1.18
    assert few == pytest.approx((1.0 - widen * (1.0 - known[0]), 1.0 + widen * (known[1] - 1.0)))


def test_too_few_matching_draws_give_no_bootstrap_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _draws(monkeypatch, np.full(99, 1.0))  # n_boot_floor(0.95) is 100
    assert _regimes.spread(None, 12, (3, 5, 1.0, 0.1), 0.95, 20.0)[1] is None  # type: ignore[arg-type]
    _draws(monkeypatch, np.full(100, 1.0))
    assert _regimes.spread(None, 12, (3, 5, 1.0, 0.1), 0.95, 20.0)[1] == (1.0, 1.0)  # type: ignore[arg-type]


def test_a_regime_nested_in_the_reported_one_is_not_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # a step over cells 4..19 (16 cells): draws whose regime is a spike of 2 cells inside
    # it found a regime of their own, not the step measured short; draws holding 8 of
    # its cells (half) found the step
    k = 300
    starts, ends = np.full((k, 4), 10), np.full((k, 4), 11)
    ends[:150, 0] = 17
    deltas = np.full((k, 4), np.nan)
    deltas[:, 0] = np.where(np.arange(k) < 150, 0.5, 1.1)
    monkeypatch.setattr(_regimes, "canonical", lambda fit, t: (starts, ends, deltas))
    step = (4, 19, 0.5, 0.05)
    bounds, interval = _regimes.spread(None, 24, step, 0.95, 1e9)  # type: ignore[arg-type]
    assert interval is not None
    assert interval == pytest.approx((0.5, 0.5))
    assert bounds == (10, 10, 17, 17)
    ends[:150, 0] = 16  # 7 cells of 16: no draw found the step
    assert _regimes.spread(None, 24, step, 0.95, 1e9)[1] is None  # type: ignore[arg-type]
