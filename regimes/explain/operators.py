r"""Which operators carry an anomaly?  Its excess split over the profiled operators.

A profiled run (spec key ``profile``) holds, besides its timed trials, generations run
under the PyTorch profiler: their ``ops`` table gives every operator's self time per
generation. For an anomaly over ``[start, end]`` of the budget, found on the timed
trials, each operator :math:`o` is a curve of its own: its self time per generation
:math:`Y_o(b)`, summed over its calls, along the profiled budgets. Operators that carry
less than ``min_share`` of the profiled time are pooled as one, ``(other operators)``.

**Ratio over trend.** Each operator's curve goes through the library's test of an
interval fixed in advance (docs/method.md, sections 9-11): cell levels with moderated
variances, the smooth trend fitted with a free level shift at the interval's
boundaries, a between-cell variance from the cells around it. The contrast (log level
over the trend, the trend's uncertainty included) gives the ratio with a t interval and
a one-sided TREAT p-value that the ratio exceeds ``min_ratio``. The interval was chosen
on the timed trials, which the profiled generations are not part of, so there is no
scan adjustment; Benjamini-Hochberg q-values run over the operators of each anomaly.
An operator is *flagged* when its q-value is below ``alpha``.

**Share of the excess.** As for the phases (:mod:`regimes.explain.phases`), each
operator's excess is its cells' mean excess over a flank trend, in seconds per
generation,

.. math::  E_o = \frac{1}{|I|} \sum_{b \in I} \bigl(\tilde Y_o(b) - e^{\hat\ell_o(b)}\bigr),

and its share is :math:`E_o / \sum_{o'} E_{o'}`. Percentile intervals come from a
bootstrap that resamples sessions, then generations inside each, *paired* over the
operators, with each operator's flank line refitted on every replicate; a share is
reported only where the total excess is significantly above 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._labels import text_label
from regimes._result import AnalysisResult, untested_frame
from regimes._stats.between_cell import curve_taus
from regimes._stats.contrasts import treat_p_values, trend_contrast
from regimes._stats.curves import Curve, curve_from_levels, index_curves
from regimes._stats.fixed_intervals import fixed_interval_test, flank_support
from regimes._stats.levels import cell_levels
from regimes._stats.multitest import benjamini_hochberg
from regimes._stats.resample import cell_replicates
from regimes._summary import Summary
from regimes.data.schema import (
    RegimesInputError,
    as_polars,
    check_fraction,
    check_min_ratio,
    check_n_boot,
    check_seed,
)
from regimes.explain._anomalies import read_report
from regimes.explain.phases import _excess, _flank

__all__ = ["OTHER", "OperatorResult", "attribute_operators"]

OTHER = "(other operators)"
"""The pooled operators that each carry less than ``min_share`` of the profiled time."""

_TIMES = {"host": "self_host_s", "device": "self_device_s"}

_FLOOR_S = 1e-7
"""Self time given to an operator a generation did not run (its log must exist)."""

_ROW_SCHEMA: dict[str, pl.DataType] = {
    "operator": pl.String(),
    "n_cells": pl.Int64(),
    "time_s": pl.Float64(),
    "trend_s": pl.Float64(),
    "ratio": pl.Float64(),
    "ratio_low": pl.Float64(),
    "ratio_high": pl.Float64(),
    "p_value": pl.Float64(),
    "q_value": pl.Float64(),
    "flagged": pl.Boolean(),
    "excess_s": pl.Float64(),
    "share": pl.Float64(),
    "share_low": pl.Float64(),
    "share_high": pl.Float64(),
}
"""Columns of :attr:`OperatorResult.operators` after the group columns and the anomaly's
``anomaly``, ``start`` and ``end``."""


@dataclass(frozen=True, repr=False)
class OperatorResult(AnalysisResult):
    """Result of :func:`attribute_operators`: which operators carry each anomaly's excess.

    Attributes
    ----------
    operators : polars.DataFrame
        One row per anomaly and operator: group columns, ``anomaly``, ``start``, ``end``,
        ``operator``, ``n_cells`` (profiled budgets inside), ``time_s`` and ``trend_s``
        (mean self seconds per generation inside, and its flank trend), ``ratio`` /
        ``ratio_low`` / ``ratio_high`` (level over trend), ``p_value``, ``q_value``
        (Benjamini-Hochberg over the anomaly's operators), ``flagged`` (``q_value <
        alpha``), ``excess_s``, ``share`` / ``share_low`` / ``share_high`` (of the
        operators' total excess; null when that total is not significantly above 0).
        Sorted by anomaly, then excess.
    profiles : polars.DataFrame
        Per group, operator and profiled budget: ``time_s`` (median self seconds per
        generation), ``share`` (of the generation's profiled time), ``n``.
    untested : polars.DataFrame
        The anomalies that could not be attributed (group columns, ``anomaly``,
        ``start``, ``end``, ``reason``).
    params : dict
        The call's arguments (``time``, ``alpha``, ``level``, ``min_ratio``,
        ``min_share``, ``n_boot``, ``seed``).
    group_columns : tuple of str
        The columns that identify a group.
    """

    operators: pl.DataFrame
    profiles: pl.DataFrame
    untested: pl.DataFrame
    params: dict[str, Any]
    group_columns: tuple[str, ...]

    _tables = ("operators", "profiles")
    _title = "Operator attribution"
    _explanation = True

    @property
    def alpha(self) -> float:
        """False discovery rate of the flags (``params["alpha"]``)."""
        return float(self.params["alpha"])

    def carriers(self) -> pl.DataFrame:
        """Return the flagged operators of each anomaly, largest share first."""
        return self.operators.filter(pl.col("flagged"))

    def _summary(self) -> Summary:
        """One line per anomaly: the operators that carry its excess."""
        head = (
            f"Operator attribution of the excess over trend ({self.params['time']} self "
            f"time per {self.params['unit']}; {100 * self.params['level']:g}% intervals, "
            f"q < {self.alpha:g})"
        )
        anomalies = self.operators.unique(
            [*self.group_columns, "anomaly"], keep="first", maintain_order=True
        )
        return Summary().add_listing(
            head, anomalies, self._line, empty="no anomalies to attribute", untested=self.untested
        )

    def _line(self, row: dict[str, Any]) -> str:
        rows = self.operators.filter(pl.col("anomaly") == row["anomaly"])
        flagged = rows.filter(pl.col("flagged"))
        parts = [_carrier(r) for r in flagged.iter_rows(named=True)]
        rest = rows.filter(~pl.col("flagged") & pl.col("ratio").is_not_null())
        where = f"[{row['start']}, {row['end']}] {text_label(row, list(self.group_columns))}"
        others = _unflagged(rest, self.params["min_ratio"], "other " if parts else "")
        return f"{where}: " + "; ".join(parts or ["no operator is flagged"]) + others


def _carrier(row: dict[str, Any]) -> str:
    share = (
        f"{100 * row['share']:.0f} % [{100 * row['share_low']:.0f}, "
        f"{100 * row['share_high']:.0f}] of the excess, "
        if row["share"] is not None
        else ""
    )
    return f"{row['operator']}: {share}{_ratio(row)} its trend (q = {row['q_value']:.2g})"


def _ratio(row: dict[str, Any]) -> str:
    return f"{row['ratio']:.3g}x [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"


def _unflagged(rest: pl.DataFrame, min_ratio: float, other: str) -> str:
    """Say how far the unflagged operators went: those over ``min_ratio`` by name.

    An operator far above its trend that the test could not tell from noise (a kernel
    seen in a few generations) is named with its interval, so that "every other operator
    within" never hides it.
    """
    if rest.height == 0:
        return ""
    high = rest.filter(pl.col("ratio") >= min_ratio).sort("ratio", descending=True)
    named = [
        f"{r['operator']} {_ratio(r)}, not significant (q = {r['q_value']:.2g})"
        for r in high.head(_NAMED_UNFLAGGED).iter_rows(named=True)
    ]
    if high.height > _NAMED_UNFLAGGED:
        named.append(f"{high.height - _NAMED_UNFLAGGED} more above {min_ratio:g}x")
    within = rest.filter(pl.col("ratio") < min_ratio).get_column("ratio")
    if within.len():
        every = f"every {other}operator" if not named else "every other one"
        named.append(f"{every} within {float(within.max()):.3g}x")  # type: ignore[arg-type]
    return "; " + "; ".join(named)


_NAMED_UNFLAGGED = 3
"""Unflagged operators above ``min_ratio`` a summary line names; the rest are counted."""


def attribute_operators(
    ops: Any,
    report: Any,
    *,
    time: str = "host",
    unit: str = "operator",
    alpha: float = 0.05,
    level: float = 0.95,
    min_ratio: float = 1.25,
    min_share: float = 0.01,
    n_boot: int = 2000,
    seed: int = 0,
) -> OperatorResult:
    """Find the operators that carry each anomaly's excess latency.

    Parameters
    ----------
    ops : polars.DataFrame or pandas.DataFrame
        The ``ops`` table of the run the report was computed from
        (``regimes.load(run, table="ops")``): one row per operator of each profiled
        generation.
    report : RegimeResult
        The anomalies to explain (:func:`regimes.detect_regimes` on the run's trials).
    time : {"host", "device"}, default "host"
        Which self time to attribute: on the host, or on the device (backends whose
        profiler reports device times: CUDA).
    unit : {"operator", "scope"}, default "operator"
        What the excess is split over: each operator's own self time, or each
        outermost call with everything it ran inside (``aten::scaled_dot_product_attention``
        with the transposes and allocations of its kernel).
    alpha : float, default 0.05
        False discovery rate of the flags (Benjamini-Hochberg over each anomaly's
        operators).
    level : float, default 0.95
        Confidence level of every interval.
    min_ratio : float, default 1.25
        An operator is flagged only when its time is significantly more than
        ``min_ratio`` times its trend (TREAT).
    min_share : float, default 0.01
        Operators with a smaller share of the group's profiled time are pooled.
    n_boot : int, default 2000
        Bootstrap replicates of the shares.
    seed : int, default 0
        Seed of the bootstrap; the same seed gives the same answer.

    Returns
    -------
    OperatorResult
        ``operators`` (one row per anomaly and operator), ``profiles`` and ``untested``.

    Raises
    ------
    RegimesInputError
        With one line: ``ops`` lacks a needed column, comes from another run than the
        report's trials, holds no profiled budget inside any anomaly, has no device
        times where ``time="device"``, or a bad option.

    See Also
    --------
    regimes.detect_regimes : finds the anomalies explained here.
    regimes.attribute_phases : the same excess split into prefill and decode.

    Examples
    --------
    >>> import regimes
    >>> run = "examples/data/cpu-slow-attention"  # from the repository root
    >>> rep = regimes.detect_regimes(regimes.load(run))
    >>> ops = regimes.load(run, table="ops")
    >>> res = regimes.attribute_operators(ops, rep, unit="scope", n_boot=200)
    >>> res.carriers().get_column("operator").to_list()
    ['aten::scaled_dot_product_attention']
    """
    check_fraction(alpha=alpha, level=level)
    check_min_ratio(min_ratio)
    check_n_boot(n_boot, level=level)
    check_seed(seed)
    table = _checked_ops(ops, time, unit)
    source = read_report(report, table.columns)
    _check_same_run(table, report)
    options = _Options(time, unit, alpha, level, min_ratio, min_share, n_boot, seed)
    parts, profiles, untested = [], [], []
    for key, anomalies in source.groups():
        group = _OperatorGroup.build(source.rows_of(table, key), _TIMES[time], options)
        profiles.append(group.profile.with_columns(pl.lit(v).alias(c) for c, v in key.items()))
        for anomaly in anomalies.iter_rows(named=True):
            where = {c: anomaly[c] for c in [*source.group_columns, "anomaly", "start", "end"]}
            rows = group.attribute(anomaly["start"], anomaly["end"], anomalies)
            if isinstance(rows, str):
                untested.append(where | {"reason": rows})
            else:
                parts.append(pl.DataFrame([where | r for r in rows]))
    _check_budgets(source.anomalies.height, untested)
    keys = [*source.group_columns, "anomaly", "start", "end"]
    schema = {**{c: source.anomalies.schema[c] for c in keys}, **_ROW_SCHEMA}
    return OperatorResult(
        operators=_concat(parts, schema),
        profiles=pl.concat(profiles, how="diagonal_relaxed") if profiles else pl.DataFrame(),
        untested=untested_frame(untested, keys),
        params=options.params(),
        group_columns=tuple(source.group_columns),
    )


def _concat(parts: list[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Stack the anomalies' rows in one schema (empty with it when there are none)."""
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat([p.select(list(schema)).cast(pl.Schema(schema)) for p in parts])


@dataclass(frozen=True)
class _Options:
    time: str
    unit: str
    alpha: float
    level: float
    min_ratio: float
    min_share: float
    n_boot: int
    seed: int

    def params(self) -> dict[str, Any]:
        return dict(self.__dict__)


_NEEDED = ("budget", "session", "trial", "operator")


def _checked_ops(ops: Any, time: str, unit: str) -> pl.DataFrame:
    """Return the ops table as polars, its time checked, ``operator`` naming the unit."""
    if time not in _TIMES:
        raise RegimesInputError(f"time must be 'host' or 'device', got {time!r}")
    if unit not in ("operator", "scope"):
        raise RegimesInputError(f"unit must be 'operator' or 'scope', got {unit!r}")
    frame = as_polars(ops)
    missing = [c for c in (*_NEEDED, unit, _TIMES[time]) if c not in frame.columns]
    if missing:
        raise RegimesInputError(
            f"the ops table lacks column(s) {missing}: pass regimes.load(run, table='ops') "
            "of a run collected with the spec key 'profile'"
        )
    if frame.height == 0:
        raise RegimesInputError(
            "the ops table is empty: the run has no profiled generations (spec key 'profile')"
        )
    column = frame.get_column(_TIMES[time])
    if time == "device" and column.null_count() == frame.height:
        backends = frame.get_column("backend").unique().to_list() if "backend" in frame else []
        raise RegimesInputError(
            f"the ops table has no device times (backend {backends}: its profiler reports "
            "host times only); use time='host'"
        )
    frame = frame.filter(column.is_not_null())
    return frame.with_columns(pl.col("scope").alias("operator")) if unit == "scope" else frame


def _check_same_run(ops: pl.DataFrame, report: Any) -> None:
    """Refuse profiles of another run than the one the report's trials come from."""
    source = getattr(report, "source", None)
    columns = getattr(source, "columns", [])
    if "run_id" not in ops.columns or "run_id" not in columns:
        return
    theirs = set(as_polars(source).get_column("run_id").drop_nulls().to_list())
    mine = set(ops.get_column("run_id").drop_nulls().to_list())
    if theirs and mine and not mine & theirs:
        raise RegimesInputError(
            f"the ops table is of run {sorted(mine)} but the report was detected on run "
            f"{sorted(theirs)}: pass the profiles of the same run"
        )


def _check_budgets(n_anomalies: int, untested: list[dict[str, Any]]) -> None:
    """Refuse ops that hold no profiled budget inside any anomaly."""
    lacking = [u for u in untested if u["reason"].startswith("no profiled budget")]
    if n_anomalies and len(lacking) == n_anomalies:
        spans = ", ".join(f"{u['start']}..{u['end']}" for u in lacking)
        raise RegimesInputError(
            f"the ops table holds no profiled budget inside the anomalies ({spans}): "
            "profile budgets inside and around each regime (spec key 'profile')"
        )


@dataclass(frozen=True)
class _OperatorGroup:
    """One group's profiled generations: per operator, its curve and its replicates."""

    names: list[str]
    curves: list[Curve]
    taus: list[tuple[float, float]]
    wide: pl.DataFrame
    profile: pl.DataFrame
    options: _Options

    @classmethod
    def build(cls, rows: pl.DataFrame, time: str, options: _Options) -> _OperatorGroup:
        """Sum each generation's self time per operator; pool the small operators."""
        session = [c for c in ("run_id", "session", "process_id") if c in rows.columns]
        per_op = rows.group_by(["budget", *session, "trial", "operator"]).agg(pl.col(time).sum())
        totals = per_op.group_by("operator").agg(pl.col(time).sum()).sort(time, descending=True)
        share = totals.get_column(time) / max(float(totals.get_column(time).sum()), 1e-300)
        kept = totals.filter(share >= options.min_share).get_column("operator").to_list()
        named = per_op.with_columns(
            pl.when(pl.col("operator").is_in(kept)).then("operator").otherwise(pl.lit(OTHER))
        )
        gen = ["budget", *session, "trial"]
        long = named.group_by([*gen, "operator"]).agg(pl.col(time).sum().alias("_t"))
        names = kept + ([OTHER] if long.get_column("operator").eq(OTHER).any() else [])
        wide = (
            long.pivot(on="operator", index=gen, values="_t")
            .with_columns(pl.col(n).fill_null(0.0).clip(lower_bound=_FLOOR_S) for n in names)
            .with_columns(pl.concat_str([pl.col(c).cast(pl.String) for c in session]).alias("_s"))
            .sort(gen)
        )
        curves = _curves(wide, names)
        return cls(names, curves, curve_taus(curves), wide, _profile(wide, names), options)

    def attribute(
        self, start: Any, end: Any, anomalies: pl.DataFrame
    ) -> list[dict[str, Any]] | str:
        """One row per operator for the anomaly ``start..end``, or why it cannot be done."""
        xs = self.curves[0].x
        inside = np.flatnonzero((xs >= start) & (xs <= end))
        if inside.size == 0:
            return f"no profiled budget inside {start}..{end}: nothing to attribute"
        why = flank_support(int(inside[0]), int(inside[-1]), xs.size)
        if why is not None:
            return f"the profiled budgets around it cannot carry a trend: {why}"
        rows = [self._ratio(k, int(inside[0]), int(inside[-1])) for k in range(len(self.names))]
        q = benjamini_hochberg(np.array([r["p_value"] for r in rows]))
        for r, qk in zip(rows, q, strict=True):
            r |= {"q_value": float(qk), "flagged": bool(qk < self.options.alpha)}
        shares = self._shares(inside, _normal(xs, anomalies))
        for r, s in zip(rows, shares, strict=True):
            r |= s
        return sorted(rows, key=lambda r: -r["excess_s"])

    def _ratio(self, k: int, first: int, last: int) -> dict[str, Any]:
        """Return the operator's ratio over its trend inside, its interval and p-value."""
        curve, opts = self.curves[k], self.options
        tests = fixed_interval_test(curve, first, last, self.taus[k])
        p = treat_p_values(tests.estimate, tests.se, tests.df, "up", math.log(opts.min_ratio))
        # a t interval on a fraction of a degree of freedom can pass 1e308: reported as inf
        ratio, low, high = (float(v[0]) for v in tests.ratio_interval(opts.level))
        level = np.exp(curve.level[first : last + 1]).mean()
        return {
            "operator": self.names[k],
            "n_cells": last - first + 1,
            "time_s": float(level),
            "trend_s": float(level / ratio),
            "ratio": ratio,
            "ratio_low": low,
            "ratio_high": high,
            "p_value": float(p[0]),
        }

    def _shares(self, inside: np.ndarray, normal: np.ndarray) -> list[dict[str, Any]]:
        """Each operator's excess and share of the total, with percentile intervals."""
        opts = self.options
        reps = cell_replicates(
            self.wide, ["budget"], self.names, session="_s", n_boot=opts.n_boot, seed=opts.seed
        )
        flank = _flank(normal, int(inside[0]), int(inside[-1]))
        point, draws = [], []
        for k, curve in enumerate(self.curves):
            at = trend_contrast(curve.u, curve.var + self.taus[k][0], inside, flank)[1]
            point.append(float(_excess(reps.median[:, k], at, inside)[0]))
            draws.append(_excess(reps.replicates[:, :, k], at, inside)[0])
        total, total_draws = sum(point), np.sum(draws, axis=0)
        tails = [(1 - opts.level) / 2, (1 + opts.level) / 2]
        shown = float(np.quantile(total_draws, tails[0])) > 0
        side = total_draws > 0
        out = []
        for e, d in zip(point, draws, strict=True):
            row: dict[str, Any] = {"excess_s": e, "share": None, "share_low": None}
            row["share_high"] = None
            if shown:
                low, high = np.quantile(d[side] / total_draws[side], tails)
                row |= {"share": e / total, "share_low": float(low), "share_high": float(high)}
            out.append(row)
        return out


def _curves(wide: pl.DataFrame, names: list[str]) -> list[Curve]:
    """Each operator's cells on the log scale, in increasing budget."""
    long = wide.unpivot(on=names, index=["budget", "_s"], variable_name="operator").with_columns(
        pl.col("value").log().alias("_ly"), pl.col("operator").alias("_group")
    )
    index = index_curves(long, ["operator"], "budget")
    levels = cell_levels(index.frame, "_curve", "_x", "_ly", "_s").join(index.groups, on="_curve")
    by_name = {
        part.get_column("operator")[0]: curve_from_levels(part)
        for part in levels.partition_by("_curve", maintain_order=True)
    }
    return [by_name[n] for n in names]


def _profile(wide: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """Median self time per generation and its share of the profiled time, per budget."""
    total = pl.sum_horizontal(names)
    shares = wide.with_columns(*[(pl.col(n) / total).alias(f"_share_{n}") for n in names])
    rows = []
    for n in names:
        part = shares.group_by("budget").agg(
            pl.col(n).median().alias("time_s"),
            pl.col(f"_share_{n}").median().alias("share"),
            pl.len().cast(pl.Int64).alias("n"),
        )
        rows.append(part.with_columns(pl.lit(n).alias("operator")))
    return (
        pl.concat(rows)
        .select("operator", "budget", "time_s", "share", "n")
        .sort("operator", "budget")
    )


def _normal(xs: np.ndarray, anomalies: pl.DataFrame) -> np.ndarray:
    """Cells in no anomaly of the group."""
    starts = anomalies.get_column("start").to_numpy()
    ends = anomalies.get_column("end").to_numpy()
    covered = (xs[:, None] >= starts[None, :]) & (xs[:, None] <= ends[None, :])
    return np.logical_not(covered.any(axis=1))
