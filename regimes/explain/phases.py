"""Which phase carries an anomaly?  Its excess latency split into prefill and decode.

Instrumented trials record the prefill time ``P`` (the prompt's forward pass and first
token) and the decode time ``D`` (every later step) besides the end-to-end latency
``Y``. For an anomaly over cells ``I`` of its curve, each quantity ``Q`` in ``(P, D,
Y)`` gets a flank trend: the weighted least-squares line, in ``(log x, log median Q)``,
through up to ``clip(|I|, 3, 8)`` cells on each side that lie in no anomaly of the
group (one side only when the anomaly runs to an end of the grid: the line is then
extrapolated). Its excess over the trend, in seconds per trial, is

.. math::  E_Q = \\frac{1}{|I|} \\sum_{t \\in I}
           \\bigl(\\tilde Q_t - e^{\\hat\\ell_Q(t)}\\bigr),

with :math:`\\tilde Q_t` the cell median and :math:`\\hat\\ell_Q(t)` the trend. The share
of the excess that decode carries is :math:`E_D / (E_P + E_D)`; ``unattributed`` is
:math:`E_Y - E_P - E_D`, time outside both phases (a per-step device sync, tokenisation).

A share is a ratio whose denominator is the phases' total excess :math:`E_P + E_D`; where
that total could be 0, the share and its interval run off to any value. So
``decode_share`` is reported only when the total is significantly away from 0: its
percentile interval at ``level`` excludes 0 (lies above it, for a slowdown). Otherwise
the share and its interval are null and ``decode_share_note`` says why. When reported,
the share's interval is taken over the replicates whose total has the sign of the
estimate (all but at most :math:`(1 - \\text{level})/2` of them).

Intervals come from the bootstrap: every cell's trials are resampled (sessions first,
:mod:`regimes.resample`), *paired* across ``P``, ``D`` and ``Y`` so that the phases'
dependence carries over; the trend line's weights stay fixed and it is refitted on
every replicate, so its uncertainty is in the interval. Percentile intervals are
reported, with a one-sided bootstrap p-value that each phase's excess is positive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._stats.contrasts import trend_contrast
from regimes._stats.levels import cell_levels
from regimes._stats.resample import cell_replicates
from regimes._stats.trends import trend_coordinate
from regimes.data._prepare import prepare_trials
from regimes.data.schema import RegimesInputError, check_fraction, check_n_boot
from regimes.explain._anomalies import AnomalyInput, group_label, read_report, summary_text

__all__ = ["PhaseAttribution", "attribute_phases"]

PHASES = ("prefill_s", "decode_s")
FLANK = (3, 8)

_RESULT_SCHEMA: dict[str, pl.DataType] = {
    "n_cells": pl.Int64(),
    "n_uninstrumented": pl.Int64(),
    **{
        f"{phase}_{stat}": pl.Float64()
        for phase in ("latency", "prefill", "decode")
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
"""Columns of :attr:`PhaseAttribution.phases` after the group columns and the anomaly's
``anomaly``, ``start`` and ``end``."""


@dataclass(frozen=True)
class PhaseAttribution:
    """Result of :func:`attribute_phases`.

    ``phases``: one row per anomaly: group columns, ``anomaly``, ``start``, ``end``,
    ``n_cells``, ``n_uninstrumented`` (rows of the group left out for lacking a phase
    split); for ``latency``, ``prefill`` and ``decode``: ``*_excess_s`` (mean excess
    seconds per trial over the trend) with ``*_low`` / ``*_high`` and ``*_ratio`` (cell
    median over trend, averaged over the interval); ``prefill_p_value`` and
    ``decode_p_value`` (one-sided, excess > 0); ``phases_excess_s`` (prefill plus
    decode) with ``phases_low`` / ``phases_high``; ``decode_share`` with
    ``decode_share_low`` / ``decode_share_high``, null unless the phases' total excess is
    significantly away from 0, and ``decode_share_note`` saying why when null;
    ``unattributed_s``.
    """

    phases: pl.DataFrame
    group_columns: tuple[str, ...]
    level: float
    n_boot: int

    def summary(self) -> str:
        """One line per anomaly: excess per phase and the share decode carries."""
        head = (
            f"Phase attribution of the excess over trend ({100 * self.level:g}% "
            f"bootstrap CIs, {self.n_boot} replicates)"
        )
        return summary_text(head, self.phases, "no anomalies to attribute", self._line)

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
            f"[{row['start']}, {row['end']}] {group_label(row, self.group_columns)}: "
            f"{part('latency')}; {part('prefill')}; {part('decode')}; {share}"
        )

    def __repr__(self) -> str:
        return self.summary()


def attribute_phases(
    df: Any,
    report: Any,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> PhaseAttribution:
    """Split each anomaly's excess latency over trend into prefill and decode.

    ``df`` is the instrumented trial table the report was computed from (``prefill_s``
    and ``decode_s`` measured); see the module docstring for the statistics. Rows
    without a phase split are left out and counted in ``n_uninstrumented``.

    Raises :class:`RegimesInputError` when the table has no phase split at all, or
    none in a group that has an anomaly.
    """
    check_fraction(level=level)
    check_n_boot(n_boot)
    columns = [str(c) for c in getattr(df, "columns", [])]
    source = read_report(report, columns)
    missing = [c for c in PHASES if c not in columns]
    if missing:
        raise RegimesInputError(
            f"the trial table has no phase split (no {missing} column): attributing an "
            "anomaly to prefill or decode needs instrumented trials; collect the sweep with "
            "instrumentation on"
        )
    frame, _ = prepare_trials(df, source.x, source.y, source.group_columns, None)
    split = pl.all_horizontal([pl.col(c).is_not_null() & (pl.col(c) > 0) for c in PHASES])
    if frame.filter(split).height == 0:
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
    parts = [
        _attribute_group(source, key, anomalies, frame, split, n_boot, seed, level)
        for key, anomalies in source.groups()
    ]
    phases = pl.concat(parts) if parts else _empty(source)
    return PhaseAttribution(
        phases=phases, group_columns=tuple(source.group_columns), level=level, n_boot=n_boot
    )


def _flank(normal: np.ndarray, start: int, end: int) -> np.ndarray:
    """Up to ``clip(width, 3, 8)`` cells on each side of ``start..end`` in no anomaly."""
    n_flank = int(np.clip(end - start + 1, *FLANK))
    left = np.flatnonzero(normal[:start])[-n_flank:]
    right = end + 1 + np.flatnonzero(normal[end + 1 :])[:n_flank]
    return np.concatenate([left, right])


def _attribute_group(
    source: AnomalyInput,
    key: dict[str, Any],
    anomalies: pl.DataFrame,
    frame: pl.DataFrame,
    split: pl.Expr,
    n_boot: int,
    seed: int,
    level: float,
) -> pl.DataFrame:
    rows = source.rows_of(frame, key)
    label = group_label(key, list(key))
    measured = rows.filter(split)
    if measured.height == 0:
        raise RegimesInputError(
            f"the group {label} has an anomaly but no trial with a phase split (prefill_s / "
            "decode_s null): it was not instrumented"
        )
    x, y = source.x, source.y
    values = [y, *PHASES]
    reps = cell_replicates(measured, [x], values, session="_session", n_boot=n_boot, seed=seed)
    xs = reps.cells.get_column(x).cast(pl.Float64).to_numpy()
    u = trend_coordinate(xs)
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
    starts = anomalies.get_column("start").to_numpy()
    ends = anomalies.get_column("end").to_numpy()
    normal = ~((xs[:, None] >= starts[None, :]) & (xs[:, None] <= ends[None, :])).any(axis=1)
    tails = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    out = []
    for anomaly in anomalies.iter_rows(named=True):
        inside = np.flatnonzero((xs >= anomaly["start"]) & (xs <= anomaly["end"]))
        flank = _flank(normal, int(inside[0]), int(inside[-1])) if inside.size else inside
        if inside.size == 0 or flank.size == 0:
            raise RegimesInputError(
                f"the anomaly [{anomaly['start']}, {anomaly['end']}] of {label} has "
                f"{'no instrumented cell' if inside.size == 0 else 'no instrumented flank cell'}"
                "; its excess over trend cannot be split"
            )
        excess, ratio, draws = [], [], []
        for k in range(len(values)):
            at = trend_contrast(u, var[:, k], inside, flank)[1]
            sample = _excess(reps.median[:, k], at, inside)
            boot = _excess(reps.replicates[:, :, k], at, inside)
            excess.append(sample[0])
            ratio.append(sample[1])
            draws.append(boot[0])
        row = {c: anomaly[c] for c in [*source.group_columns, "anomaly", "start", "end"]}
        row |= {"n_cells": int(inside.size), "n_uninstrumented": rows.height - measured.height}
        for name, point, boot, r in zip(("latency", "prefill", "decode"), excess, draws, ratio):
            low, high = np.quantile(boot, tails)
            row |= {
                f"{name}_excess_s": float(point),
                f"{name}_low": float(low),
                f"{name}_high": float(high),
                f"{name}_ratio": float(r),
            }
            if name != "latency":
                row[f"{name}_p_value"] = float((1 + np.sum(boot <= 0)) / (boot.size + 1))
        row |= _decode_share(excess[1], excess[2], draws[1], draws[2], tails)
        row["unattributed_s"] = float(excess[0] - excess[1] - excess[2])
        out.append(row)
    keys = [*source.group_columns, "anomaly", "start", "end"]
    return pl.DataFrame(out, schema={**{c: anomalies.schema[c] for c in keys}, **_RESULT_SCHEMA})


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
    """The phases' total excess with its interval, and decode's share of it when that
    total is significantly away from 0 (see the module docstring).
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
