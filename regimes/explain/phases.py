r"""Which phase carries an anomaly?  Its excess latency split into prefill and decode.

Instrumented trials record the prefill time ``P`` (the prompt's forward pass and first
token) and the decode time ``D`` (every later step) besides the end-to-end latency
``Y``. For an anomaly over cells ``I`` of its curve, each quantity ``Q`` in ``(P, D,
Y)`` gets a flank trend: the weighted least-squares line, in ``(log x, log median Q)``,
through up to ``clip(|I|, 3, 8)`` cells on each side that lie in no anomaly of the
group (one side only when the anomaly runs to an end of the grid: the line is then
extrapolated). Its excess over the trend, in seconds per trial, is

.. math::  E_Q = \frac{1}{|I|} \sum_{t \in I}
           \bigl(\tilde Q_t - e^{\hat\ell_Q(t)}\bigr),

with :math:`\tilde Q_t` the cell median and :math:`\hat\ell_Q(t)` the trend. The share
of the excess that decode carries is :math:`E_D / (E_P + E_D)`; ``unattributed`` is
:math:`E_Y - E_P - E_D`, time outside both phases (a per-step device sync, tokenisation).

A share is a ratio whose denominator is the phases' total excess :math:`E_P + E_D`; where
that total could be 0, the share and its interval run off to any value. So
``decode_share`` is reported only when the total is significantly away from 0: its
percentile interval at ``level`` excludes 0 (lies above it, for a slowdown). Otherwise
the share and its interval are null and ``decode_share_note`` says why. When reported,
the share's interval is taken over the replicates whose total has the sign of the
estimate (all but at most :math:`(1 - \text{level})/2` of them).

Intervals come from the bootstrap: every cell's trials are resampled (sessions first,
:mod:`regimes._stats.resample`), *paired* across ``P``, ``D`` and ``Y`` so that the phases'
dependence carries over; the trend line's weights stay fixed and it is refitted on
every replicate, so its uncertainty is in the interval. Percentile intervals are
reported, with a one-sided bootstrap p-value that each phase's excess is positive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._deprecation import renamed
from regimes._labels import text_label
from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._stats.contrasts import trend_contrast
from regimes._stats.levels import cell_levels
from regimes._stats.resample import CellReplicates, cell_replicates
from regimes._stats.trends import trend_coordinate
from regimes._summary import Summary
from regimes.data._prepare import prepare_trials
from regimes.data.schema import RegimesInputError, check_fraction, check_n_boot, check_seed
from regimes.explain._anomalies import AnomalyInput, frame_columns
from regimes.explain._source import anomaly_source

__all__ = ["PhaseResult", "attribute_phases"]

PHASES = ("prefill_s", "decode_s")
FLANK = (3, 8)
_NAMES = ("latency", "prefill", "decode")

_RESULT_SCHEMA: dict[str, pl.DataType] = {
    "n_cells": pl.Int64(),
    "n_uninstrumented": pl.Int64(),
    **{
        f"{phase}_{stat}": pl.Float64()
        for phase in _NAMES
        for stat in ("excess_s", "low", "high", "ratio", "p_value")
        if not (phase == "latency" and stat == "p_value")
    },
    **{
        c: pl.Float64()
        for c in (
            "phases_excess_s",
            "phases_low",
            "phases_high",
            "decode_share",
            "decode_share_low",
            "decode_share_high",
        )
    },
    "decode_share_note": pl.String(),
    "unattributed_s": pl.Float64(),
}
"""Columns of :attr:`PhaseResult.phases` after the group columns and the anomaly's
``anomaly``, ``start`` and ``end``."""


@dataclass(frozen=True, repr=False)
class PhaseResult(AnalysisResult):
    """Result of :func:`attribute_phases`: each anomaly's excess split by phase.

    Attributes
    ----------
    phases : polars.DataFrame
        One row per anomaly attributed: group columns, ``anomaly``, ``start``, ``end``,
        ``n_cells``, ``n_uninstrumented`` (rows of the group left out for lacking a
        phase split); for ``latency``, ``prefill`` and ``decode``: ``*_excess_s`` (mean
        excess seconds per trial over the trend) with ``*_low`` / ``*_high`` and
        ``*_ratio`` (cell median over trend, averaged over the interval);
        ``prefill_p_value`` and ``decode_p_value`` (one-sided, excess > 0);
        ``phases_excess_s`` (prefill plus decode) with ``phases_low`` / ``phases_high``;
        ``decode_share`` with ``decode_share_low`` / ``decode_share_high``, null unless
        the phases' total excess is significantly away from 0, and ``decode_share_note``
        saying why when null; ``unattributed_s``.
    untested : polars.DataFrame
        The anomalies that could not be split (group columns, ``anomaly``, ``start``,
        ``end``, ``reason``): a group without instrumented trials, an interval without
        an instrumented cell or flank.
    params : dict
        The call's arguments (``x``, ``y``, ``by``, ``level``, ``n_boot``, ``seed``,
        ``session``).
    group_columns : tuple of str
        The columns that identify a group.
    """

    phases: pl.DataFrame
    untested: pl.DataFrame
    params: dict[str, Any]
    group_columns: tuple[str, ...]

    _tables = ("phases",)
    _title = "Phase attribution"
    _explanation = True

    @property
    def level(self) -> float:
        """Confidence level of the intervals (``params["level"]``)."""
        return float(self.params["level"])

    @property
    def n_boot(self) -> int:
        """Bootstrap replicates drawn (``params["n_boot"]``)."""
        return int(self.params["n_boot"])

    def _summary(self) -> Summary:
        """One line per anomaly: excess per phase and the share decode carries."""
        head = (
            f"Phase attribution of the excess over trend ({100 * self.params['level']:g}% "
            f"bootstrap CIs, {self.params['n_boot']} replicates)"
        )
        return Summary().add_listing(
            head, self.phases, self._line, empty="no anomalies to attribute", untested=self.untested
        )

    def _line(self, row: dict[str, Any]) -> str:
        def part(name: str) -> str:
            return (
                f"{name} {row[f'{name}_excess_s']:+.4g} s [{row[f'{name}_low']:+.4g}, "
                f"{row[f'{name}_high']:+.4g}] (x{row[f'{name}_ratio']:.3g})"
            )

        share = (
            f"decode carries {100 * row['decode_share']:.0f}% "
            f"[{100 * row['decode_share_low']:.0f}%, {100 * row['decode_share_high']:.0f}%]"
            if row["decode_share"] is not None
            else f"decode share not reported: {row['decode_share_note']}"
        )
        return (
            f"[{row['start']}, {row['end']}] {text_label(row, self.group_columns)}: "
            f"{part('latency')}; {part('prefill')}; {part('decode')}; {share}"
        )


_RENAMED = {"PhaseAttribution": "PhaseResult"}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""


def __getattr__(name: str) -> Any:
    return renamed(__name__, _RENAMED, name)


def attribute_phases(
    df: Any,
    report: Any = None,
    *,
    x: str | None = None,
    y: str | None = None,
    by: str | Sequence[str] | None = None,
    alpha: float | None = None,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    session: str | None = None,
) -> PhaseResult:
    """Split each anomaly's excess latency over trend into prefill and decode.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The instrumented trial table the report was computed from (``prefill_s`` and
        ``decode_s`` measured). Rows without a phase split are left out and counted in
        ``n_uninstrumented``.
    report : RegimeResult, optional
        The anomalies to explain (:func:`regimes.detect_regimes`); when None they are
        detected here with ``x``, ``y``, ``by``, ``alpha``, ``level``, ``n_boot``,
        ``seed`` and ``session``.
    x, y : str, optional
        The axis and the time; default the report's (``"budget"`` and ``"latency_s"``
        when detecting). Given with a report, they must be the report's.
    by : str or sequence of str, optional
        Group columns; default the report's (the case columns present when detecting).
    alpha : float, optional
        False discovery rate of the detection; only when ``report`` is None (default
        0.05 there).
    level : float, default 0.95
        Confidence level of the percentile intervals.
    n_boot : int, default 2000
        Bootstrap replicates (at least :func:`regimes.data.schema.n_boot_floor`).
    seed : int, default 0
        Seed of the bootstrap; the same seed gives the same answer.
    session : str, optional
        Column naming the process of each trial; default ``run_id``, ``session`` and
        ``process_id`` together (those present), as in detection. Sessions are
        resampled first.

    Returns
    -------
    PhaseResult
        ``phases`` (one row per anomaly) and ``untested`` (anomalies that could not be
        split, with the reason); see the module docstring for the statistics.

    Raises
    ------
    RegimesInputError
        When the table has no phase split at all (no ``prefill_s`` / ``decode_s``
        column, or null in every row), when ``report`` is not a detection report, or
        for a bad ``level``, ``n_boot`` or ``seed``.

    See Also
    --------
    regimes.detect_regimes : finds the anomalies explained here.
    regimes.memory_confound : does memory explain an anomaly?

    References
    ----------
    .. [1] Davison, A. C. and Hinkley, D. V. (1997). *Bootstrap Methods and their
       Application*, section 3.8 (resampling clustered data: sessions first).

    Examples
    --------
    >>> import numpy as np, polars as pl, regimes
    >>> b = np.repeat(np.arange(64, 1025, 64), 5)
    >>> rng = np.random.default_rng(0)
    >>> decode = 0.004 * b * np.where((b >= 448) & (b <= 576), 4.0, 1.0)
    >>> decode = decode * rng.lognormal(0, 0.05, b.size)
    >>> df = pl.DataFrame({"backend": "synthetic", "model": "synthetic", "use_cache": True,
    ...                    "budget": b, "prefill_s": 0.03, "decode_s": decode,
    ...                    "latency_s": 0.03 + decode})
    >>> res = regimes.attribute_phases(df, n_boot=200)
    >>> res.phases.select("start", "end").rows()
    [(448, 576)]
    >>> res.phases["decode_share"][0] > 0.9
    True
    """
    check_fraction(level=level)
    check_n_boot(n_boot, level=level)
    check_seed(seed)
    columns = frame_columns(df)
    missing = [c for c in PHASES if c not in columns]
    if missing:
        raise RegimesInputError(
            f"the trial table has no phase split (no {missing} column): attributing an "
            "anomaly to prefill or decode needs instrumented trials; collect the sweep with "
            "instrumentation on"
        )
    detection = {"alpha": alpha, "level": level, "n_boot": n_boot, "seed": seed}
    source = anomaly_source(
        df,
        report,
        x=x,
        y=y,
        by=by,
        detection=detection | {"session": session},
        detection_only=("alpha",),
    )
    frame, _ = prepare_trials(df, source.x, source.y, source.group_columns, session)
    _require_phase_split(frame)
    parts, untested = [], []
    for key, anomalies in source.groups():
        group = _PhaseGroup.build(source, key, frame, n_boot, seed, level)
        if isinstance(group, str):
            untested += _untested_rows(source, anomalies, group)
            continue
        part, skipped = group.attribute(anomalies)
        parts.append(part)
        untested += skipped
    params = {"x": source.x, "y": source.y, "by": source.group_columns} | detection
    return PhaseResult(
        phases=pl.concat(parts) if parts else _empty(source),
        untested=untested_frame(untested, [*source.group_columns, "anomaly", "start", "end"]),
        params=params | {"session": session},
        group_columns=tuple(source.group_columns),
        native=native_library(df),
    )


_SPLIT = pl.all_horizontal([pl.col(c).is_not_null() & (pl.col(c) > 0) for c in PHASES])
"""A trial with both phases measured."""


def _require_phase_split(frame: pl.DataFrame) -> None:
    if frame.filter(_SPLIT).height:
        return
    instrumented = (
        "; every row has instrumented=false"
        if "instrumented" in frame.columns
        and not frame.get_column("instrumented").fill_null(False).any()
        else ""
    )
    raise RegimesInputError(
        "no trial has a phase split: prefill_s and decode_s are null (or not positive) "
        f"in every measured row{instrumented}. Attributing an anomaly to prefill or "
        "decode needs instrumented trials; collect the sweep with instrumentation on"
    )


def _untested_rows(
    source: AnomalyInput, anomalies: pl.DataFrame, reason: str
) -> list[dict[str, Any]]:
    keys = [*source.group_columns, "anomaly", "start", "end"]
    return [{c: row[c] for c in keys} | {"reason": reason} for row in anomalies.to_dicts()]


def _flank(normal: np.ndarray, start: int, end: int) -> np.ndarray:
    """Up to ``clip(width, 3, 8)`` cells on each side of ``start..end`` in no anomaly."""
    n_flank = int(np.clip(end - start + 1, *FLANK))
    left = np.flatnonzero(normal[:start])[-n_flank:]
    right = end + 1 + np.flatnonzero(normal[end + 1 :])[:n_flank]
    return np.concatenate([left, right])


@dataclass(frozen=True)
class _PhaseGroup:
    """One group's instrumented cells.

    Bootstrap replicates of latency and both phases, the trend coordinate ``u`` and the
    cells' log-scale sampling variances.
    """

    source: AnomalyInput
    key: dict[str, Any]
    reps: CellReplicates
    xs: np.ndarray
    u: np.ndarray
    var: np.ndarray
    n_uninstrumented: int
    level: float

    @classmethod
    def build(
        cls,
        source: AnomalyInput,
        key: dict[str, Any],
        frame: pl.DataFrame,
        n_boot: int,
        seed: int,
        level: float,
    ) -> _PhaseGroup | str:
        """Resample the group's cells, or return why it cannot be attributed."""
        rows = source.rows_of(frame, key)
        measured = rows.filter(_SPLIT)
        if measured.height == 0:
            return (
                "no trial of the group has a phase split (prefill_s / decode_s null): "
                "not instrumented"
            )
        x, values = source.x, [source.y, *PHASES]
        n_cells = measured.get_column(x).n_unique()
        check_n_boot(n_boot, level=level, cells=n_cells, columns=len(values))
        reps = cell_replicates(measured, [x], values, session="_session", n_boot=n_boot, seed=seed)
        xs = reps.cells.get_column(x).cast(pl.Float64).to_numpy()
        # Cell sampling variances on the log scale weight each quantity's flank line.
        logged = measured.with_columns(
            *[pl.col(v).log().alias(f"_log_{v}") for v in values],
            pl.lit(0).alias("_curve"),
            pl.col(x).cast(pl.Float64).alias("_x"),
        )
        var = np.column_stack(
            [
                cell_levels(logged, "_curve", "_x", f"_log_{v}", "_session")
                .sort("_x")
                .get_column("var")
                .to_numpy()
                for v in values
            ]
        )
        u = trend_coordinate(xs)
        return cls(source, key, reps, xs, u, var, rows.height - measured.height, level)

    def attribute(self, anomalies: pl.DataFrame) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
        """One row per anomaly of the group, and the anomalies that could not be split."""
        starts = anomalies.get_column("start").to_numpy()
        ends = anomalies.get_column("end").to_numpy()
        xs = self.xs
        covered = (xs[:, None] >= starts[None, :]) & (xs[:, None] <= ends[None, :])
        normal = np.logical_not(covered.any(axis=1))
        out, untested = [], []
        keys = [*self.source.group_columns, "anomaly", "start", "end"]
        for anomaly in anomalies.iter_rows(named=True):
            inside = np.flatnonzero((xs >= anomaly["start"]) & (xs <= anomaly["end"]))
            flank = _flank(normal, int(inside[0]), int(inside[-1])) if inside.size else inside
            where = {c: anomaly[c] for c in keys}
            if inside.size == 0 or flank.size == 0:
                lacking = (
                    "no instrumented cell" if inside.size == 0 else "no instrumented flank cell"
                )
                untested.append(
                    where | {"reason": f"{lacking}: its excess over trend cannot be split"}
                )
                continue
            out.append(where | self._row(inside, flank))
        schema = {**{c: anomalies.schema[c] for c in keys}, **_RESULT_SCHEMA}
        return pl.DataFrame(out, schema=schema), untested

    def _row(self, inside: np.ndarray, flank: np.ndarray) -> dict[str, Any]:
        """Excess, ratio and intervals of latency and both phases over one interval."""
        tails = [(1.0 - self.level) / 2.0, (1.0 + self.level) / 2.0]
        row: dict[str, Any] = {
            "n_cells": int(inside.size),
            "n_uninstrumented": self.n_uninstrumented,
        }
        excess: list[Any] = []
        draws: list[np.ndarray] = []
        for k, name in enumerate(_NAMES):
            at = trend_contrast(self.u, self.var[:, k], inside, flank)[1]
            point, ratio = _excess(self.reps.median[:, k], at, inside)
            boot = _excess(self.reps.replicates[:, :, k], at, inside)[0]
            low, high = np.quantile(boot, tails)
            row |= {
                f"{name}_excess_s": float(point),
                f"{name}_low": float(low),
                f"{name}_high": float(high),
                f"{name}_ratio": float(ratio),
            }
            if name != "latency":
                row[f"{name}_p_value"] = float((1 + np.sum(boot <= 0)) / (boot.size + 1))
            excess.append(point)
            draws.append(boot)
        row |= _decode_share(excess[1], excess[2], draws[1], draws[2], tails)
        row["unattributed_s"] = float(excess[0] - excess[1] - excess[2])
        return row


def _excess(
    medians: np.ndarray, at: np.ndarray, inside: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean excess seconds over the flank trend and mean ratio, over the interval.

    ``medians`` is ``(cells,)`` or ``(cells, replicates)``; ``at`` maps log medians of
    all cells to the trend at each inside cell.
    """
    trend = np.exp(at @ np.log(medians))
    observed = medians[inside]
    return (observed - trend).mean(axis=0), (observed / trend).mean(axis=0)


def _decode_share(
    prefill: float,
    decode: float,
    prefill_draws: np.ndarray,
    decode_draws: np.ndarray,
    tails: list[float],
) -> dict[str, Any]:
    """Return the phases' total excess with its interval, and decode's share of it.

    The share is reported only when that total is significantly away from 0 (see the
    module docstring).
    """
    total, total_draws = prefill + decode, prefill_draws + decode_draws
    low, high = np.quantile(total_draws, tails)
    out: dict[str, Any] = {
        "phases_excess_s": float(total),
        "phases_low": float(low),
        "phases_high": float(high),
    }
    if low > 0 or high < 0:
        side = np.sign(total_draws) == np.sign(total)
        share_low, share_high = np.quantile(decode_draws[side] / total_draws[side], tails)
        return out | {
            "decode_share": float(decode / total),
            "decode_share_low": float(share_low),
            "decode_share_high": float(share_high),
            "decode_share_note": None,
        }
    return out | {
        "decode_share": None,
        "decode_share_low": None,
        "decode_share_high": None,
        "decode_share_note": (
            f"the phases' total excess {total:+.3g} s [{low:+.3g}, {high:+.3g}] is not "
            "significantly away from 0, so a share of it is undefined"
        ),
    }


def _empty(source: AnomalyInput) -> pl.DataFrame:
    base = source.anomalies.select([*source.group_columns, "anomaly", "start", "end"])
    return base.with_columns(
        *[pl.lit(None, dtype=dtype).alias(c) for c, dtype in _RESULT_SCHEMA.items()]
    )
