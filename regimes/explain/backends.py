r"""Is an anomaly specific to its backend?  The same interval on the other backends.

For an anomaly found on backend ``B`` over ``[start, end]`` of ``x``, and every other
backend ``B'`` measured for the same case (the group columns without ``backend`` and
``device``), the interval is carried over to ``B'``'s curve and both curves are tested
the same way (:mod:`regimes._stats.flank_test`): the log ratio of the interval's level over
its flank trend, :math:`D_B` and :math:`D_{B'}`, each with a standard error and
Welch-Satterthwaite df from the cells' sampling variances and the curve's between-cell
variance (estimated without the interval).

The specificity test is on the difference of log ratios,

.. math::  \Delta = D_B - D_{B'}, \qquad
           \operatorname{se}(\Delta) = \sqrt{\operatorname{se}_B^2 + \operatorname{se}_{B'}^2},

the curves being measured independently; its p-value is one-sided in the anomaly's
direction (``B`` slower than its trend by more than ``B'`` is, for a spike) against a t
with Welch df, and Benjamini-Hochberg q-values run over every comparison of the call.
The anomaly is *specific* to ``B`` when every other backend compares with ``q < alpha``.
``other_p_value`` says whether ``B'`` leaves its own trend in that interval at all
(two-sided, not adjusted: the interval was chosen on ``B``, not on ``B'``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from regimes._deprecation import renamed
from regimes._labels import text_label
from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._stats.between_cell import curve_taus
from regimes._stats.curves import Curve, curve_from_levels, index_curves
from regimes._stats.fixed_intervals import fixed_interval_test
from regimes._stats.levels import cell_levels
from regimes._stats.multitest import benjamini_hochberg
from regimes._summary import Summary
from regimes.data._prepare import prepare_trials
from regimes.data.schema import RegimesInputError, check_fraction
from regimes.explain._anomalies import AnomalyInput
from regimes.explain._source import anomaly_source

__all__ = ["BackendResult", "compare_backends"]

_NOT_CASE = ("backend", "device")


@dataclass(frozen=True, repr=False)
class BackendResult(AnalysisResult):
    r"""Result of :func:`compare_backends`: whether each anomaly is specific to its backend.

    Attributes
    ----------
    comparisons : polars.DataFrame
        One row per anomaly and other backend: the anomaly's group columns, ``anomaly``,
        ``start``, ``end``, ``other_backend``, ``other_device`` (when the table has
        devices), ``other_cells`` (x values of the other curve inside the interval),
        ``ratio`` / ``ratio_low`` / ``ratio_high`` (the anomaly's backend, recomputed
        the same way as the other's), ``other_ratio`` / ``other_low`` / ``other_high``,
        ``other_p_value``, ``ratio_of_ratios`` / ``ratio_of_ratios_low`` /
        ``ratio_of_ratios_high`` (:math:`e^\Delta`), ``p_value``, ``q_value``,
        ``specific`` and ``note`` (why a comparison could not be made).
    verdicts : polars.DataFrame
        One row per anomaly: ``n_compared`` and ``specific`` (every other backend
        compared, all with ``q < alpha``).
    untested : polars.DataFrame
        The comparisons that could not be made (group columns, ``anomaly``, ``start``,
        ``end``, ``other_backend``, ``reason``), also kept in ``comparisons`` with their
        ``note``.
    params : dict
        The call's arguments (``x``, ``y``, ``by``, ``alpha``, ``level``, ``session``).
    group_columns : tuple of str
        The columns that identify a group.
    """

    comparisons: pl.DataFrame
    verdicts: pl.DataFrame
    untested: pl.DataFrame
    params: dict[str, Any]
    group_columns: tuple[str, ...]

    _tables = ("comparisons", "verdicts")
    _title = "Backend specificity"
    _explanation = True

    @property
    def alpha(self) -> float:
        """False discovery rate of the specificity tests (``params["alpha"]``)."""
        return float(self.params["alpha"])

    @property
    def level(self) -> float:
        """Confidence level of the intervals (``params["level"]``)."""
        return float(self.params["level"])

    def _summary(self) -> Summary:
        """One line per comparison, then the verdict per anomaly."""
        head = (
            f"Backend specificity (difference of log ratios over trend, "
            f"{100 * self.params['level']:g}% CIs, alpha={self.params['alpha']:g})"
        )
        out = Summary().add_listing(
            head, self.comparisons, self._line, empty="no anomaly to compare"
        )
        return out.add_rows(self.verdicts.iter_rows(named=True), self._verdict)

    def _verdict(self, row: dict[str, Any]) -> str:
        word = "specific to its backend" if row["specific"] else "not shown to be specific"
        return (
            f"=> {text_label(row, self.group_columns)} [{row['start']}, {row['end']}]: {word} "
            f"({row['n_compared']} other backend(s) compared)"
        )

    def _line(self, row: dict[str, Any]) -> str:
        where = f"{text_label(row, self.group_columns)} [{row['start']}, {row['end']}]"
        if row["note"] is not None:
            return f"{where} vs {row['other_backend']}: not testable here: {row['note']}"
        return (
            f"{where}: x{row['ratio']:.3g} [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"
            f" vs {row['other_backend']} x{row['other_ratio']:.3g} [{row['other_low']:.3g}, "
            f"{row['other_high']:.3g}] -> ratio of ratios x{row['ratio_of_ratios']:.3g} "
            f"(q={row['q_value']:.2g}){' specific' if row['specific'] else ''}"
        )


_RENAMED = {"BackendComparison": "BackendResult"}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""


def __getattr__(name: str) -> Any:
    return renamed(__name__, _RENAMED, name)


def compare_backends(
    df: Any,
    report: Any = None,
    *,
    x: str | None = None,
    y: str | None = None,
    by: str | Sequence[str] | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
    n_boot: int | None = None,
    seed: int | None = None,
    session: str | None = None,
) -> BackendResult:
    """Test that each anomaly is specific to its own backend.

    Each anomaly's interval is carried over to every other backend measured for the same
    case and both curves are tested there the same way (see the module docstring).

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table the report was computed from, holding the other backends too.
    report : RegimeResult, optional
        Anomalies grouped by ``backend`` (:func:`regimes.detect_regimes` does so by
        default); when None they are detected here with ``x``, ``y``, ``by``, ``alpha``,
        ``level``, ``n_boot``, ``seed`` and ``session``.
    x, y : str, optional
        The axis and the time; default the report's. Given with a report, they must be
        the report's.
    by : str or sequence of str, optional
        Group columns, ``backend`` among them; default the report's.
    alpha : float, default 0.05
        False discovery rate of the specificity tests (Benjamini-Hochberg over every
        comparison of the call), and of the detection when ``report`` is None.
    level : float, default 0.95
        Confidence level of every interval.
    n_boot, seed : int, optional
        Bootstrap options of the detection; only when ``report`` is None.
    session : str, optional
        Column naming the process of each trial; default ``run_id``, ``session`` and
        ``process_id`` together (those present), as in detection.

    Returns
    -------
    BackendResult
        ``comparisons`` (one row per anomaly and other backend), ``verdicts`` (one row
        per anomaly) and ``untested`` (comparisons that could not be made, and why).

    Raises
    ------
    RegimesInputError
        When only one backend is present, the report is not grouped by backend or is
        not a detection report, or for a bad ``alpha`` or ``level``.

    See Also
    --------
    regimes.detect_regimes : finds the anomalies compared here.

    References
    ----------
    .. [1] Welch, B. L. (1947). The generalization of "Student's" problem when several
       different population variances are involved. *Biometrika* 34, 28-35;
       Satterthwaite, F. E. (1946). *Biometrics Bulletin* 2(6), 110-114.
    .. [2] Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery rate.
       *JRSS B* 57(1), 289-300.

    Examples
    --------
    >>> import polars as pl, regimes
    >>> mps = regimes.simulate_sweep(1, anomaly="spike", ratio=4.0, seed=1).trials
    >>> cpu = regimes.simulate_sweep(1, seed=2).trials
    >>> df = pl.concat([mps.with_columns(backend=pl.lit("mps")),
    ...                 cpu.with_columns(backend=pl.lit("cpu"), session=pl.lit(1, pl.Int64))])
    >>> res = regimes.compare_backends(df, n_boot=200)
    >>> res.verdicts.select("backend", "specific").rows()
    [('mps', True)]
    """
    check_fraction(alpha=alpha, level=level)
    detection = {"alpha": alpha, "level": level, "n_boot": n_boot, "seed": seed}
    source = anomaly_source(
        df,
        report,
        x=x,
        y=y,
        by=by,
        detection=detection | {"session": session},
        detection_only=("n_boot", "seed"),
    )
    if "backend" not in source.group_columns:
        raise RegimesInputError(
            "the report is not grouped by 'backend'; detect per backend "
            "(detect_regimes groups by every case column present, backend included)"
        )
    frame, group_columns = prepare_trials(df, source.x, source.y, source.group_columns, session)
    backends = frame.get_column("backend").unique().sort().to_list()
    if len(backends) < 2:
        raise RegimesInputError(
            f"compare_backends needs trials from at least two backends; the table has only "
            f"{backends} (measure the same sweep on cpu, cuda or mps too)"
        )
    rows = _comparison_rows(source, frame, group_columns, level)
    comparisons = _finish(rows, source, frame, alpha)
    noted = comparisons.filter(pl.col("note").is_not_null())
    keys = [*source.group_columns, "anomaly", "start", "end", "other_backend"]
    return BackendResult(
        comparisons=comparisons,
        verdicts=_verdicts(comparisons, source.group_columns),
        untested=untested_frame(
            noted.select([*keys, pl.col("note").alias("reason")]).to_dicts(), keys
        ),
        params={"x": source.x, "y": source.y, "by": source.group_columns}
        | {"alpha": alpha, "level": level, "session": session},
        group_columns=tuple(source.group_columns),
        native=native_library(df),
    )


def _comparison_rows(
    source: AnomalyInput, frame: pl.DataFrame, group_columns: list[str], level: float
) -> list[dict[str, Any]]:
    """Compare every anomaly with each other backend of its case."""
    curves = _curves(frame, group_columns, source.x)
    taus = dict(zip(curves, curve_taus(list(curves.values())), strict=True))
    case = [c for c in group_columns if c not in _NOT_CASE]
    backend = group_columns.index("backend")
    rows = []
    for anomaly in source.anomalies.iter_rows(named=True):
        own_key = _key_of(curves, group_columns, anomaly)
        for other in curves:
            same_case = all(_same(other[group_columns.index(c)], anomaly[c]) for c in case)
            if not same_case or other[backend] == anomaly["backend"]:
                continue
            rows.append(
                _compare(
                    anomaly,
                    (curves[own_key], taus[own_key]),
                    (curves[other], taus[other]),
                    dict(zip(group_columns, other, strict=True)),
                    source.group_columns,
                    level,
                )
            )
    return rows


def _verdicts(comparisons: pl.DataFrame, group_columns: list[str]) -> pl.DataFrame:
    """Per anomaly: how many backends were compared, and whether it is specific."""
    return (
        comparisons.group_by([*group_columns, "anomaly", "start", "end"], maintain_order=True)
        .agg(
            pl.col("p_value").is_not_null().sum().cast(pl.Int64).alias("n_compared"),
            (
                pl.col("specific").fill_null(False).all() & pl.col("p_value").is_not_null().any()
            ).alias("specific"),
        )
        .sort("anomaly")
    )


def _same(a: Any, b: Any) -> bool:
    return a == b or (a is None and b is None)


def _curves(frame: pl.DataFrame, group_columns: list[str], x: str) -> dict[tuple, Curve]:
    """Cell levels of every curve, keyed by its group values."""
    index = index_curves(frame, group_columns, x)
    levels = cell_levels(index.frame, "_curve", "_x", "_ly", "_session").join(
        index.groups, on="_curve"
    )
    return {
        tuple(part.row(0, named=True)[c] for c in group_columns): curve_from_levels(part)
        for part in levels.partition_by("_curve", maintain_order=True)
    }


def _key_of(curves: dict[tuple, Curve], group_columns: list[str], anomaly: dict[str, Any]) -> tuple:
    key = tuple(anomaly[c] for c in group_columns)
    if key not in curves:
        raise RegimesInputError(
            f"the anomaly at {text_label(anomaly, group_columns)} has no trials in the "
            "table; pass the same table the report was computed from"
        )
    return key


def _interval_test(
    curve: Curve,
    tau: tuple[float, float],
    start: float,
    end: float,
    direction: str,
    level: float,
) -> tuple[tuple[float, float, float] | None, int, str | None]:
    """``(estimate, se, df)`` of the interval on one curve, its cell count, or a note."""
    inside = np.flatnonzero((curve.x >= start) & (curve.x <= end))
    if inside.size == 0:
        return None, 0, "no measured x inside the interval"
    if inside.size == curve.x.size:
        return None, int(inside.size), "the interval covers every measured x: no flank"
    tests = fixed_interval_test(curve, int(inside[0]), int(inside[-1]), tau, direction=direction)
    return (
        (float(tests.estimate[0]), float(tests.se[0]), float(tests.df[0])),
        int(inside.size),
        None,
    )


def _compare(
    anomaly: dict[str, Any],
    own: tuple[Curve, tuple[float, float]],
    other: tuple[Curve, tuple[float, float]],
    other_key: dict[str, Any],
    group_columns: list[str],
    level: float,
) -> dict[str, Any]:
    direction = "up" if anomaly.get("ratio", 2.0) >= 1.0 else "down"
    mine, _, own_note = _interval_test(*own, anomaly["start"], anomaly["end"], direction, level)
    theirs, n_cells, note = _interval_test(
        *other, anomaly["start"], anomaly["end"], direction, level
    )
    row = {c: anomaly[c] for c in [*group_columns, "anomaly", "start", "end"]} | {
        "other_backend": other_key["backend"],
        "other_device": other_key.get("device"),
        "other_cells": n_cells,
        "note": own_note or note,
    }
    if mine is None or theirs is None:
        return row
    quantile = (1.0 + level) / 2.0
    (d_own, se_own, df_own), (d_other, se_other, df_other) = mine, theirs
    delta, se = d_own - d_other, math.hypot(se_own, se_other)
    welch = se**4 / (se_own**4 / df_own + se_other**4 / df_other) if se > 0 else math.inf
    z = delta / se if se > 0 else math.copysign(math.inf, delta)
    one_sided = stats.t.sf(z if direction == "up" else -z, welch)

    def interval(estimate: float, spread: float, dof: float) -> tuple[float, float, float]:
        half = float(stats.t.ppf(quantile, dof)) * spread
        with np.errstate(over="ignore"):  # a ratio beyond 1e308 is reported as inf
            ratio, low, high = np.exp([estimate, estimate - half, estimate + half])
        return float(ratio), float(low), float(high)

    ratio = interval(d_own, se_own, df_own)
    other_ratio = interval(d_other, se_other, df_other)
    ratios = interval(delta, se, welch)
    return row | {
        "ratio": ratio[0],
        "ratio_low": ratio[1],
        "ratio_high": ratio[2],
        "other_ratio": other_ratio[0],
        "other_low": other_ratio[1],
        "other_high": other_ratio[2],
        "other_p_value": float(min(1.0, 2.0 * stats.t.sf(abs(d_other / se_other), df_other)))
        if se_other > 0
        else 0.0,
        "ratio_of_ratios": ratios[0],
        "ratio_of_ratios_low": ratios[1],
        "ratio_of_ratios_high": ratios[2],
        "p_value": float(one_sided),
    }


def _finish(
    rows: list[dict[str, Any]], source: Any, frame: pl.DataFrame, alpha: float
) -> pl.DataFrame:
    floats = [
        "ratio",
        "ratio_low",
        "ratio_high",
        "other_ratio",
        "other_low",
        "other_high",
        "other_p_value",
        "ratio_of_ratios",
        "ratio_of_ratios_low",
        "ratio_of_ratios_high",
        "p_value",
    ]
    anomalies = source.anomalies
    schema = {c: anomalies.schema[c] for c in [*source.group_columns, "anomaly", "start", "end"]}
    schema |= {
        "other_backend": pl.String,
        "other_device": frame.schema.get("device", pl.String),
        "other_cells": pl.Int64,
    }
    schema |= {c: pl.Float64 for c in floats} | {"note": pl.String}
    table = pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")
    p = table.get_column("p_value").to_numpy()
    measured = ~np.isnan(p.astype(float)) if p.size else np.zeros(0, dtype=bool)
    q = np.full(p.size, np.nan)
    q[measured] = benjamini_hochberg(p[measured].astype(float))
    table = table.with_columns(pl.Series("q_value", q).fill_nan(None))
    table = table.with_columns((pl.col("q_value") < alpha).alias("specific"))
    if "device" not in frame.columns:
        table = table.drop("other_device")
    ordered = [c for c in table.columns if c != "note"] + ["note"]
    return table.select(ordered).sort(["anomaly", "other_backend"])
