r"""Cell levels with honest sampling variances, from raw replicates.

Everything works on the log scale of the measured quantity, where a multiplicative
slowdown is a shift and noise is close to homoscedastic. A cell is one ``x`` of one
curve. Its level :math:`\ell_t` is the one-step Huber location of the log trials
(:func:`_huber_cells`, with the curve's within-session scale) after removing session
main effects (a session that spans several cells of a curve gets its offset
:math:`\alpha_s`, the median over its cells of its session median minus the cell's
median of session medians). The sampling variance of :math:`\ell_t` is the larger of
two estimates, each moderated towards the curve's pooled value the way limma moderates
gene-wise variances (Smyth 2004), :math:`\tilde s^2 = (d_0 s_0^2 + d\,s^2)/(d_0 + d)`
with df :math:`d_0 + d`:

* within-session noise, :math:`\kappa(n_t)\,\tilde s_{w,t}^2/n_t` with
  :math:`d_0` = :data:`PRIOR_DF`: the pooled value :math:`\sigma_w` is the median
  absolute deviation of log trials from their (cell, session) medians over the curve,
  made consistent for the normal (robust to single-trial hiccups), the cell's own is
  its within-session variance (df :math:`n_t - S_t`), and :math:`\kappa(n)` is
  :math:`n` times the variance of the Huber location of ``n`` standard normals (about
  1.05; :func:`huber_variance_factor`). A cell whose trials disagree, say two hiccups
  among three trials, is no more certain than its replicates say;
* between sessions, :math:`\tilde B_t/S_t`: the variance of the cell's session
  medians (df :math:`S_t - 1`) moderated towards the curve's pooled value with a prior
  df estimated per curve as limma does (:func:`_prior_dfs`). One slow process among
  the sessions of a cell makes that cell uncertain, not anomalous.

Each cell's *median* also gets a variance, as an estimate for a fresh process (the
session lottery included), for its confidence interval (:func:`_median_variance`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl
from scipy import special, stats

__all__ = [
    "HUBER_K",
    "PRIOR_DF",
    "VARIANCE_FLOOR",
    "cell_levels",
    "huber_variance_factor",
    "median_variance_factor",
]

HUBER_K = 1.345
"""Clipping point of the Huber location, in units of the within-session scale."""

_HUBER_VARIANCE = np.array([1.0, 1.0, 1.041, 1.038, 1.049, 1.042, 1.052, 1.051, 1.052, 1.05])
"""n times the variance of the one-step Huber location of n standard normals (from the
median, known scale), n = 1..10 (400,000 simulated samples each); 1.05 beyond."""

_MEDIAN_VARIANCE = np.array(
    [
        1.0,
        1.0,
        1.349,
        1.192,
        1.434,
        1.288,
        1.473,
        1.344,
        1.497,
        1.382,
        1.509,
        1.41,
        1.521,
        1.431,
        1.526,
        1.446,
        1.529,
        1.46,
        1.536,
        1.47,
        1.541,
        1.475,
        1.541,
        1.485,
        1.544,
        1.492,
        1.543,
        1.496,
        1.548,
        1.499,
        1.55,
        1.506,
        1.551,
        1.509,
        1.55,
        1.51,
        1.553,
        1.517,
        1.553,
        1.519,
    ]
)
"""n times the variance of the median of n standard normals, n = 1..40 (2 million
simulated samples each; even n average the middle pair)."""

_BLOCK_MAD = np.array(
    [
        0.4771,
        0.6901,
        0.4861,
        0.6848,
        0.5278,
        0.6819,
        0.5628,
        0.6809,
        0.5878,
        0.6793,
        0.6032,
        0.6786,
        0.6155,
        0.6786,
        0.623,
        0.6775,
        0.63,
        0.6776,
        0.6352,
        0.678,
        0.6393,
        0.6772,
        0.6417,
        0.6779,
        0.6441,
        0.6768,
        0.6466,
        0.677,
        0.6482,
        0.6762,
        0.6506,
        0.6771,
        0.6516,
        0.6758,
        0.6533,
        0.6769,
        0.6544,
        0.6762,
        0.6549,
    ]
)
"""Median absolute deviation of m standard normals from their median, m = 2..40, the
trial at the median of an odd block left out (3 million simulated values each);
beyond 40 the last value of the same parity."""


def _block_mad(size: np.ndarray) -> np.ndarray:
    """:data:`_BLOCK_MAD` for blocks of ``size`` trials (at least 2)."""
    size = np.asarray(size, dtype=np.int64)
    capped = np.where(size > 40, 40 - (size % 2), size)
    return _BLOCK_MAD[capped - 2]


VARIANCE_FLOOR = 1e-8
"""Smallest sampling variance of a cell's log level, (0.01 %)^2: timers round, and
identical trials would otherwise make any difference between cells infinitely
significant."""

MAX_PRIOR_DF = 50.0
"""Largest prior df a curve's between-session variances can earn (limma allows any)."""

PRIOR_DF = 4.0
"""Weight, in degrees of freedom, of a curve's pooled noise when it is combined with a
cell's own estimate (empirical-Bayes moderation): a cell's replicates can raise its
variance far above the curve's, but two or three trials cannot make it much smaller."""


def huber_variance_factor(n: np.ndarray) -> np.ndarray:
    """Return ``n * Var(one-step Huber location of n standard normals)`` (1.05 beyond 10)."""
    n = np.asarray(n, dtype=np.int64)
    out = np.full(n.shape, 1.05)
    small = (n >= 1) & (n <= _HUBER_VARIANCE.size)
    out[small] = _HUBER_VARIANCE[n[small] - 1]
    return out


def median_variance_factor(n: np.ndarray) -> np.ndarray:
    r""":math:`\kappa(n)`: ``n * Var(median of n standard normals)`` (pi/2 beyond 40)."""
    n = np.asarray(n, dtype=np.int64)
    out = np.full(n.shape, np.pi / 2.0)
    small = (n >= 1) & (n <= _MEDIAN_VARIANCE.size)
    out[small] = _MEDIAN_VARIANCE[n[small] - 1]
    return out


class _Sorted(NamedTuple):
    """Trials sorted by curve, cell, session and value, with their block structure.

    A *block* is the trials of one session in one cell; blocks of a cell, and cells of a
    curve, are contiguous. ``row_*`` arrays have one entry per trial, ``block_*`` one per
    block, ``cell_*`` one per cell.
    """

    value: np.ndarray
    raw: np.ndarray
    row_curve: np.ndarray
    row_cell: np.ndarray
    block_start: np.ndarray
    block_size: np.ndarray
    block_session: pl.Series
    cell_block: np.ndarray
    cell_x: np.ndarray


def _sorted_blocks(
    frame: pl.DataFrame, curve: str, x: str, value: str, session: str, raw: str | None
) -> _Sorted:
    """Sort the trials once and find their blocks and cells.

    ``raw`` is the column the values are the log of, or ``None``.
    """
    columns = list(dict.fromkeys([curve, x, session, value, *([raw] if raw else [])]))
    data = frame.select(columns).sort([curve, x, session, value])
    ids = data.select(
        pl.struct(curve, x).rle_id().alias("_cell"),
        pl.struct(curve, x, session).rle_id().alias("_block"),
    )
    block = ids.get_column("_block").to_numpy()
    row_cell = ids.get_column("_cell").to_numpy().astype(np.int64)
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    sizes = np.diff(np.r_[starts, block.size])
    block_cell = row_cell[starts]
    cell_block = np.flatnonzero(np.r_[True, block_cell[1:] != block_cell[:-1]])
    return _Sorted(
        value=data.get_column(value).to_numpy().astype(float),
        raw=data.get_column(raw).to_numpy().astype(float)
        if raw
        else np.exp(data.get_column(value).to_numpy().astype(float)),
        row_curve=data.get_column(curve).to_numpy(),
        row_cell=row_cell,
        block_start=starts,
        block_size=sizes,
        block_session=data.get_column(session).gather(starts),
        cell_block=cell_block,
        cell_x=data.get_column(x).to_numpy()[starts[cell_block]],
    )


def _middle(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Medians of runs of sorted values (mean of the two middle ones for even runs)."""
    return 0.5 * (values[starts + (sizes - 1) // 2] + values[starts + sizes // 2])


def _run_medians(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Median of ``values`` per contiguous run of equal ``group`` (not sorted within)."""
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    sizes = np.diff(np.r_[starts, group.size])
    if starts.size and bool((sizes == sizes[0]).all()):  # runs of one length: sort rows
        return _middle(np.sort(values.reshape(starts.size, -1), axis=1).ravel(), starts, sizes)
    if starts.size * 50 < values.size:  # few long runs: a partition each beats one sort
        return np.asarray(
            [np.median(values[a : a + m]) for a, m in zip(starts, sizes, strict=True)]
        )
    order = np.lexsort((values, np.repeat(np.arange(starts.size), sizes)))
    return _middle(values[order], starts, sizes)


def _paired_medians(
    values: np.ndarray, also: np.ndarray, group: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return medians of ``values`` and of ``also`` per run of equal ``group``.

    ``also`` must be in the same order as ``values``; one sort serves both.
    """
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    sizes = np.diff(np.r_[starts, group.size])
    if starts.size and bool((sizes == sizes[0]).all()):
        # runs of one length: a stable sort of each row is the lexsort's order, and an
        # order of magnitude faster than one lexsort of every trial
        rows = np.argsort(values.reshape(starts.size, -1), axis=1, kind="stable")
        order = (rows + starts[:, None]).ravel()
    else:
        order = np.lexsort((values, np.repeat(np.arange(starts.size), sizes)))
    return _middle(values[order], starts, sizes), _middle(also[order], starts, sizes)


def _session_offsets(s: _Sorted, block_median: np.ndarray) -> np.ndarray:
    """Return each block's session offset.

    Sessions spanning at least 3 multi-session cells of their curve have one (others 0):
    the median over those cells of the session's median minus the cell's median of
    session medians.
    """
    counts = np.diff(np.r_[s.cell_block, s.block_start.size])
    blocks = pl.DataFrame(
        {
            "_cell": np.repeat(np.arange(counts.size), counts),
            "_curve": s.row_curve[s.block_start],
            "_session": s.block_session,
            "_m": block_median,
            "_S": np.repeat(counts, counts),
        }
    ).with_row_index("_b")
    offsets = (
        blocks.filter(pl.col("_S") > 1)
        .with_columns((pl.col("_m") - pl.col("_m").median().over("_cell")).alias("_dev"))
        .group_by(["_curve", "_session"])
        .agg(pl.col("_dev").median().alias("_alpha"), pl.len().alias("_span"))
        .filter(pl.col("_span") >= 3)
    )
    joined = blocks.join(offsets, on=["_curve", "_session"], how="left", nulls_equal=True)
    return joined.sort("_b").get_column("_alpha").fill_null(0.0).to_numpy()


def _curve_scale(s: _Sorted, block_median: np.ndarray) -> np.ndarray:
    """Return, per trial, its curve's within-session scale ``sigma_w``.

    The median of the trials' absolute deviations from their block's median, each over
    :data:`_BLOCK_MAD` for its block size; the median trial of an odd block, whose
    deviation is 0 by construction, left out. A hiccup moves one deviation, not the
    scale. NaN for a curve without a block of two trials.
    """
    # per block, then spread over its trials: the middle trial of an odd block (the one
    # trial of a block of one) is left out, and the MAD factor looked up once a block
    odd = s.block_size % 2 == 1
    keep = np.ones(s.value.size, dtype=bool)
    keep[s.block_start[odd] + s.block_size[odd] // 2] = False
    mad = np.repeat(_block_mad(np.maximum(s.block_size, 2)), s.block_size)
    deviation = np.abs(s.value - np.repeat(block_median, s.block_size))[keep]
    scaled = deviation / mad[keep]
    curve = s.row_curve[keep]
    # the trials are sorted by curve: its runs are its distinct values, in order, with
    # no sort or search over every trial
    first = np.flatnonzero(np.r_[True, s.row_curve[1:] != s.row_curve[:-1]])
    curves = s.row_curve[first]
    sigma = np.full(curves.size, np.nan)
    if curve.size:
        found = curve[np.r_[True, curve[1:] != curve[:-1]]]
        sigma[np.searchsorted(curves, found)] = _run_medians(scaled, curve)
    return np.repeat(sigma, np.diff(np.r_[first, s.row_curve.size]))


def _huber_cells(
    s: _Sorted, adjusted: np.ndarray, sigma: np.ndarray, median: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    r"""Return per cell the one-step Huber location of the adjusted trials, and the size.

    :math:`T = m + \sigma \sum_i \psi(r_i) / \#\{|r_i| < k\}` with
    :math:`r_i = (y_i - m)/\sigma`, :math:`\psi` the Huber function clipped at
    :data:`HUBER_K` and :math:`\sigma` the curve's within-session scale: about 95 % as
    efficient as the mean for normal trials (the median is 64 %), and a hiccup moves it
    by at most :math:`k\sigma/n`. Without a scale, the median (``median``, when the
    caller has it).
    """
    cell_start = s.block_start[s.cell_block]
    cell_size = np.diff(np.r_[cell_start, s.value.size])
    if median is not None:
        pass
    elif cell_start.size == s.block_start.size:  # one session a cell: trials sorted in cells
        median = _middle(adjusted, cell_start, cell_size)
    else:
        median = np.asarray(_run_medians(adjusted, s.row_cell))
    with np.errstate(invalid="ignore", divide="ignore"):  # sigma 0 or NaN: step unused
        r = (adjusted - np.repeat(median, cell_size)) / sigma
        psi = np.add.reduceat(np.nan_to_num(np.clip(r, -HUBER_K, HUBER_K)), cell_start)
        inside = np.add.reduceat((np.abs(r) < HUBER_K).astype(float), cell_start)
    cell_sigma = sigma[cell_start]
    usable = np.isfinite(cell_sigma) & (cell_sigma > 0)
    step = np.where(usable, cell_sigma * psi / np.maximum(inside, 1.0), 0.0)
    return median + step, cell_size


def _spread(values: np.ndarray, counts: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Variance (ddof 1) of each contiguous run of ``values``; 0 for runs of one."""
    means = np.add.reduceat(values, firsts) / counts
    squares = np.add.reduceat((values - np.repeat(means, counts)) ** 2, firsts)
    return np.where(counts > 1, squares / np.maximum(counts - 1, 1), 0.0)


def _reduce(
    frame: pl.DataFrame, curve: str, x: str, value: str, session: str, raw: str | None
) -> pl.DataFrame:
    """Reduce the trials to one row per cell, sorted by ``(curve, x)``.

    ``n``, ``n_sessions``, ``level`` (Huber), the curve's ``sigma_w``, ``_ss`` (within
    sessions), ``_between`` (variance of the adjusted session medians), ``_pooled_df``,
    ``log_median``, and for the median's interval ``_rb`` (variance of the raw session
    medians: a cell's median is an estimate for a fresh process, so the session lottery
    is part of its error), ``_rb_own_df``, and per curve ``_rb_pool`` (df-weighted mean
    of ``_rb``) with ``_rb_df`` (the cells' ``S - 1`` summed, but never more than the
    curve's distinct sessions less one, ``_distinct``: shared sessions are the same few
    processes in every cell). One sort of the trials; the rest is arithmetic on runs.
    """
    s = _sorted_blocks(frame, curve, x, value, session, raw)
    raw_median = _middle(s.value, s.block_start, s.block_size)
    counts = np.diff(np.r_[s.cell_block, s.block_start.size])
    several = bool((counts > 1).any())
    alpha = _session_offsets(s, raw_median) if several else np.zeros(raw_median.size)
    adjusted = s.value - np.repeat(alpha, s.block_size)
    sigma = _curve_scale(s, raw_median)
    if several:
        log_median, median = _paired_medians(s.value, s.raw, s.row_cell)
    else:
        log_median = raw_median[s.cell_block]
        median = _middle(s.raw, s.block_start, s.block_size)
    # without session offsets the adjusted trials are the raw ones: the same median
    level, n = _huber_cells(s, adjusted, sigma, None if alpha.any() else log_median)
    block_mean = np.add.reduceat(s.value, s.block_start) / s.block_size
    deviation = s.value - np.repeat(block_mean, s.block_size)
    within_ss = np.add.reduceat(np.add.reduceat(deviation**2, s.block_start), s.cell_block)
    cell_row = s.block_start[s.cell_block]
    cells = pl.DataFrame(
        {
            curve: s.row_curve[cell_row],
            x: s.cell_x,
            "n": n.astype(np.int64),
            "n_sessions": counts.astype(np.int64),
            "level": level,
            "sigma_w": sigma[cell_row],
            "_ss": within_ss,
            "_between": _spread(raw_median - alpha, counts, s.cell_block),
            "_rb": _spread(raw_median, counts, s.cell_block),
            "_rb_own_df": (counts - 1).astype(float),
            "log_median": log_median,
            "median": median,
        }
    )
    distinct = (
        pl.DataFrame({curve: s.row_curve[s.block_start], "_s": s.block_session})
        .group_by(curve)
        .agg((pl.col("_s").n_unique() - 1).cast(pl.Float64).alias("_distinct"))
    )
    pooled = cells.group_by(curve).agg(
        (0.5 * (pl.col("n") - pl.col("n_sessions")).sum()).clip(1.0, None).alias("_pooled_df"),
        ((pl.col("_rb") * pl.col("_rb_own_df")).sum() / pl.col("_rb_own_df").sum().clip(1.0)).alias(
            "_rb_pool"
        ),
        pl.col("_rb_own_df").sum().alias("_rb_sum_df"),
    )
    return (
        cells.join(pooled, on=curve, how="left")
        .join(distinct, on=curve, how="left")
        .with_columns(
            pl.min_horizontal("_rb_sum_df", "_distinct").alias("_rb_df"),
            pl.col(curve).is_first_distinct().alias("_first"),
        )
        .drop("_rb_sum_df")
    )


def _median_variance(
    cells: pl.DataFrame, within: np.ndarray, within_df: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return the sampling variance and df of each cell's log median.

    As an estimate for a fresh process: the median's share of the within-session noise,
    or with several sessions the moderated variance of the raw session medians over
    their number, the larger. The prior of the moderation pools every curve of the
    call: each curve's df-weighted mean with its df (its distinct sessions less one at
    most), summed over curves, so that two sessions shared by a curve's cells, which
    alone give one degree of freedom, borrow strength from the other curves.
    """
    n = cells.get_column("n").to_numpy()
    n_sessions = cells.get_column("n_sessions").to_numpy()
    own = cells.get_column("_rb").to_numpy()
    own_df = cells.get_column("_rb_own_df").to_numpy()
    first = np.flatnonzero(cells.get_column("_first").to_numpy())
    curve_df = cells.get_column("_rb_df").to_numpy()[first]
    prior_df = float(curve_df.sum())
    prior = float(curve_df @ cells.get_column("_rb_pool").to_numpy()[first]) / max(prior_df, 1.0)
    moderated = (prior_df * prior + own_df * own) / np.maximum(prior_df + own_df, 1.0)
    from_within = median_variance_factor(n) * within / n
    from_sessions = np.where(n_sessions > 1, moderated / n_sessions, 0.0)
    pick = from_sessions > from_within
    var = np.maximum(np.where(pick, from_sessions, from_within), VARIANCE_FLOOR)
    # sessions shared by every cell are the same few processes: their spread has no more
    # degrees of freedom than there are processes, however many cells repeat it
    distinct = float(cells.get_column("_distinct").to_numpy()[first].sum())
    between_df = np.minimum(prior_df + own_df, distinct)
    return var, np.maximum(np.where(pick, between_df, within_df), 1.0)


def _pooled_between(
    curve_ids: np.ndarray, between_own: np.ndarray, between_df: np.ndarray, multi: np.ndarray
) -> np.ndarray:
    """Pool each curve's between-session variance.

    Per cell, its curve's pooled value: the median over the
    curve's multi-session cells, each scaled by the median of its chi-square law so the
    median is unbiased (0 for a curve without such cells).
    """
    if not multi.any():
        return np.zeros(curve_ids.size)
    scaled = np.where(
        multi, between_own * between_df / stats.chi2.median(np.maximum(between_df, 1)), np.nan
    )
    return (
        pl.DataFrame({"c": curve_ids, "b": scaled})
        .with_columns(pl.col("b").fill_nan(None).median().over("c").fill_null(0.0).alias("p"))
        .get_column("p")
        .to_numpy()
    )


def _trigamma_inverse(x: float) -> float:
    """Solve ``trigamma(y) = x`` for ``y > 0`` (Newton's method, as limma does)."""
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        step = tri * (1.0 - tri / x) / float(special.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def _prior_dfs(curve_ids: np.ndarray, variance: np.ndarray, dof: np.ndarray) -> np.ndarray:
    r"""Per cell, its curve's prior degrees of freedom for moderating ``variance``.

    Estimated from the spread of the cells' log variances the way limma does (Smyth
    2004): the variance of :math:`\log s^2 - \psi(d/2) + \log(d/2)` beyond its
    sampling part :math:`\psi'(d/2)` is :math:`\psi'(d_0/2)`. Variances that
    disagree more than their df explain, as when a slow kernel strikes a few
    (session, cell) pairs, give a small :math:`d_0`, and each cell keeps more of its own
    variance; agreeing ones give a large :math:`d_0`, at most :data:`MAX_PRIOR_DF`.
    Cells with ``dof < 1`` are left out; a curve with fewer than three gets
    :data:`PRIOR_DF`.
    """
    out = np.full(curve_ids.size, PRIOR_DF)
    starts = np.flatnonzero(np.r_[True, curve_ids[1:] != curve_ids[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], curve_ids.size], strict=True):
        use = np.flatnonzero(dof[a:b] >= 1) + a
        if use.size < 3:
            continue
        half = dof[use] / 2.0
        e = np.log(np.maximum(variance[use], VARIANCE_FLOOR)) - special.digamma(half) + np.log(half)
        excess = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, half)))
        prior = MAX_PRIOR_DF if excess <= 0 else min(2.0 * _trigamma_inverse(excess), MAX_PRIOR_DF)
        out[a:b] = prior
    return out


def cell_levels(
    frame: pl.DataFrame,
    curve: str,
    x: str,
    value: str,
    session: str,
    raw: str | None = None,
) -> pl.DataFrame:
    """Per cell (``curve``, ``x``): level, its sampling variance and df.

    ``curve`` is an integer id of the curve, ``value`` holds log-scale trials and
    ``session`` the process each ran in. Returns ``curve``, ``x``, ``n``, ``n_sessions``,
    ``level``, ``var``, ``df``, the curve's ``sigma_w``, and for the cell's median
    ``log_median`` with ``median_var`` and ``median_df`` (see :func:`_median_variance`)
    and ``median``, the median of ``raw`` (the column ``value`` is the log of; by default
    the exponential of ``value``),
    sorted by ``(curve, x)``. See the module docstring for the maths.
    """
    cells = _reduce(frame, curve, x, value, session, raw)
    n = cells.get_column("n").to_numpy()
    n_sessions = cells.get_column("n_sessions").to_numpy()
    kappa = huber_variance_factor(n)
    own_df = (n - n_sessions).astype(float)
    pooled_df = cells.get_column("_pooled_df").to_numpy()
    sigma_w2 = cells.get_column("sigma_w").fill_nan(None).fill_null(0.0).to_numpy() ** 2
    own_w2 = cells.get_column("_ss").to_numpy() / np.maximum(own_df, 1.0)
    within = (PRIOR_DF * sigma_w2 + own_df * own_w2) / (PRIOR_DF + own_df)
    within_df = np.minimum(pooled_df, PRIOR_DF + own_df)
    between_own = cells.get_column("_between").to_numpy()
    between_df = (n_sessions - 1).astype(float)
    multi = n_sessions > 1
    between_pool = _pooled_between(
        cells.get_column(curve).to_numpy(), between_own, between_df, multi
    )
    prior = _prior_dfs(cells.get_column(curve).to_numpy(), between_own, between_df)
    between = (prior * between_pool + between_df * between_own) / (prior + between_df)
    estimates = np.stack([kappa * within / n, np.where(multi, between / n_sessions, 0.0)])
    dfs = np.stack([within_df, prior + between_df])
    pick = np.argmax(estimates, axis=0)
    cols = np.arange(n.size)
    median_var, median_df = _median_variance(cells, within, within_df)
    columns = [curve, x, "n", "n_sessions", "level", "sigma_w", "log_median", "median"]
    return cells.select(columns).with_columns(
        pl.Series("var", np.maximum(estimates[pick, cols], VARIANCE_FLOOR)),
        pl.Series("df", np.maximum(dfs[pick, cols], 1.0)),
        pl.Series("median_var", median_var),
        pl.Series("median_df", median_df),
    )
