r"""What a curve's call could have seen: the smallest spike it reports with probability 0.8.

The power of the call to find a spike depends on more than the noise: on a short grid
the trend's smoothness, chosen again for every curve, can bend to take a spike in, and
selection must offer the spike before it is tested. So power is simulated, once per
grid, with the model's own fit (docs/method.md, section 6):

* in unit normal cell noise, a spike of height :math:`s` (in units of the cell noise)
  and width :math:`w` is planted at a random interior position of every draw (two
  budgets from either end where the grid has room), for a ladder of heights over the
  same noise, about a flat trend;
* every draw is fitted as the data are (trend, selection, regimes); on a grid of up to
  :data:`OWN_DRAWS_CELLS` cells about the curve's own mean (:func:`own_mean`), from the
  whole ladder of smoothers;
* a curve's own trend :math:`g` enters each draw through the fit, which is linear in
  the levels once its choices are made: the part :math:`A g` of the trend its smoother
  leaves adds :math:`z'Ag / z'Az` to the estimate of a regime :math:`z` and
  :math:`\lVert Ag \rVert^2/\nu` to the residual variance (on a short geometric grid
  the smoother cannot follow the decode trend, and that misfit costs power);
* a curve with cell noise :math:`\sigma`, TREAT threshold :math:`\tau_0 = \log r_0`,
  critical value :math:`q` and residual variance moderated towards its trials' own
  (prior weight :math:`\nu_0`, sampling variance :math:`\rho\sigma^2`) reports a draw
  when a selected regime over the spike, in its direction, has
  :math:`(\sigma|\hat\delta| - \tau_0) / (\sigma\,\mathrm{se}\,m) \ge q`, with
  :math:`m^2 = (\nu_0\rho + \nu\hat\sigma^2)/(\nu_0 + \nu)` from the draw's own
  residual scale :math:`\hat\sigma` on :math:`\nu` degrees of freedom;
* its detectable ratio is :math:`\exp(\sigma s^*)`, :math:`s^*` the smallest height
  reported in :data:`POWER` of the draws (interpolated on the ladder, on the probit scale).

The noise is scaled out (the fit is scale-free apart from the moderation and the
trend's misfit, which are applied per curve), so one table serves every curve of a grid
that chose the same trend flexibility.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from scipy import special

from regimes._stats.scan import fit_rows
from regimes._stats.smoother import Smoother
from regimes.detect._regimes import KMAX, canonical, width_class

__all__ = [
    "POWER",
    "SENSITIVITY_WIDTHS",
    "CurveNoise",
    "PowerDesign",
    "PowerTable",
    "curve_sensitivities",
    "detectable_on_ladders",
    "detectable_ratios",
    "ladder",
    "own_mean",
    "power_table",
    "power_tables",
]

SENSITIVITY_WIDTHS = (1, 2, 4)
"""Spike widths, in cells, whose detectable ratio every curve reports."""

POWER = 0.8
"""Probability of report that a detectable ratio promises."""

DRAWS = 48
"""Draws per width and height (a power of 0.8 to within about 0.06)."""

LARGEST_RATIO = 10.0
"""Largest detectable ratio the ladder reaches; beyond it a curve reports infinity."""

_STEP = 1.25
"""Ratio between neighbouring heights of the ladder."""

_MARGIN = 5.0
"""Height over the highest TREAT threshold of a table's curves, in units of their noise,
that the first stage of rungs reaches: the rung where a curve crosses :data:`POWER` lies
below it for most curves (on 300 mixed curves, 1 to 4 rungs below 8 units), and the
stages after it add :data:`_MORE_RUNGS` at a time."""

_MORE_RUNGS = 3
"""Rungs fitted at each stage after the first, while a curve of the table has not crossed."""


class PowerTable(NamedTuple):
    """The fitted draws of one grid and trend flexibility.

    ``heights``: the ladder (units of the cell noise); per width, height, draw and
    regime ``(W, L, D, KMAX)``: ``delta`` and ``se_unit`` of each selected regime over
    the spike in its direction (NaN elsewhere), ``start`` and ``end`` its cells; per
    draw ``(W, L, D)``: ``which`` (the smoother, an index of the grid's), ``sigma`` and
    ``df`` (the residual scale and its degrees of freedom); ``valid``: the widths the
    grid can hold; ``sign``: ``+1`` for spikes, ``-1`` for dips; ``about_trend``: drawn
    about one curve's own trend (else flat, the trend's misfit added per curve).
    """

    heights: np.ndarray
    delta: np.ndarray
    se_unit: np.ndarray
    start: np.ndarray
    end: np.ndarray
    which: np.ndarray
    sigma: np.ndarray
    df: np.ndarray
    valid: np.ndarray
    sign: float
    about_trend: bool


class CurveNoise(NamedTuple):
    """What one curve brings to its grid's table: noise, test and trend.

    ``sigma``: cell noise (log scale); ``tau0``: ``log(min_ratio)``; ``critical``: the
    value its statistics are compared with, per width class
    (:func:`regimes.detect._regimes.width_class`); ``rho``: its trials' sampling variance over
    ``sigma**2`` (the moderation's prior, of weight ``prior_df``); ``trend``: its fitted
    trend per cell; ``level``: its cell levels; ``differences``: the difference-based
    scale of its detrended levels (:func:`regimes._stats.scan.difference_scale`).
    """

    sigma: float
    tau0: float
    critical: np.ndarray
    rho: float
    prior_df: float
    trend: np.ndarray
    level: np.ndarray
    differences: float


def ladder(sigmas: np.ndarray, tau0: float) -> np.ndarray:
    """Return the heights that resolve the detectable ratio of curves of these noises.

    Heights are rungs of one fixed ladder, :data:`_STEP` apart, so a curve's answer is
    the same whatever other curves share its table: from the TREAT threshold of the
    noisiest curve (no spike below it can pass) to :data:`LARGEST_RATIO` on the
    quietest.
    """
    sigmas = np.maximum(np.asarray(sigmas, dtype=float), 1e-6)
    low = max(tau0, 0.05) / float(sigmas.max())
    high = np.log(LARGEST_RATIO) / float(sigmas.min())
    first = int(np.floor(np.log(low) / np.log(_STEP)))
    last = max(int(np.ceil(np.log(high) / np.log(_STEP))), first + 1)
    return _STEP ** np.arange(first, last + 1, dtype=float)


def _placed(t: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Random interior spike masks ``(DRAWS, t)``: two cells from each end where possible."""
    margin = 2 if t >= width + 4 else 1
    first = rng.integers(margin, t - margin - width + 1, size=DRAWS)
    cols = np.arange(t)
    return (cols >= first[:, None]) & (cols < first[:, None] + width)


class PowerDesign(NamedTuple):
    """What power tables are drawn for: :func:`power_table`'s arguments but ladder and offset."""

    sm: Smoother
    least: int
    h: float
    sign: float
    seed: int


def power_table(
    sm: Smoother,
    least: int,
    h: float,
    sign: float,
    heights: np.ndarray,
    seed: int,
    offset: np.ndarray | None = None,
) -> PowerTable:
    """Fit spikes of every width and height in unit noise on grid ``sm``.

    Parameters
    ----------
    sm : Smoother
        The grid's smoothers.
    least : int
        The stiffest smoother the draws may choose (the curves' own choice).
    h : float
        The selection threshold, as the data are fitted with.
    sign : float
        ``+1`` for spikes, ``-1`` for dips (``direction="down"``).
    heights : numpy.ndarray
        The ladder, from :func:`ladder`.
    seed : int
        The call's seed.
    offset : numpy.ndarray, optional
        A curve's own trend, in units of its noise, to draw about (default: flat).

    Returns
    -------
    PowerTable
    """
    return power_tables(PowerDesign(sm, least, h, sign, seed), [(heights, offset)])[0]


def power_tables(
    design: PowerDesign, asks: list[tuple[np.ndarray, np.ndarray | None]]
) -> list[PowerTable]:
    """:func:`power_table` of each ladder and offset in ``asks``, on one grid and flexibility.

    Every table holds the same draws (they depend on the grid and the seed alone, never
    on the heights asked for), about its own offset; a row's fit depends on that row
    alone, so the tables are fitted together, one fit per width.
    """
    d = design
    t, sizes = d.sm.size, [heights.size for heights, _ in asks]
    n_levels = sum(sizes)
    rng = np.random.default_rng(np.random.SeedSequence((d.seed, t, d.least, 13)))
    noise = rng.normal(size=(DRAWS, t))
    shape = (len(SENSITIVITY_WIDTHS), n_levels, DRAWS)
    delta, se = np.full((*shape, KMAX), np.nan), np.full((*shape, KMAX), np.nan)
    start, end = np.zeros((*shape, KMAX), dtype=np.int64), np.zeros((*shape, KMAX), dtype=np.int64)
    which, sigma, df = np.full(shape, d.least), np.ones(shape), np.ones(shape)
    valid = np.array([t - w >= 3 for w in SENSITIVITY_WIDTHS])
    about = [noise + (0.0 if offset is None else offset) for _, offset in asks]
    flexible = d.sm.at_least(d.least)
    for k, width in enumerate(SENSITIVITY_WIDTHS):
        if not valid[k]:
            continue
        mask = _placed(t, width, rng)
        rows = np.concatenate(
            [
                drawn[None] + d.sign * heights[:, None, None] * mask[None]
                for drawn, (heights, _) in zip(about, asks, strict=True)
            ]
        )
        # the coefficients, not the mean levels of the data's tests: in unit noise no
        # nested regime can be set against min_ratio, and a planted spike is one regime
        fit = fit_rows(rows.reshape(-1, t), flexible, d.h, KMAX)
        a, b, signed = canonical(fit, t)
        covered = np.tile(mask, (n_levels, 1))
        first, last = covered.argmax(axis=1), t - 1 - covered[:, ::-1].argmax(axis=1)
        over = (a <= last[:, None]) & (b >= first[:, None]) & (np.sign(signed) == d.sign)
        inner = (*shape[1:], KMAX)
        delta[k] = np.where(over, np.abs(signed), np.nan).reshape(inner)
        se[k] = np.where(over, fit.se_unit, np.nan).reshape(inner)
        start[k], end[k] = a.reshape(inner), b.reshape(inner)
        which[k] = d.least + fit.which.reshape(shape[1:])
        sigma[k], df[k] = fit.sigma.reshape(shape[1:]), fit.df.reshape(shape[1:])
    edges = np.cumsum([0, *sizes])
    return [
        PowerTable(
            heights,
            delta[:, lo:hi],
            se[:, lo:hi],
            start[:, lo:hi],
            end[:, lo:hi],
            which[:, lo:hi],
            sigma[:, lo:hi],
            df[:, lo:hi],
            valid,
            d.sign,
            offset is not None,
        )
        for (heights, offset), lo, hi in zip(asks, edges[:-1], edges[1:], strict=True)
    ]


def _geometry(table: PowerTable, sm: Smoother) -> tuple[np.ndarray, ...]:
    """Return the smoother, bounds, :math:`z'Az` and width class of every regime of a table.

    From prefix sums of :math:`A`. :func:`_power` reads them for every curve a table
    serves, and they do not depend on the curve: computed once per table.
    """
    p2 = np.zeros((sm.residual.shape[0], sm.size + 1, sm.size + 1))
    p2[:, 1:, 1:] = sm.residual.cumsum(axis=1).cumsum(axis=2)
    w = np.broadcast_to(table.which[..., None], table.start.shape)
    a, b = table.start, table.end + 1
    zaz = p2[w, b, b] - p2[w, a, b] - p2[w, b, a] + p2[w, a, a]
    return w, a, b, np.maximum(zaz, 1e-12), width_class(b - a)


def _trend_part(sm: Smoother, trend: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Return the prefix sums of :math:`Ag` ``(S, T + 1)`` and :math:`\lVert Ag \rVert^2` ``(S,)``.

    For each smoother :math:`A` of the grid and the curve's trend :math:`g`: what the
    smoother leaves of the trend, whose sum over a regime :math:`z` adds
    :math:`z'Ag / z'Az` to its estimate (a difference of two prefix sums) and whose
    sum of squares adds to the residual's.
    """
    ag = np.einsum("wij,j->wi", sm.residual, trend)  # (S, T)
    pre = np.concatenate([np.zeros((ag.shape[0], 1)), np.cumsum(ag, axis=1)], axis=1)
    return pre, np.sum(ag**2, axis=1)


@numba.njit(cache=True, error_model="numpy")
def _power(
    table: tuple[np.ndarray, ...],
    geometry: tuple[np.ndarray, ...],
    trend_part: tuple[np.ndarray, np.ndarray],
    critical: np.ndarray,
    noise: tuple[float, float, float, float, float],
) -> np.ndarray:
    """Return the share of draws reported, per width and height ``(W, L)``.

    ``table``: the draws' ``delta``, ``se_unit``, ``sigma``, ``df`` and ``which``;
    ``geometry``: their regimes' bounds, :math:`z'Az` and width classes
    (:func:`_geometry`); ``trend_part``: :func:`_trend_part`; ``noise``: the curve's
    sigma, the table's sign, ``tau0``, the prior's df and ``rho``. Compiled: per curve
    these are a few passes over ``(W, L, D, K)`` draws, which as numpy operations cost
    more in their calls' overhead than in their work.
    """
    delta, se_unit, t_sigma, t_df, which = table
    a, b, zaz, classes = geometry
    pre, rss = trend_part
    sigma, sign, tau0, prior_df, rho = noise
    n_w, n_l, n_d, n_k = delta.shape
    power = np.empty((n_w, n_l))
    for w in range(n_w):
        for h in range(n_l):
            count = 0
            for d in range(n_d):
                s, df = which[w, h, d], t_df[w, h, d]
                var = t_sigma[w, h, d] ** 2 + rss[s] / (sigma**2 * max(df, 1.0))
                m = np.sqrt((prior_df * rho + df * var) / (prior_df + df))
                for k in range(n_k):
                    bias = (pre[s, b[w, h, d, k]] - pre[s, a[w, h, d, k]]) / zaz[w, h, d, k]
                    estimate = sigma * delta[w, h, d, k] + sign * bias
                    z = (estimate - tau0) / (sigma * se_unit[w, h, d, k] * m)
                    if z >= critical[classes[w, h, d, k]]:
                        count += 1
                        break
            power[w, h] = count / n_d
    return power


def detectable_ratios(
    table: PowerTable,
    sm: Smoother,
    curve: CurveNoise,
    geometry: tuple[np.ndarray, ...] | None = None,
) -> tuple[float, ...]:
    """Return one curve's detectable ratio per width in :data:`SENSITIVITY_WIDTHS`.

    Parameters
    ----------
    table : PowerTable
        Its grid's fitted draws, at its trend flexibility.
    sm : Smoother
        The grid's smoothers.
    curve : CurveNoise
        Its noise, test and trend.
    geometry : tuple of numpy.ndarray, optional
        The table's :func:`_geometry`, where the caller serves several curves from it.

    Returns
    -------
    tuple of float
        NaN where the grid cannot hold the width; infinity where no height up to
        :data:`LARGEST_RATIO` is reported in :data:`POWER` of the draws.
    """
    sigma = max(curve.sigma, 1e-9)
    trend = np.zeros(sm.size) if table.about_trend else curve.trend
    geometry = _geometry(table, sm) if geometry is None else geometry
    _, start, end, zaz, classes = geometry
    drawn = (table.delta, table.se_unit, table.sigma, table.df, table.which)
    noise = (sigma, float(table.sign), curve.tau0, curve.prior_df, curve.rho)
    power = _power(drawn, (start, end, zaz, classes), _trend_part(sm, trend), curve.critical, noise)
    return tuple(
        _crossing(table.heights, power[k], sigma) if table.valid[k] else float("nan")
        for k in range(len(SENSITIVITY_WIDTHS))
    )


def _crossing(heights: np.ndarray, power: np.ndarray, sigma: float) -> float:
    r"""Return the ratio at the first height reported in :data:`POWER` of draws, interpolated.

    Between that height and the one before it, on the probit scale: a spike of height
    :math:`s` is reported when its estimate, :math:`s` plus normal noise, clears a
    threshold, so :math:`\Phi^{-1}(\text{power})` is about linear in :math:`s`, and
    power itself is not (concave above one half, where :data:`POWER` lies: read
    linearly, the crossing lands late, and the ratio promised is found more often
    than promised). Shares of 0 or 1 are read as half a draw from them.
    """
    # the first height past POWER, and the one before it: power is noisy, not monotone
    above = np.flatnonzero(power >= POWER)
    if above.size == 0:
        return float("inf")
    j = int(above[0])
    if j == 0:
        s = float(heights[0])
    else:
        half = 0.5 / DRAWS
        shares = [min(max(float(p), half), 1 - half) for p in (power[j - 1], power[j], POWER)]
        z0, z1, target = special.ndtri(np.array(shares))
        w = (target - z0) / max(z1 - z0, 1e-12)
        s = float(heights[j - 1] + w * (heights[j] - heights[j - 1]))
    ratio = float(np.exp(min(sigma * s, 700.0)))
    return ratio if ratio <= LARGEST_RATIO * (1 + 1e-9) else float("inf")


def _joined(low: PowerTable, high: PowerTable) -> PowerTable:
    """Return the table of ``low``'s rungs followed by ``high``'s."""

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(low, name), getattr(high, name)], axis=1)

    return low._replace(
        heights=np.concatenate([low.heights, high.heights]),
        delta=cat("delta"),
        se_unit=cat("se_unit"),
        start=cat("start"),
        end=cat("end"),
        which=cat("which"),
        sigma=cat("sigma"),
        df=cat("df"),
    )


def _settled(ratios: tuple[float, ...], table: PowerTable, curve: CurveNoise) -> bool:
    """Whether more rungs could change a curve's answer: not once each width has crossed."""
    past = float(table.heights[-1]) * curve.sigma >= np.log(LARGEST_RATIO * (1 + 1e-9))
    return past or all(not np.isinf(r) for r in ratios)


Ask = tuple[np.ndarray, np.ndarray | None, list[CurveNoise]]
"""A power table asked for: its ladder, its offset (None: flat) and the curves it serves;
the first two are what :func:`power_tables` draws it from."""


def _rungs_next(heights: np.ndarray, curves: list[CurveNoise], fitted: int) -> int:
    """Rungs to fit through next, ``fitted`` fitted so far.

    First to :data:`_MARGIN` over the highest threshold of ``curves`` (and one more),
    then :data:`_MORE_RUNGS` more at a time.
    """
    if fitted:
        return min(heights.size, fitted + _MORE_RUNGS)
    top = max(c.tau0 / max(c.sigma, 1e-9) for c in curves) + _MARGIN
    return min(heights.size, int(np.searchsorted(heights, top, side="right")) + 1)


def _read(
    table: PowerTable,
    sm: Smoother,
    curves: list[CurveNoise],
    ratios: list[tuple[float, ...]],
    settled: list[bool],
) -> None:
    """Read, in place, the detectable ratios of the curves no shorter ladder settled.

    A settled curve's answer is final: its crossing is the first, and the rungs added
    lie above it (:func:`_settled`).
    """
    geometry = _geometry(table, sm)
    for k, curve in enumerate(curves):
        if not settled[k]:
            ratios[k] = detectable_ratios(table, sm, curve, geometry)
            settled[k] = _settled(ratios[k], table, curve)


def detectable_on_ladders(design: PowerDesign, asks: list[Ask]) -> list[list[tuple[float, ...]]]:
    """Return the detectable ratios of each ask's curves, fitting only the rungs needed.

    A curve's answer is read at the first rung whose power reaches :data:`POWER` and the
    rung before it (:func:`detectable_ratios`), and every rung's draws are the same
    whichever rungs are fitted. So the rungs are fitted from the lowest up, in stages:
    those up to :data:`_MARGIN` over the highest threshold of a table's curves, then
    :data:`_MORE_RUNGS` at a time, only while a curve of the table has not crossed. The
    answers are those of the whole ladder; each stage fits the tables of all asks
    still open together (:func:`power_tables`).

    Parameters
    ----------
    design : PowerDesign
        The grid, trend flexibility, threshold, direction and seed of the tables.
    asks : list of Ask
        Per table its ladder (from :func:`ladder`), its offset and the curves it serves.

    Returns
    -------
    list of list of tuple of float
        Per ask and curve, as :func:`detectable_ratios`.
    """
    tables: dict[int, PowerTable] = {}
    ratios: list[list[tuple[float, ...]]] = [[()] * len(a[2]) for a in asks]
    settled = [[False] * len(a[2]) for a in asks]
    pending = list(range(len(asks)))
    while pending:
        done = [tables[i].heights.size if i in tables else 0 for i in pending]
        stops = [_rungs_next(asks[i][0], asks[i][2], d) for i, d in zip(pending, done, strict=True)]
        rungs = [asks[i][0][d:stop] for i, d, stop in zip(pending, done, stops, strict=True)]
        new = power_tables(design, [(r, asks[i][1]) for i, r in zip(pending, rungs, strict=True)])
        for i, table in zip(pending, new, strict=True):
            tables[i] = _joined(tables[i], table) if i in tables else table
            _read(tables[i], design.sm, asks[i][2], ratios[i], settled[i])
        pending = [
            i for i in pending if tables[i].heights.size < asks[i][0].size and not all(settled[i])
        ]
    return ratios


OWN_DRAWS_CELLS = 12
"""Longest grid whose curves each draw their power about their own levels."""


def own_mean(curve: CurveNoise, residual_df: float) -> tuple[CurveNoise, np.ndarray]:
    r"""Return a curve's noise and the mean its own draws are made about.

    A short grid's trend leaves part of the curve's shape in its residual :math:`r`
    (a decode curve bends more sharply than the smoother follows), which inflates the
    residual scale and decides, with the noise, whether selection offers a spike. So
    the draws are made about the trend plus the part of :math:`r` that is not noise,
    shrunk as James and Stein shrink a mean, by
    :math:`(1 - \nu s^2 / \lVert r \rVert^2)_+` for :math:`\nu` residual degrees of
    freedom, with cell noise :math:`s` between the trials' own sampling noise and the
    residual scale: the difference-based scale, which a smooth misfit hardly moves,
    clipped to that range.
    """
    sampling = np.sqrt(curve.rho) * curve.sigma
    s = max(float(np.clip(curve.differences, sampling, curve.sigma)), 1e-9)
    r = curve.level - curve.trend
    r = r - r.mean()
    shrink = max(0.0, 1.0 - residual_df * s**2 / max(float(r @ r), 1e-300))
    mean = curve.trend + shrink * r
    own = curve._replace(sigma=s, rho=curve.rho * (curve.sigma / s) ** 2, trend=mean)
    return own, mean / s


def curve_sensitivities(
    sm: Smoother,
    which: np.ndarray,
    noise: np.ndarray,
    owns: list[CurveNoise],
    scan: tuple[float, float, float],
    seed: int,
) -> list[tuple[float, ...]]:
    r"""Return each curve's detectable ratios, from its power table.

    ``which``: each curve's smoother in ``sm``; ``noise``: their cell noise; ``scan``:
    the sign of the direction tested, :math:`\log` ``min_ratio`` and the selection
    threshold.

    On a grid of up to :data:`OWN_DRAWS_CELLS` cells each curve draws about its own
    mean (:func:`own_mean`), and its draws choose the trend's flexibility as the data
    do, from the whole ladder: there a spike can make selection take a stiffer trend
    that leaves it unselected, and a trend the smoother cannot follow decides whether
    selection offers a spike at all. On longer grids the curves that chose one
    flexibility share flat draws, which may choose that flexibility or a more flexible
    one (flat draws would always choose the stiffest), and each adds its trend's
    misfit to them.
    """
    sign, tau0, h = scan
    chosen = which.tolist()
    out: list[tuple[float, ...]] = [()] * len(owns)
    if sm.size <= OWN_DRAWS_CELLS:
        residual_df = np.sum(sm.residual**2, axis=(1, 2))
        asks: list[Ask] = []
        for w, curve in zip(chosen, owns, strict=True):
            own, offset = own_mean(curve, float(residual_df[w]))
            asks.append((ladder(np.array([own.sigma]), tau0), offset, [own]))
        return [r[0] for r in detectable_on_ladders(PowerDesign(sm, 0, h, sign, seed), asks)]
    for w in sorted(set(chosen)):
        members = np.flatnonzero(which == w)
        ask = (ladder(noise[members], tau0), None, [owns[i] for i in members])
        ratios = detectable_on_ladders(PowerDesign(sm, w, h, sign, seed), [ask])[0]
        for i, r in zip(members, ratios, strict=True):
            out[i] = r
    return out
