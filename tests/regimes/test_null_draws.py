"""Null draws: the tail over every interval past the count's floor, and the stages."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import regimes.detect._model as model
from regimes import detect_regimes
from regimes._stats.intervals import candidate_intervals
from regimes._stats.scan import fit_rows, selection_threshold
from regimes._stats.smoother import smoother_for
from regimes.data.simulate import simulate_sweep
from regimes.detect._nulls import class_p, settled, stages
from regimes.detect._regimes import KMAX, WIDTH_CLASSES, canonical, width_class
from regimes.detect._scan import scan_maxima

T = 30
TAU0 = float(np.log(1.25))


def _rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    levels = np.log(0.05 + 0.004 * np.arange(T)) + rng.normal(0.0, 0.03, size=(n, T))
    for row in levels[: n // 2]:
        s, w = rng.integers(3, T - 6), rng.integers(1, 6)
        row[s : s + w] += rng.uniform(0.1, 1.0)
    return levels


def test_a_regime_selected_alone_has_the_statistic_of_its_interval() -> None:
    sm = smoother_for(np.linspace(0.0, 1.0, T))
    levels = _rows(200, seed=0)
    fit = fit_rows(levels, sm, selection_threshold(T, 2.0), KMAX)
    tested, either = scan_maxima(levels, sm, fit.which, fit.sigma, TAU0, 1.0)
    assert np.isfinite(either).all()  # every draw has one, selected or not
    start, end, delta = canonical(fit, T)
    alone = np.flatnonzero((fit.chosen >= 0).sum(axis=1) == 1)
    assert alone.size >= 50
    for row in alone:
        j = int(np.flatnonzero(fit.chosen[row] >= 0)[0])
        z = (abs(delta[row, j]) - TAU0) / (fit.se_unit[row, j] * fit.sigma[row])
        c = int(width_class(np.array(end[row, j] - start[row, j] + 1)))
        assert either[row, c] >= z - 1e-9 * abs(z)
        if delta[row, j] > 0:
            assert tested[row, c] >= z - 1e-9 * abs(z)


@pytest.mark.parametrize("sign", [1.0, -1.0, 0.0])
def test_the_scan_is_the_dense_statistic_of_every_interval(sign: float) -> None:
    sm = smoother_for(np.linspace(0.0, 1.0, T))
    levels = _rows(40, seed=4)
    which = np.arange(40) % sm.residual.shape[0]
    sigma = np.random.default_rng(5).uniform(0.01, 0.05, size=40)
    tested, either = scan_maxima(levels, sm, which, sigma, TAU0, sign)
    starts, ends = candidate_intervals(T)
    z = (np.arange(T)[:, None] >= starts) & (np.arange(T)[:, None] <= ends)
    classes = width_class(ends - starts + 1)
    for row in range(40):
        az = sm.residual[which[row]] @ z
        zaz = np.sum(z * az, axis=0)
        live = zaz > 1e-9 * zaz + 1e-9
        delta = levels[row] @ az / zaz
        stat = (np.abs(delta) - TAU0) / (np.linalg.norm(az, axis=0) / zaz * sigma[row])
        for c in range(WIDTH_CLASSES):
            both = live & (classes == c)
            own = both & ((sign == 0) | (sign * delta > 0))
            want = [stat[both].max(initial=-np.inf), stat[own].max(initial=-np.inf)]
            np.testing.assert_allclose([either[row, c], tested[row, c]], want, rtol=1e-9)


def _gumbel(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).gumbel(3.0, 0.5, size=(n, WIDTH_CLASSES))


def test_beyond_every_draw_the_tail_over_every_interval_lifts_the_floor() -> None:
    b = 200
    selected = np.full((b, WIDTH_CLASSES), -np.inf)
    selected[:4, 1] = [3.0, 3.5, 4.0, 4.2]  # too few selections for a tail of their own
    scanned = _gumbel(b, seed=1)
    assert class_p(12.0, selected, 1, np.full_like(scanned, -np.inf)) == 1 / (b + 1)
    p = class_p(12.0, selected, 1, scanned)
    assert 0.0 < p < 1e-5
    # where a draw reaches the statistic, the count stands: the bound is for beyond them
    assert class_p(4.1, selected, 1, scanned) == class_p(4.1, selected, 1, selected)


def test_the_stages_and_what_they_settle() -> None:
    assert stages(200) == (20, 50, 200)
    assert stages(99) == (20, 99)
    assert stages(39) == (39,)
    assert settled([1e-12, 0.9], 0.05, 50)
    assert settled([], 0.05, 20)
    assert not settled([1e-12, 0.01], 0.05, 50)
    assert not settled([0.3], 0.05, 50)
    # a count in 20 draws settles nothing above alpha: only a p-value far below it
    assert not settled([1e-12, 0.9], 0.05, 20)
    assert settled([1e-12, 1e-4], 0.05, 20)


def _verdicts(trials: pl.DataFrame) -> pl.DataFrame:
    rep = detect_regimes(trials, seed=3)
    keys = ["model", "start", "end"]
    return pl.concat(
        [
            rep.anomalies.select(*keys, pl.lit("anomaly").alias("what")),
            rep.change_points.filter(pl.col("significant")).select(
                "model",
                pl.col("x_before").alias("start"),
                pl.col("x_after").alias("end"),
                pl.lit("change").alias("what"),
            ),
        ]
    ).sort(keys)


@pytest.mark.filterwarnings("ignore::regimes.RegimesWarning")
def test_the_stages_decide_as_all_draws_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # spikes from barely above min_ratio to clear: some curves settle in the first
    # stage, others need every draw; the verdicts must be those of every draw at once
    sweep = simulate_sweep(
        30, anomaly="spike", ratio=(1.2, 2.5), width=(1, 3), trials=3, cv=0.05, seed=5
    )
    staged = _verdicts(sweep.trials)
    monkeypatch.setattr(model, "stages", lambda n_boot: (n_boot,))
    at_once = _verdicts(sweep.trials)
    assert staged.height >= 10
    assert staged.equals(at_once)
