r"""The regime model of each curve, fitted, tested after selection and resampled.

For the curves of one grid (the same ``x``), each stage vectorised over curves and
bootstrap draws (docs/method.md, sections 2-5):

1. fit :math:`\ell = g + Z\delta + e` to the cell levels (:mod:`regimes._stats.scan`);
2. the fit writes each regime touching the first cell, which the model cannot tell
   from its complement (the trend has a free constant), as that complement, a step to
   the end (a curve starts at its normal level), unless it covers only the first one or
   two budgets; and nested regimes that share a boundary as adjacent ones
   (:mod:`regimes._stats.intervals`);
3. test each regime in ``direction`` against ``min_ratio`` (TREAT:
   :math:`z = (|\hat\delta| - \log r_0)/\mathrm{se}`), and the boundaries of every
   regime, whatever its direction, as change points with the same statistic;
4. calibrate both after selection: on curves where something was selected, draw the
   curve again under its fitted null (the trend, the cells' own trials resampled, and a
   normal between-cell term for what the trials do not explain), fit every draw the same
   way, and compare each statistic with the largest one the draws selected among
   regimes of its width class (:mod:`regimes.detect._nulls`), beyond every draw with
   the largest over every interval (:mod:`regimes.detect._scan`); in stages of 20, 50
   and all draws, each settling the curves far from ``alpha``;
5. draw it again under its fitted model (trend plus regimes) for the spread of each
   regime's onset, end and ratio;
6. per curve, the sensitivity: the ratio over trend of a 1-, 2- or 4-cell spike that
   step 4 reports with probability 0.8.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special

from regimes._stats.intervals import candidate_intervals
from regimes._stats.joint import Menu
from regimes._stats.levels import median_variance_factor
from regimes._stats.offers import Offers, offer_batches, offers
from regimes._stats.scan import RowFit, difference_scale, fit_rows, selection_threshold
from regimes._stats.smoother import Knot, Smoother, choose_knots, hinge_slopes, smoother_for
from regimes.detect._beside import Span, beside_spans
from regimes.detect._draws import draw_levels
from regimes.detect._nulls import class_maxima, class_p, settled, stages, t_sf, threshold
from regimes.detect._regimes import (
    KMAX,
    PRIOR_DF,
    WIDTH_CLASSES,
    as_tested,
    canonical,
    classes_on,
    spread,
    width_class,
)
from regimes.detect._scan import scan_maxima
from regimes.detect._sensitivity import (
    SENSITIVITY_WIDTHS,
    CurveNoise,
    curve_sensitivities,
)
from regimes.detect._trials import Pools

__all__ = [
    "KMAX",
    "MAX_CELLS",
    "MIN_CELLS",
    "SENSITIVITY_WIDTHS",
    "CurveInput",
    "CurveModel",
    "Regime",
    "fit_grid",
]

MIN_CELLS = 4
"""Fewest distinct ``x`` a curve needs: a regime must leave three cells to its trend."""

MAX_CELLS = 300
"""Most distinct ``x`` a curve may have: the model's smoothers are dense in the cells
(memory quadratic in them); a longer grid is analysed in budget ranges, or thinned."""


class CurveInput(NamedTuple):
    """One curve's cells and what its bootstrap resamples.

    ``u``: the trend coordinate; ``log_budget``: whether ``u`` is the log of ``x`` (the
    trend may then change slope: :func:`regimes._stats.smoother.choose_knots`);
    ``level``: cell levels; ``n``: trials per cell; ``pools``: the curve's residuals
    (:class:`regimes.detect._trials.Pools`); ``seed``: its own seed sequence entropy.
    """

    curve: int
    u: np.ndarray
    log_budget: bool
    level: np.ndarray
    n: np.ndarray
    pools: Pools
    seed: tuple[int, ...]


class Regime(NamedTuple):
    """One regime of a curve's model, cell indices within the curve.

    ``delta``, ``se``: its level over the trend and that level's standard error (the
    mean over its cells, those of regimes nested in it that could not be reported
    counted in, :func:`~regimes.detect._regimes.as_tested`); ``coef``: its coefficient
    in the model, what its cells add to the fitted values (:class:`RowFit`);
    ``beside``: the span of ``delta``'s intervals under the readings of the level
    beside it (:mod:`regimes.detect._beside`), None where it has none.
    """

    start: int
    end: int
    delta: float
    se: float
    tested: bool
    z: float
    z0: float
    p_value: float
    p_change: float
    bounds: tuple[int, int, int, int]
    boot_delta: tuple[float, float] | None
    coef: float
    beside: Span = None


class CurveModel(NamedTuple):
    """One curve's fitted model and its calibration.

    ``trend``: the fitted trend :math:`g` per cell; ``sigma``, ``df``: the cell noise
    and its degrees of freedom; ``sigma_within``: the trials' own, within processes;
    ``edf``: the trend's; ``tau``: the between-cell noise
    the bootstrap added beyond the resampled trials; ``resampled``: whether the curve
    was bootstrapped (only curves where selection found something are: elsewhere no
    statistic can pass); ``detectable``: ratio per width in
    :data:`SENSITIVITY_WIDTHS`; ``hinge``: where the trend changes slope, as the
    knot's cell and the trend's mean slopes in ``u`` before and after it (None: the
    trend chose no hinged smoother).
    """

    curve: int
    trend: np.ndarray
    sigma: float
    sigma_within: float
    df: float
    edf: float
    tau: float
    regimes: list[Regime]
    resampled: bool
    detectable: tuple[float, ...]
    hinge: tuple[int, float, float] | None


class _Noise(NamedTuple):
    """A curve's cell noise, its trials' sampling variance and scale, its difference scale."""

    sigma: float
    sampling: float
    within: float
    differences: float


_Gauss = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Regimes selected in unit normal noise: signed delta, se and width class per draw."""


class _Options(NamedTuple):
    direction: str
    tau0: float
    alpha: float
    level: float
    n_boot: int
    h: float


def _regimes_of(fit: RowFit, row: int, t: int) -> list[tuple[int, int, float, float, float]]:
    """Return the row's regimes as ``(start, end, delta, se, coef)``."""
    starts, ends = candidate_intervals(t)
    return [
        (
            int(starts[c]),
            int(ends[c]),
            float(fit.delta[row, j]),
            float(fit.se_unit[row, j] * fit.sigma[row]),
            float(fit.coef[row, j]),
        )
        for j, c in enumerate(fit.chosen[row])
        if c >= 0
    ]


def _statistics(delta: float, se: float, o: _Options) -> tuple[bool, float, float]:
    """Whether the regime is in ``direction``, its TREAT ``z`` and its change's ``z0``.

    ``z0`` is the same statistic in either direction: a change point is a boundary of a
    regime whose level differs from its surroundings by more than ``min_ratio``; without
    the threshold, the trend's small misfits to a bent curve would pass as changes.
    """
    tested = o.direction == "both" or (delta > 0) == (o.direction == "up")
    se = max(se, 1e-12)
    return tested, (abs(delta) - o.tau0) / se, (abs(delta) - o.tau0) / se


def _row_maxima(fit: RowFit, t: int, o: _Options) -> tuple[np.ndarray, np.ndarray]:
    """Per row and width class, the largest TREAT ``z`` among tested regimes and among all."""
    start, end, _ = canonical(fit, t)
    classes = width_class(end - start + 1)
    used = fit.chosen >= 0
    se = np.maximum(fit.se_unit * fit.sigma[:, None], 1e-12)
    delta = fit.delta
    tested = used & ((o.direction == "both") | ((delta > 0) == (o.direction == "up")))
    z = np.where(tested, (np.abs(delta) - o.tau0) / se, -np.inf)
    z0 = np.where(used, (np.abs(delta) - o.tau0) / se, -np.inf)
    return class_maxima(z, classes), class_maxima(z0, classes)


def _gaussian_maxima(sm: Smoother, o: _Options, seed: int) -> _Gauss:
    """Regimes selected in unit normal noise on the grid: signed delta, se and width class.

    Scaled to a curve's noise they give its null maxima without resampling it (for the
    sensitivity of curves where nothing was selected).
    """
    rng = np.random.default_rng(np.random.SeedSequence((seed, sm.size, 7)))
    rows = rng.normal(size=(o.n_boot, sm.size))
    fit = fit_rows(rows, sm, o.h, KMAX)
    start, end, delta = canonical(fit, sm.size)
    return delta, fit.se_unit * fit.sigma[:, None], width_class(end - start + 1)


def _gauss_thresholds(gauss: _Gauss, sigma: np.ndarray, o: _Options, level: float) -> np.ndarray:
    """Each curve's :func:`~regimes.detect._nulls.threshold` from the unit-noise draws ``(C, W)``.

    Per curve of cell noise ``sigma`` ``(C,)``: the draws' regimes scaled to its noise,
    their largest statistic per width class, and its ``1 - level`` quantile over the
    draws; :data:`_GAUSS_ENTRIES` statistics at a time.
    """
    delta, se, classes = gauss
    out = np.full((sigma.size, WIDTH_CLASSES), -np.inf)
    if not delta.shape[0]:
        return out
    tested = ((o.direction == "both") | ((delta > 0) == (o.direction == "up"))) & np.isfinite(delta)
    per = max(1, _GAUSS_ENTRIES // delta.size)
    for lo in range(0, sigma.size, per):
        s = sigma[lo : lo + per, None, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (np.abs(delta) * s - o.tau0) / (np.maximum(se, 1e-12) * s)
        z = np.where(tested, z, -np.inf).reshape(-1, delta.shape[1])
        maxima = class_maxima(z, np.tile(classes, (s.shape[0], 1)))
        maxima = maxima.reshape(s.shape[0], delta.shape[0], WIDTH_CLASSES)
        out[lo : lo + per] = np.quantile(maxima, 1.0 - level, axis=1, method="higher")
    return out


_GAUSS_ENTRIES = 2_000_000
"""Statistics per chunk of :func:`_gauss_thresholds`: bounds its memory."""


def _within(c: CurveInput) -> float:
    """Return the trials' robust standard deviation within processes (0 without replicates)."""
    # robustly: a hiccup moves a cell's median by little, and must not inflate the
    # noise a median is credited with (the bootstrap still draws the hiccups)
    trials = c.pools.trials
    return float(1.4826 * np.median(np.abs(trials))) if trials.size else 0.0


def _slice(fit: RowFit, start: int, stop: int) -> RowFit:
    return RowFit(*(field[start:stop] for field in fit))


def _tested_regimes(
    regimes: list[tuple[int, int, float, float, float]],
    nulls: np.ndarray,
    df: float,
    t: int,
    o: _Options,
) -> list[Regime]:
    """Each regime with its selection-aware p-values (bounds not yet drawn).

    A regime is compared with the null draws' regimes of its own width class, and its
    p-value multiplied by the number of classes the grid holds (Bonferroni).
    """
    out = []
    classes = classes_on(t)
    for regime in regimes:
        c = int(width_class(np.array(regime[1] - regime[0] + 1)))
        tested, z, z0 = _statistics(regime[2], regime[3], o)
        p = max(t_sf(z, df), class_p(z, nulls[:, 0], c, nulls[:, 2])) if tested else 1.0
        p_change = max(t_sf(z0, df), class_p(z0, nulls[:, 1], c, nulls[:, 3]))
        bounds = (regime[0], regime[0], regime[1], regime[1])
        p, p_change = min(1.0, classes * p), min(1.0, classes * p_change)
        out.append(Regime(*regime[:4], tested, z, z0, p, p_change, bounds, None, regime[4]))
    return out


def _with_spread(
    regimes: list[Regime], model: RowFit, t: int, level: float, df: float
) -> list[Regime]:
    """Return the regimes with their onset, end and delta spread over the model's draws."""
    out = []
    for r in regimes:
        bounds, boot = spread(model, t, (r.start, r.end, r.delta, r.se), level, df)
        out.append(r._replace(bounds=bounds, boot_delta=boot))
    return out


def fit_grid(
    curves: list[CurveInput],
    direction: str,
    min_ratio: float,
    alpha: float,
    level: float,
    n_boot: int,
    penalty: float,
    seed: int,
) -> list[CurveModel]:
    """Fit, test and resample the curves of one grid (every ``u`` equal).

    Each curve is offered the grid's smoothers, and those hinged at its own knot where
    its levels show one (:func:`regimes._stats.smoother.choose_knots`); the curves are
    fitted together, each choosing among its own (:mod:`regimes._stats.offers`).

    Parameters
    ----------
    curves : list of CurveInput
        The grid's curves.
    direction, min_ratio, alpha, level, n_boot, penalty, seed
        As :func:`regimes.detect_regimes`.

    Returns
    -------
    list of CurveModel
        In the order of ``curves``.
    """
    u = curves[0].u
    levels = np.stack([c.level for c in curves])
    knots: list[Knot | None] = [None] * len(curves)
    if curves[0].log_budget:
        knots = choose_knots(u, levels)
    plain = smoother_for(u)
    o = _Options(
        direction,
        float(np.log(min_ratio)),
        alpha,
        level,
        n_boot,
        selection_threshold(plain.size, penalty),
    )
    # what does not depend on a curve's own draws is drawn once per grid, on the
    # unhinged smoothers: the unit-noise null maxima and the power tables (a hinge is
    # a shape of the trend; a spike's power depends on the trend's flexibility)
    gauss = _gaussian_maxima(plain, o, seed)
    parts = [
        _fit_curves([curves[i] for i in rows], offers(u, [knots[i] for i in rows]), o, gauss)
        for rows in offer_batches(plain.size, knots, plain.edf.size)
    ]
    models = [m for part in parts for m in part[0]]
    sign = -1.0 if o.direction == "down" else 1.0
    detectable = curve_sensitivities(
        plain,
        np.concatenate([part[1] for part in parts]),
        np.concatenate([part[2] for part in parts]),
        [own for part in parts for own in part[3]],
        (sign, o.tau0, o.h),
        seed,
    )
    models = [m._replace(detectable=d) for m, d in zip(models, detectable, strict=True)]
    order = {c.curve: i for i, c in enumerate(curves)}
    return sorted(models, key=lambda m: order[m.curve])


def _fit_curves(
    curves: list[CurveInput], offered: Offers, o: _Options, gauss: _Gauss
) -> tuple[list[CurveModel], np.ndarray, np.ndarray, list[CurveNoise]]:
    """Fit, test and resample the curves, each on the smoothers it is ``offered``.

    Returns their models (sensitivity not yet drawn) and what it needs: each curve's
    smoother as the unhinged one of its flexibility, cell noise and noise.
    """
    sm = offered.sm
    levels = np.stack([c.level for c in curves])
    raw = fit_rows(levels, sm, o.h, KMAX, menu=(offered.menu, offered.menus))
    within = np.array([_within(c) for c in curves])
    sampling = np.array([_sampling(c, w) for c, w in zip(curves, within, strict=True)])
    fit = as_tested(raw, levels, sm, sampling, o.direction, o.tau0, o.alpha)
    # differences of the detrended levels: a bent trend would inflate those of the levels
    differences = difference_scale(sm.u, levels - raw.trend)
    noise = np.maximum(raw.sigma, differences)
    rows = [i for i in range(len(curves)) if (raw.chosen[i] >= 0).any()]
    nulls = _null_maxima(curves, (raw, fit), rows, sampling, offered, o)
    # the curves not resampled take their thresholds from the unit-noise draws, at once
    alone = [i for i in range(len(curves)) if i not in nulls]
    level = o.alpha / classes_on(sm.size)
    gauss_q = dict(zip(alone, _gauss_thresholds(gauss, noise[alone], o, level), strict=True))
    tested_with_noise = [
        _curve_model(
            c,
            fit,
            i,
            sm,
            _Noise(noise[i], sampling[i], within[i], differences[i]),
            nulls.get(i),
            gauss_q.get(i),
            o,
        )
        for i, c in enumerate(curves)
    ]
    models = [m for m, _ in tested_with_noise]
    _add_spread(models, curves, (raw, fit), sampling, sm, o)
    models = [
        # the between-cell (process) part of the cell noise: beyond the trials' own
        m._replace(sigma=sigma, tau=float(np.sqrt(max(0.0, sigma**2 - v))))
        for m, sigma, v in zip(models, raw.sigma.tolist(), sampling.tolist(), strict=True)
    ]
    ladder = int(np.sum(~sm.hinged))
    unhinged = np.where(sm.hinged[raw.which], (raw.which - ladder) % ladder, raw.which)
    return models, unhinged, noise, [own for _, own in tested_with_noise]


def _null_maxima(
    curves: list[CurveInput],
    fits: tuple[RowFit, RowFit],
    rows: list[int],
    sampling: np.ndarray,
    offered: Offers,
    o: _Options,
) -> dict[int, np.ndarray]:
    """Per resampled curve, its null draws' largest statistics (:func:`_fitted_maxima`).

    ``fits``: the curves' fit as selected and as tested; each draw is offered its
    curve's smoothers.

    In stages: every curve's ``n_boot`` draws are made, and fitted a stage at a time
    (:func:`~regimes.detect._nulls.stages`); a curve whose p-values its draws so far
    settle (``fit``'s regimes, :func:`~regimes.detect._nulls.settled`) keeps them
    alone, and the others get the next stage fitted too (docs/method.md, section 4).
    """
    if not rows:
        return {}
    raw, fit = fits
    b, sm = o.n_boot, offered.sm
    levels = draw_levels(curves, raw, rows, sm.u, b, 0)
    sampled = np.repeat(sampling[rows], b)
    menu = np.repeat(offered.menu[rows], b)
    draw = np.tile(np.arange(b), len(rows))
    maxima = np.empty((draw.size, 4, WIDTH_CLASSES))
    kept = np.zeros(len(rows), dtype=int)  # the draws each settled curve keeps
    done = 0
    for size in stages(b):
        still = kept == 0
        if not still.any():
            break
        fitted = np.repeat(still, b) & (draw >= done) & (draw < size)
        on = (menu[fitted], offered.menus)
        maxima[fitted] = _fitted_maxima(levels[fitted], sampled[fitted], sm, o, on)
        for k in np.flatnonzero(still):
            # every draw is fitted at the last stage: its p-values settle nothing more
            if size == b or settled(
                _p_values(fit, rows[k], maxima[k * b :][:size], sm.size, o), o.alpha, size
            ):
                kept[k] = size
        done = size
    return {i: maxima[k * b :][: kept[k]] for k, i in enumerate(rows)}


def _fitted_maxima(
    levels: np.ndarray, sampling: np.ndarray, sm: Smoother, o: _Options, menu: Menu
) -> np.ndarray:
    """Fit null draws as the data are, each on its ``menu``; per draw the largest statistics.

    ``(K, 4, C)``: per width class, among the selected regimes the largest TREAT ``z`` and
    ``z0``, and among every interval (:func:`~regimes.detect._scan.scan_maxima`) the same
    two.
    """
    fitted = fit_rows(levels, sm, o.h, KMAX, menu=menu)
    fit = as_tested(fitted, levels, sm, sampling, o.direction, o.tau0, o.alpha)
    sign = {"up": 1.0, "down": -1.0}.get(o.direction, 0.0)
    scanned = scan_maxima(levels, sm, fit.which, fit.sigma, o.tau0, sign)
    return np.stack([*_row_maxima(fit, sm.size, o), *scanned], axis=1)


def _p_values(fit: RowFit, row: int, nulls: np.ndarray, t: int, o: _Options) -> list[float]:
    """Every p-value of the row's regimes, tested on the null maxima ``nulls``."""
    tested = _tested_regimes(_regimes_of(fit, row, t), nulls, float(fit.df[row]), t, o)
    return [p for r in tested for p in (r.p_value, r.p_change)]


def _add_spread(
    models: list[CurveModel],
    curves: list[CurveInput],
    fits: tuple[RowFit, RowFit],
    sampling: np.ndarray,
    sm: Smoother,
    o: _Options,
) -> None:
    """Draw the model of each curve with a significant regime or change: the bounds.

    ``fits``: the curves' fit as selected and as tested. Each regime of such a curve is
    read beside its neighbours too (:func:`~regimes.detect._beside.beside_spans`).
    """
    raw, fit = fits
    rows = [
        i
        for i, m in enumerate(models)
        if any(min(r.p_value, r.p_change) < o.alpha for r in m.regimes)
    ]
    if not rows:
        return
    # the model's draws hold the trend's flexibility at the curve's own: the bounds say
    # where a regime starts given the trend, and a draw whose trend took the regime in
    # holds no onset to count (docs/method.md, section 5)
    held = np.repeat(raw.which[rows], o.n_boot)
    levels = draw_levels(curves, raw, rows, sm.u, o.n_boot, 1)
    near = [_near(models[i].regimes, sm.size) for i in rows]
    drawn = fit_rows(levels, sm, o.h, KMAX, held, (np.repeat(np.arange(len(rows)), o.n_boot), near))
    sampled = np.repeat(sampling[rows], o.n_boot)
    model = as_tested(drawn, levels, sm, sampled, o.direction, o.tau0, o.alpha)
    b = o.n_boot
    test = (o.direction, o.tau0, o.alpha, o.level)
    beside = beside_spans(np.stack([c.level for c in curves]), fit, rows, sampling, sm, test)
    for k, i in enumerate(rows):
        own = _slice(model, k * b, (k + 1) * b)
        spread_out = _with_spread(models[i].regimes, own, sm.size, o.level, models[i].df)
        models[i] = models[i]._replace(
            regimes=[r._replace(beside=s) for r, s in zip(spread_out, beside[k], strict=True)]
        )


NEAR_CELLS = 4
"""Cells beyond a regime of the data's model within which its model's draws select."""


def _near(regimes: list[Regime], t: int) -> np.ndarray:
    """Return the candidate intervals within :data:`NEAR_CELLS` cells of some regime.

    What a draw selects elsewhere moves no bound and no interval of the regimes: the
    draws select among these alone (docs/method.md, section 5).
    """
    starts, ends = candidate_intervals(t)
    inside = np.zeros(starts.size, dtype=bool)
    for r in regimes:
        inside |= (starts >= r.start - NEAR_CELLS) & (ends <= r.end + NEAR_CELLS)
    return np.flatnonzero(inside)


def _sampling(c: CurveInput, within: float) -> float:
    """Return the cells' mean sampling variance from their trials (a level's noise floor)."""
    return float(np.mean(median_variance_factor(c.n) * within**2 / c.n))


def _curve_model(
    c: CurveInput,
    fit: RowFit,
    i: int,
    sm: Smoother,
    noise: _Noise,
    nulls: np.ndarray | None,
    gauss_q: np.ndarray | None,
    o: _Options,
) -> tuple[CurveModel, CurveNoise]:
    """One curve's model, its regimes tested on its null draws; what its sensitivity needs."""
    t = sm.size
    regimes = _regimes_of(fit, i, t)
    sigma, df, which = float(fit.sigma[i]), float(fit.df[i]), int(fit.which[i])
    tested: list[Regime] = []
    level = o.alpha / classes_on(t)
    if nulls is not None:
        tested = _tested_regimes(regimes, nulls, df, t, o)
        q = threshold(nulls[:, 0], level)
    else:
        assert gauss_q is not None
        q = gauss_q
    # scipy.stats.t.ppf's value, without its checks' cost per curve (df holds the prior's 4)
    critical = np.maximum(q, float(special.stdtrit(df, 1.0 - level)))
    rho = noise.sampling / max(noise.sigma, 1e-12) ** 2
    own = CurveNoise(
        noise.sigma, o.tau0, critical, rho, PRIOR_DF, fit.trend[i], c.level, noise.differences
    )
    model = CurveModel(
        curve=c.curve,
        trend=fit.trend[i],
        sigma=sigma,
        sigma_within=float(noise.within),
        df=df,
        edf=float(sm.edf[which]),
        tau=0.0,
        regimes=tested,
        resampled=nulls is not None,
        detectable=(),
        hinge=hinge_slopes(c.u, fit.trend[i], sm, which),
    )
    return model, own
