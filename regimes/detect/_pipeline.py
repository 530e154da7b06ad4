"""``detect_regimes``: where latency leaves its smooth trend, with calibrated significance.

The stages, each in a module of its own (the method: ``docs/method.md``):

1. trial-level terms (first trials, drift, session effects) removed and the cells
   summarised (:mod:`regimes.detect._trials`);
2. per grid, the regime model fitted, tested after selection by a bootstrap of the
   whole fit, and resampled for the spread of every regime (:mod:`regimes.detect._model`);
3. Benjamini-Hochberg over each curve's regimes (or the call's), and separately over
   the change points;
4. the tables (:mod:`regimes.detect._tables`).
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from regimes._stats.curves import index_curves
from regimes._stats.multitest import benjamini_hochberg
from regimes.data._prepare import prepare_trials
from regimes.detect._model import MAX_CELLS, MIN_CELLS, CurveInput, CurveModel, fit_grid
from regimes.detect._result import RegimeResult
from regimes.detect._tables import Decision, assemble
from regimes.detect._trials import adjust_trials, cell_arrays, residual_pools, with_cell_ids
from regimes.errors import RegimesInputError, RegimesWarning
from regimes.options import DIRECTIONS, FDR_FAMILIES, check_options

__all__ = ["DIRECTIONS", "FDR_FAMILIES", "MAX_CELLS", "MIN_CELLS", "detect_regimes"]


def _check_arguments(**params: Any) -> dict[str, Any]:
    """Validate the arguments, one place for all (:mod:`regimes.options`); return them."""
    return check_options(**params)


def _check_lengths(cells: pl.DataFrame, x: str) -> None:
    """Raise when no curve has :data:`MIN_CELLS` cells; warn when some have fewer."""
    lengths = cells.group_by("_curve").len().get_column("len").to_numpy()
    if (lengths < MIN_CELLS).all():
        raise RegimesInputError(
            f"every group has fewer than {MIN_CELLS} distinct {x} values (most: "
            f"{int(lengths.max())}); a trend and an interval need at least {MIN_CELLS}"
        )
    if (lengths < MIN_CELLS).any():
        warnings.warn(
            f"{int((lengths < MIN_CELLS).sum())} group(s) have fewer than {MIN_CELLS} distinct "
            f"{x} values and are summarised without a trend (see result.untested)",
            RegimesWarning,
            stacklevel=3,
        )


def _canonical_order(frame: pl.DataFrame, y: str) -> pl.DataFrame:
    """Return the columns the model reads, sorted and centred (row order, scale move no sum).

    Sorting the pools is not enough: a block mean of the same trials in another order
    differs in its last bits, and the answer must not. The user's other columns stay
    behind: every sort, filter and join of a 1M-row call would copy them (their strings
    above all), and the result's trial table is built from the prepared frame. The
    frame gains the ids of its cells and blocks (:func:`with_cell_ids`).
    """
    keys = ["_curve", "_x", "_session", *(c for c in ("order", "trial") if c in frame.columns)]
    frame = frame.select(*keys, "_ly", pl.col(y).alias("_y"))
    # centred per curve: a curve scaled by a constant then gives the same numbers, bit for
    # bit, wherever the bootstrap's discrete choices could tell two roundings apart
    centre = pl.col("_ly").median().over("_curve")
    frame = frame.sort([*keys, "_ly"], nulls_last=True).with_columns(pl.col("_ly") - centre)
    return with_cell_ids(frame)


def _warn_first_trials(first: pl.DataFrame) -> None:
    dropped = first.filter("dropped")
    if dropped.height:
        ratio = float(dropped.get_column("ratio").median())  # type: ignore[arg-type]
        warnings.warn(
            f"the first trial of every process ran {ratio:.2f}x the others (median) in "
            f"{dropped.height} group(s); {int(dropped.get_column('n_dropped').sum())} first "
            "trials were left out of the levels (result.first_trials says which; mark "
            "warm-ups in a `warmup` column to silence this)",
            RegimesWarning,
            stacklevel=3,
        )


def _curve_inputs(
    cells: pl.DataFrame, trials: pl.DataFrame, groups: pl.DataFrame, seed: int
) -> dict[tuple[float, ...], list[CurveInput]]:
    """Each testable curve's inputs, keyed by its grid."""
    pools = residual_pools(trials)
    keys = {int(r[0]): repr(r[1:]) for r in groups.iter_rows()}
    grids: dict[tuple[float, ...], list[CurveInput]] = {}
    for part in cells.partition_by("_curve", maintain_order=True):
        if not MIN_CELLS <= part.height <= MAX_CELLS:
            continue
        curve = int(part.get_column("_curve")[0])
        x = part.get_column("_x").to_numpy()
        log_budget = bool((x > 0).all())
        u = np.log(x) if log_budget else x
        entropy = (seed, zlib.crc32(keys[curve].encode()))
        grids.setdefault((log_budget, *u.tolist()), []).append(
            CurveInput(
                curve,
                u,
                log_budget,
                part.get_column("level").to_numpy(),
                part.get_column("n").to_numpy().astype(np.int64),
                pools[curve],
                entropy,
            )
        )
    return grids


def _decide(models: list[CurveModel], alpha: float, fdr: str) -> Decision:
    """Benjamini-Hochberg over the tested regimes (per curve or call), and change points."""
    keys = [(m.curve, k) for m in models for k, r in enumerate(m.regimes) if r.tested]
    p = np.array([r.p_value for m in models for r in m.regimes if r.tested])
    q = np.ones(p.size)
    if fdr == "call":
        q = benjamini_hochberg(p) if p.size else q
    else:
        curves = np.array([c for c, _ in keys])
        for c in np.unique(curves):
            q[curves == c] = benjamini_hochberg(p[curves == c])
    change = [(m.curve, k) for m in models for k in range(len(m.regimes))]
    by_curve = {m.curve: m for m in models}
    pc = np.array([by_curve[c].regimes[k].p_change for c, k in change])
    qc = benjamini_hochberg(pc) if pc.size else pc
    return Decision(
        regime_q={key: float(v) for key, v in zip(keys, q, strict=True)},
        change_q={key: float(v) for key, v in zip(change, qc, strict=True)},
        alpha=alpha,
    )


def detect_regimes(
    df: Any,
    x: str = "budget",
    y: str = "latency_s",
    by: str | Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    direction: str = "up",
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    penalty: float = 2.0,
    session: str | None = None,
    fdr: str = "curve",
    ratio_interval: str = "bootstrap",
) -> RegimeResult:
    """Find change points and anomalous intervals of ``y`` along ``x`` for each group.

    Each group of case columns is one curve. Its trials lose their first-trial effect,
    drift and session effects; each cell (one ``x``) is summarised by the median of
    the rest. The cell levels are fitted by one model, a smooth trend plus sparse
    piecewise-constant regimes, selected by penalised forward selection and tested
    after selection by a bootstrap of the whole fit (the cells' own trials resampled
    under the fitted null); a second bootstrap under the fitted model gives the
    spread of every regime's onset, end and ratio. The method is described in
    ``docs/method.md``.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table, one row per measured generation; warm-up rows are dropped.
    x : str, default "budget"
        Position along the curve: ``budget``, ``total_tokens`` (derived as
        ``prompt_tokens + budget`` when absent) or any numeric column.
    y : str, default "latency_s"
        The measured quantity: ``latency_s``, ``decode_s``, ``prefill_s`` or any
        positive column; analysed on the log scale.
    by : str or sequence of str, optional
        Group columns; by default every case column present
        (:data:`regimes.CASE_COLUMNS`) except ``x``.
    alpha : float, default 0.05
        False discovery rate for anomalies and, separately, for change points
        (Benjamini-Hochberg; see ``fdr``).
    min_ratio : float, default 1.25
        The effect an anomaly must exceed: each regime is tested for a level over its
        trend above ``min_ratio`` (below its inverse for ``direction="down"``), a
        TREAT test, so a reported ratio is beyond it with significance, not only in
        its point estimate.
    direction : {"up", "down", "both"}, default "up"
        Slowdowns (the default for latency), speed-ups, or either.
    n_boot : int, default 200
        Bootstrap draws per curve where selection found something, under its fitted
        null (the p-values) and under its fitted model (the bounds on onset and end,
        and the ratio's bootstrap interval).
    seed : int, default 0
        Seed of the draws; each curve draws from its own stream (the seed and its
        group's values), so its answer does not depend on the other curves.
    level : float, default 0.95
        Confidence level of every interval: each cell's median, each ratio, each
        change and the bounds on each regime's onset and end.
    penalty : float, default 2.0
        Factor ``c`` of the selection penalty ``c * log(T)`` per change point, in
        units of the estimated noise variance.
    session : str, optional
        Column naming the process of each trial; by default ``run_id``, ``session``
        and ``process_id`` together, those present.
    fdr : {"curve", "call"}, default "curve"
        The Benjamini-Hochberg family of the anomaly tests: each curve's own regimes
        (a curve's answer then does not depend on the other curves), or every tested
        regime of the call.
    ratio_interval : {"bootstrap", "t"}, default "bootstrap"
        The interval of each anomaly's ratio: the basic bootstrap interval over the
        draws under the fitted model, with the selection re-done in each (it holds the
        selection's bias and spread), or the ``t`` interval of the selected regime held
        fixed (the dual of its TREAT test: its lower bound clears ``min_ratio`` when the
        test does). Where fewer draws than the level needs find the regime, the
        ``t`` interval stands in; ``anomalies.ratio_interval`` says which each holds.
        Either spans the regime's ``t`` intervals under the readings of the level beside
        it that the data tell from the model's by little (a step right after it; an
        adjacent regime outside ``direction`` as its baseline) and, for a regime from
        the first budget, a flat continuation of the trend (its ``caveat`` says so);
        docs/method.md, section 5.

    Returns
    -------
    RegimeResult
        ``curve``, ``change_points``, ``anomalies`` (with bounds on onset and end),
        ``sensitivity``, ``first_trials``, ``groups``, ``untested`` (groups with fewer
        than 4 distinct ``x``, with the reason), ``trials`` and ``params``;
        ``summary()`` prints them.

    Raises
    ------
    RegimesInputError
        When an argument is out of range, the table is empty, lacks a column, holds
        non-finite or non-positive ``y``, every cell holds a single trial, or no group
        has 4 distinct ``x``.

    Warns
    -----
    RegimesWarning
        When exact duplicate rows or single-trial cells are dropped, first trials are
        left out, or some groups are too short to test.

    See Also
    --------
    cache_speedup : the KV cache's speedup per ``x`` and where it collapses.
    regimes.attribute_phases : split an anomaly's excess into prefill and decode.
    regimes.compare_backends : is an anomaly specific to its backend?

    References
    ----------
    .. [1] Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery
       rate: a practical and powerful approach to multiple testing. *J. R. Stat. Soc.
       B* 57, 289-300.
    .. [2] Eilers, P. H. C. (2003). A perfect smoother. *Anal. Chem.* 75, 3631-3636.
    .. [3] McCarthy, D. J. and Smyth, G. K. (2009). Testing significance relative to a
       fold-change threshold is a TREAT. *Bioinformatics* 25, 765-771.
    .. [4] Davison, A. C. and Hinkley, D. V. (1997). *Bootstrap Methods and their
       Application*, chapters 4 and 6 (the model-based bootstrap).
    .. [5] Jewell, S., Fearnhead, P. and Witten, D. (2022). Testing for a change in
       mean after changepoint detection. *J. R. Stat. Soc. B* 84, 1082-1104.

    Examples
    --------
    Synthetic trials around the published gpt2-medium MPS means (5 per budget):

    >>> import regimes
    >>> trials = regimes.simulate.published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    >>> result = regimes.detect_regimes(trials)
    >>> result.anomalies.select("start", "end", "kind", "recovered").rows()
    [(512, 624, 'spike', True)]
    >>> result.status
    'tested'
    """
    params = _check_arguments(
        x=x,
        y=y,
        by=by,
        alpha=alpha,
        min_ratio=min_ratio,
        direction=direction,
        n_boot=n_boot,
        seed=seed,
        level=level,
        penalty=penalty,
        session=session,
        fdr=fdr,
        ratio_interval=ratio_interval,
    )
    frame, group_columns = prepare_trials(df, x, y, by, session)
    index = index_curves(frame, group_columns, x)
    adjusted = adjust_trials(_canonical_order(index.frame, y))
    _warn_first_trials(adjusted.first_trials)
    cells = cell_arrays(adjusted.frame)
    _check_lengths(cells, x)
    grids = _curve_inputs(cells, adjusted.frame, index.groups, seed)
    models = [
        model
        for curves in grids.values()
        for model in fit_grid(curves, direction, min_ratio, alpha, level, n_boot, penalty, seed)
    ]
    models.sort(key=lambda m: m.curve)
    decision = _decide(models, alpha, fdr)
    result = assemble(cells, index, adjusted, models, decision, frame, params)
    return replace(result, source=df)
