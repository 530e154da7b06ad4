r"""``cache_speedup``: the KV cache's speedup per budget, and where it collapses.

For a group (the case columns without ``use_cache``) and an ``x`` measured both ways,

.. math::  S(x) = \frac{\operatorname{median}(y \mid \text{cache off}, x)}
                        {\operatorname{median}(y \mid \text{cache on}, x)}.

**Interval of S.** The two cells are independent measurements, so on the log scale the
variance of :math:`\log S` is the sum of the two cells' median variances
(:func:`regimes._stats.levels.cell_levels`: moderated within-session noise and, with
several sessions, the spread of their medians), and the interval is a t interval with
Welch-Satterthwaite degrees of freedom (see :func:`regimes._speedup.cells.speedup_table`).

**Collapses.** On the log scale the speedup's level is the difference of the two
cells' levels, :math:`L = \ell_{\text{off}} - \ell_{\text{on}}`, with variance
:math:`v_{\text{off}} + v_{\text{on}}` and Welch-Satterthwaite degrees of freedom
(levels and variances from :func:`regimes._stats.levels.cell_levels`, with session effects
removed and disagreeing sessions inflating a cell's variance). The speedup curve then
goes through the interval tests of :func:`regimes.detect_regimes` with
``direction="down"``: each interval against its flank trend with a scan-adjusted
one-sided p-value, ``min_ratio`` (a collapse keeps at most ``1 / min_ratio`` of the
trend), a greedy choice of non-overlapping intervals and Benjamini-Hochberg across the
call. Every interval with enough flank support is a candidate
(:func:`regimes._stats.fixed_intervals.flank_support`: two cells a side for an interior interval,
three for one that touches an end of the grid and is no longer than its flank), its
trend carries its own uncertainty into the ratio's interval, and the between-cell
variance comes from the cells around the interval's own trend, with its uncertainty
carried even where it is estimated as 0 (:func:`regimes._stats.between_cell.interval_tau`), so
that short grids stay calibrated (see :func:`regimes._speedup.collapses.find_collapses`).
A trend is never drawn from a single cell, nor extrapolated beyond the cells that support
it.

**Trend coordinate.** With the cache on a step costs about the same at every position;
with it off a step reprocesses the whole sequence. Where the fixed and the
per-position costs balance decides the log-speedup's shape: over short budgets it is
close to linear in ``log x`` (the CPU distilgpt2 run), while the published gpt2-medium
table over 128..768 fits a line in ``x`` far better (residual variance 0.003 around it,
0.025 around a line in ``log x``). Neither shape is known in advance, so each interior
interval is tested in the coordinate, ``log x`` or ``x``, whose trend fits the cells
around it best (the smaller between-cell variance;
:func:`regimes._stats.fixed_intervals.scan_intervals`); ``bench/speedup_calibration.py`` measures
what
the choice gains on the published table and what it costs on smooth curves).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from regimes._deprecation import deprecate_parameters
from regimes._labels import text_label
from regimes._result import INTERVAL_LEAD_COLUMNS, AnalysisResult, native_library, untested_frame
from regimes._speedup.cells import paired_cells, speedup_levels, speedup_table
from regimes._speedup.collapses import find_collapses, scan_curves
from regimes._summary import Summary
from regimes.data._prepare import prepare_trials
from regimes.data.schema import check_fraction, check_min_ratio
from regimes.errors import RegimesInputError

__all__ = ["SpeedupResult", "cache_speedup"]


_SPEEDUP_COLUMNS = (
    "speedup",
    "ci_low",
    "ci_high",
    "trend",
    "ratio",
    "off_median",
    "on_median",
    "off_n",
    "on_n",
)


@dataclass(frozen=True, repr=False)
class SpeedupResult(AnalysisResult):
    """Result of :func:`cache_speedup`.

    Attributes
    ----------
    speedup : polars.DataFrame
        Per group and ``x`` measured both ways: ``speedup`` (cache-off median over
        cache-on median) with its t interval ``ci_low``, ``ci_high``; ``trend`` (the
        smooth speedup trend: the flank trend inside collapses) and ``ratio``
        (``speedup / trend``); ``off_median``, ``on_median``, ``off_n``, ``on_n``.
    collapses : polars.DataFrame
        Significant dips of the speedup below its trend: group columns, ``start``,
        ``end`` (inclusive ``x``), ``peak_x``, ``ratio`` (speedup level over trend,
        < 1) with ``ratio_low``, ``ratio_high``, one-sided ``p_value``
        (scan-adjusted), ``q_value`` (BH over the call), ``recovered``, ``kind``,
        ``n_points`` and ``caveat`` (null here: the column is shared with
        :func:`regimes.detect_regimes`).
    untested : polars.DataFrame
        The groups whose speedup could not be tested for collapses, with the ``reason``.
    trials : polars.DataFrame
        The analysed trial rows: group columns, ``use_cache``, ``x``, ``y`` and
        ``session`` (the process key the analysis used).
    x, y : str
        The position and measured columns.
    group_columns : list of str
        The columns that form a group (``use_cache`` is not one: it is compared).
    params : dict
        The call's arguments.
    """

    _tables: ClassVar[tuple[str, ...]] = ("collapses", "speedup")
    _title: ClassVar[str] = "KV-cache speedup"
    _lead_columns: ClassVar[tuple[str, ...] | None] = INTERVAL_LEAD_COLUMNS

    def _headlines(self) -> list[str]:
        """Return one sentence per collapse, as the report words it."""
        from regimes._findings import collapse_findings

        return collapse_findings(self, self.x)

    def _empty_text(self) -> str:
        """Return why the notebook view's collapse table is empty."""
        return (
            "No collapse of the speedup at q < alpha." if self.status == "tested" else self.status
        )

    speedup: pl.DataFrame
    collapses: pl.DataFrame
    untested: pl.DataFrame
    trials: pl.DataFrame
    x: str
    y: str
    group_columns: list[str]
    params: dict[str, Any]

    def _summary(self) -> Summary:
        """Return the speedup range per group, then one line per collapse."""
        head = (
            f"KV-cache speedup of {self.y} over {self.x} (cache off / cache on), "
            f"{self.speedup.height} {self.x} value(s) in {self._n_groups()} group(s); "
            f"alpha={self.params.get('alpha')}, min_ratio={self.params.get('min_ratio')}"
        )
        ranges = (
            self.speedup.group_by(self.group_columns or pl.lit(0), maintain_order=True).agg(
                pl.col("speedup").min().alias("low"),
                pl.col("speedup").max().alias("high"),
            )
            if self.speedup.height
            else pl.DataFrame()
        )
        out = Summary().add_heading(head, above="", below=None)
        out.add_rows(ranges.iter_rows(named=True), self._range)
        out.add_listing(
            "Collapses (speedup below its trend):",
            self.collapses,
            self._line,
            empty=self._no_collapse_text(),
        )
        if self.untested.height < self._n_groups():
            out.add_untested(
                self.untested, head=None, columns=self.group_columns, indent="  not testable here: "
            )
        return out

    def _range(self, row: dict[str, Any]) -> str:
        return (
            f"{text_label(row, self.group_columns)}: speedup {row['low']:.3g} to {row['high']:.3g}"
        )

    def _no_collapse_text(self) -> str:
        """Why the collapse table is empty: nothing found, or nothing testable."""
        if self.untested.height and self.untested.height == self._n_groups():
            reasons = "; ".join(sorted(set(self.untested.get_column("reason").to_list())))
            return f"not testable here: {reasons}"
        return "none at q < alpha with ratio <= 1/min_ratio"

    def _n_groups(self) -> int:
        if not self.group_columns:
            return 1 if self.speedup.height else 0
        return self.speedup.select(self.group_columns).unique().height

    def _line(self, row: dict[str, Any]) -> str:
        at = self.speedup.filter(
            pl.all_horizontal(
                [pl.col(c).eq_missing(row[c]) for c in self.group_columns] or [pl.lit(True)]
            )
            & (pl.col(self.x) == row["peak_x"])
        ).row(0, named=True)
        return (
            f"{text_label(row, self.group_columns)}: {self.x} {row['start']}..{row['end']} "
            f"keeps x{row['ratio']:.3g} [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}] "
            f"of the trend (q={row['q_value']:.2g}); at {row['peak_x']} speedup "
            f"{at['speedup']:.3g} [{at['ci_low']:.3g}, {at['ci_high']:.3g}] against trend "
            f"{at['trend']:.3g}"
        )

    def __str__(self) -> str:
        return self.summary()


@deprecate_parameters(
    "n_boot", "seed", reason="the speedup's intervals are t intervals and draw nothing"
)
def cache_speedup(
    df: Any,
    x: str = "budget",
    y: str = "latency_s",
    by: str | Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    level: float = 0.95,
    session: str | None = None,
) -> SpeedupResult:
    """KV-cache speedup per group and ``x`` with its CI, and where it collapses.

    The speedup at ``x`` is the cache-off median of ``y`` over the cache-on median. Its
    interval combines the two cells' variances (each with its session lottery) in a t
    interval on the log scale. A collapse is an
    interval of ``x`` where the log-speedup falls significantly below its own smooth
    trend (see the module docstring and ``docs/method.md``).

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table, with a ``use_cache`` column holding both states.
    x : str, default "budget"
        Position along the curve (see :func:`regimes.detect_regimes`).
    y : str, default "latency_s"
        The measured quantity, analysed on the log scale.
    by : str or sequence of str, optional
        Group columns, without ``use_cache``; by default every case column present
        except ``use_cache`` and ``x``.
    alpha : float, default 0.05
        False discovery rate of the collapses (Benjamini-Hochberg across the call).
    min_ratio : float, default 1.25
        A collapse keeps at most ``1 / min_ratio`` of the trend's speedup.
    level : float, default 0.95
        Confidence level of every interval.
    session : str, optional
        Column naming the process of each trial (see :func:`regimes.detect_regimes`).

    Returns
    -------
    SpeedupResult
        ``speedup`` per group and ``x``, ``collapses``, ``untested`` (groups whose
        grid is too short for a trend, with the reason), ``trials`` and ``params``.

    Raises
    ------
    RegimesInputError
        When an argument is out of range, there is no ``use_cache`` column, no
        cache-off or no cache-on rows, ``by`` contains ``use_cache``, or no ``x`` is
        measured both ways in any group.

    Warns
    -----
    RegimesWarning
        When cells measured one way only, exact duplicates or single-trial cells are
        left out.
    DeprecationWarning
        When ``n_boot`` or ``seed`` is passed: the speedup draws nothing, and they are
        removed in 0.2.

    See Also
    --------
    detect_regimes : anomalies of the latency curves themselves.

    References
    ----------
    .. [1] Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery
       rate. *J. R. Stat. Soc. B* 57, 289-300.
    .. [2] Smyth, G. K. (2004). Linear models and empirical Bayes methods for assessing
       differential expression in microarray experiments. *Stat. Appl. Genet. Mol.
       Biol.* 3, article 3 (moderated variances).
    .. [3] Satterthwaite, F. E. (1946). *Biometrics Bulletin* 2, 110-114; Welch, B. L.
       (1947). *Biometrika* 34, 28-35 (the degrees of freedom of a sum of variances).
    .. [4] Davison, A. C. and Hinkley, D. V. (1997). *Bootstrap Methods and their
       Application*, section 3.8; Field, C. A. and Welsh, A. H. (2007). Bootstrapping
       clustered data. *J. R. Stat. Soc. B* 69, 369-390 (the cluster bootstrap, which
       these t intervals replace: with two or three sessions it cannot reach its level).
    .. [5] Rousseeuw, P. J. and Croux, C. (1993). Alternatives to the median absolute
       deviation. *J. Am. Stat. Assoc.* 88, 1273-1283 (the Qn scale).

    Examples
    --------
    Synthetic trials around the published gpt2-medium MPS cache table (5 per budget):

    >>> import regimes
    >>> trials = regimes.simulate.published_gpt2_medium_cache(trials=5, cv=0.10, seed=0)
    >>> result = regimes.cache_speedup(trials)
    >>> result.collapses.select("start", "end").rows()
    [(512, 512)]

    A single budget cannot be tested, and the result says so:

    >>> one = regimes.cache_speedup(trials.filter(trials["budget"] == 512))
    >>> one.collapses.height, one.untested.height
    (0, 1)
    """
    check_fraction(alpha=alpha, level=level)
    check_min_ratio(min_ratio)
    frame, group_columns = _prepare(df, x, y, by, session)
    params = dict(
        x=x,
        y=y,
        by=by,
        alpha=alpha,
        min_ratio=min_ratio,
        level=level,
        session=session,
    )
    levels = speedup_levels(frame, group_columns, x, y)
    curves = scan_curves(levels, group_columns, x, level, math.log(min_ratio))
    trend, collapses = find_collapses(curves, group_columns, x, frame.schema[x], alpha, min_ratio)
    speedup = (
        speedup_table(levels, group_columns, x, level)
        .with_columns(pl.col(x).cast(frame.schema[x]))
        .join(trend, on=[*group_columns, x], how="left", nulls_equal=True)
        .with_columns((pl.col("speedup") / pl.col("trend")).alias("ratio"))
        .select([*group_columns, x, *_SPEEDUP_COLUMNS])
    )
    untested = untested_frame(
        [c.key | {"reason": c.reason} for c in curves if c.reason is not None], group_columns
    )
    return SpeedupResult(
        speedup=speedup,
        collapses=collapses,
        untested=untested,
        trials=_trial_rows(frame, group_columns, x, y),
        x=x,
        y=y,
        group_columns=group_columns,
        params=params,
        native=native_library(df),
    )


def _prepare(
    df: Any, x: str, y: str, by: str | Sequence[str] | None, session: str | None
) -> tuple[pl.DataFrame, list[str]]:
    """Prepare the trials of the cells measured both ways; return them and the groups."""
    columns = [str(c) for c in getattr(df, "columns", [])]
    if "use_cache" not in columns:
        raise RegimesInputError(
            "the trial table has no 'use_cache' column; the speedup "
            "compares runs with the KV cache on and off"
        )
    if by is not None:
        by = [by] if isinstance(by, str) else list(by)
        if "use_cache" in by:
            raise RegimesInputError(
                "by= must not contain 'use_cache': the speedup is formed across it"
            )
        by = [*by, "use_cache"]
    frame, with_cache = prepare_trials(df, x, y, by, session)
    group_columns = [c for c in with_cache if c != "use_cache"]
    return paired_cells(frame, group_columns, x), group_columns


def _trial_rows(frame: pl.DataFrame, group_columns: list[str], x: str, y: str) -> pl.DataFrame:
    """Keep the analysed trials: groups, ``use_cache``, ``x``, ``y`` and ``session``."""
    kept = list(dict.fromkeys([*group_columns, "use_cache", x, y]))
    out = frame.select(kept)
    if "session" not in kept:
        out = out.with_columns(frame.get_column("_session").alias("session"))
    return out
