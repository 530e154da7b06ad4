r"""Each run of a comparison: its trials, its detection, its curves' cells, its environment.

A *side* is one of the two runs. Its trials are detected as usual
(:func:`regimes.detect_regimes`) and reduced to cell levels per curve
(:func:`regimes._stats.levels.cell_levels`: log-scale levels with session main
effects removed, their sampling variances and df), with the curve's between-cell
variance.

Removing session effects makes a cell's level precise *within* the run, but every level
of a run still carries the mean effect of the processes that measured it: two runs made
of two processes each differ by a process effect that no number of trials averages away.
:func:`process_variance` measures it. Each process that measured at least three cells of
a curve gets an offset, the median over those cells of its median minus the cell's
median over processes (as cell levels compute it); the offsets' variance
:math:`\hat\sigma^2_p` over the run's :math:`S` processes (:math:`S - 1` df) makes the
variance of the run's mean process effect :math:`\hat\sigma^2_p / S`. Processes that
each measured one cell (a fresh process per case) need no such term: their effects
differ from cell to cell and are already in the cells' variances. A run measured by a
single process has the effect but no estimate of its size.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._stats.between_cell import curve_taus
from regimes._stats.curves import Curve, curve_from_levels
from regimes._stats.levels import cell_levels
from regimes.data._prepare import prepare_trials
from regimes.data.runs.scan import ENV_COLUMNS, load_runs
from regimes.data.schema import as_polars, present_case_columns
from regimes.detect import RegimeResult, detect_regimes
from regimes.errors import RegimesInputError, RegimesWarning

__all__ = [
    "ENV_KEYS",
    "CurveCells",
    "Side",
    "build_side",
    "detection_fits",
    "match_columns",
    "process_variance",
    "read_source",
]

ENV_KEYS: tuple[str, ...] = ("run_id", "device", *ENV_COLUMNS)
"""What the environment difference lists, in order."""

NOT_MATCHED = ("device",)
"""Case columns that name where a run measured, not what: two runs on two machines
compare their curves across them."""

MIN_SPAN = 3
"""Cells a process must have measured to get an offset (as in cell levels)."""

Key = tuple[Any, ...]


@dataclass(frozen=True)
class CurveCells:
    """One curve of one run: its cells, between-cell variance and process effects.

    ``n_processes`` counts the processes that measured at least :data:`MIN_SPAN` of its
    cells; ``process_sigma2`` is the variance of their effects with ``process_df``
    degrees of freedom (NaN and 0 with a single process; 0 and infinite df without any,
    when every process measured fewer cells).
    """

    curve: Curve
    tau: tuple[float, float]
    process_sigma2: float
    process_df: float
    n_processes: int


@dataclass(frozen=True)
class Side:
    """One run of a comparison (``name`` is ``base`` or ``new``)."""

    name: str
    label: str
    report: RegimeResult
    curves: dict[Key, CurveCells]
    environment: dict[str, str | None]


def read_source(source: Any, name: str) -> tuple[pl.DataFrame, str]:
    """Read the ``name`` run, a frame or a path (or list of paths); return it and a label.

    A run that cannot be read raises :class:`RegimesInputError` naming the run.
    """
    try:
        if isinstance(source, (str, os.PathLike, list, tuple)):
            paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
            return load_runs(paths), ", ".join(str(p) for p in paths)
        return as_polars(source), "trial table"
    except RegimesInputError as exc:
        raise RegimesInputError(f"the {name} run: {exc}") from None


def match_columns(
    base: pl.DataFrame, new: pl.DataFrame, by: str | Sequence[str] | None, x: str
) -> list[str]:
    """Columns on which curves of the two runs are matched.

    ``by`` when given (each must be in both tables), else the case columns present in
    both runs except ``x`` and :data:`NOT_MATCHED`.
    """
    if by is not None:
        columns = [by] if isinstance(by, str) else list(by)
        for name, frame in (("base", base), ("new", new)):
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise RegimesInputError(
                    f"by= names column(s) the {name} run lacks: {missing}; it has {frame.columns}"
                )
        return columns
    exclude = (x, *NOT_MATCHED)
    shared = set(present_case_columns(new, exclude=exclude))
    return [c for c in present_case_columns(base, exclude=exclude) if c in shared]


def detection_fits(detection: RegimeResult, group_columns: Sequence[str]) -> str | None:
    """Say why a run's detection cannot stand for its side of a comparison (``None``: it can).

    The comparison matches curves on ``group_columns``; a detection grouped by those
    columns, or by more that never split one matched curve (a run's single ``device``),
    has exactly the comparison's curves.
    """
    missing = [c for c in group_columns if c not in detection.group_columns]
    if missing:
        return f"the detection does not group by {missing}"
    groups = detection.groups
    if group_columns:
        splits = bool(groups.select(list(group_columns)).is_duplicated().any())
    else:
        splits = groups.height > 1
    if splits:
        extra = [c for c in detection.group_columns if c not in group_columns]
        return f"the detection splits the matched curves by {extra}"
    return None


def build_side(
    name: str,
    frame: pl.DataFrame,
    label: str,
    group_columns: list[str],
    detect: dict[str, Any],
    report: RegimeResult | None = None,
) -> Side:
    """Detect regimes in one run and reduce it to cell levels per curve.

    ``detect`` holds the keyword arguments of :func:`regimes.detect_regimes` (``x`` and
    ``y`` among them); an error it raises is prefixed with the run's name. ``report``: a
    detection of ``frame`` already made (:func:`detection_fits` the curves), used instead.
    """
    x, y = detect["x"], detect["y"]
    try:
        if report is None:
            report = detect_regimes(frame, by=group_columns, **detect)
        with warnings.catch_warnings():
            # detect_regimes has just warned about the same rows
            warnings.simplefilter("ignore", RegimesWarning)
            prepared, _ = prepare_trials(frame, x, y, group_columns, None)
    except RegimesInputError as exc:
        raise RegimesInputError(f"the {name} run: {exc}") from None
    return Side(name, label, report, _curve_cells(prepared, group_columns, x), environment(frame))


def _curve_cells(frame: pl.DataFrame, group_columns: list[str], x: str) -> dict[Key, CurveCells]:
    ids = (
        frame.select(group_columns).unique().sort(group_columns, nulls_last=True)
        if group_columns
        else pl.DataFrame({"_all": [0]})
    ).with_row_index("_curve")
    ids = ids.with_columns(pl.col("_curve").cast(pl.Int64))
    frame = (
        frame.join(ids, on=group_columns, how="left", nulls_equal=True)
        if group_columns
        else frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("_curve"))
    ).with_columns(pl.col(x).cast(pl.Float64).alias("_x"))
    levels = cell_levels(frame, "_curve", "_x", "_ly", "_session")
    processes = process_variance(frame, "_curve", "_x", "_ly", "_session")
    parts = levels.partition_by("_curve", maintain_order=True, as_dict=True)
    curve_ids = sorted(int(k[0]) for k in parts)
    curves = [curve_from_levels(parts[(c,)]) for c in curve_ids]
    keys = {int(r["_curve"]): tuple(r[c] for c in group_columns) for r in ids.iter_rows(named=True)}
    return {
        keys[c]: CurveCells(curve, tau, *processes.get(c, (0.0, math.inf, 0)))
        for c, curve, tau in zip(curve_ids, curves, curve_taus(curves), strict=True)
    }


def process_variance(
    frame: pl.DataFrame, curve: str, x: str, value: str, session: str
) -> dict[int, tuple[float, float, int]]:
    """Per curve: the variance of process effects, its df, and the number of processes.

    See the module docstring. Curves without a process that spans :data:`MIN_SPAN`
    cells are absent (no run-level effect); a curve with one such process gets
    ``(nan, 0, 1)``: the effect is there, its size unknown.
    """
    medians = frame.group_by([curve, x, session]).agg(pl.col(value).median().alias("_m"))
    spans = (
        medians.group_by([curve, session])
        .agg(pl.len().alias("_span"))
        .filter(pl.col("_span") >= MIN_SPAN)
        .group_by(curve)
        .agg(pl.len().alias("_n"))
    )
    offsets = (
        medians.with_columns(
            (pl.col("_m") - pl.col("_m").median().over([curve, x])).alias("_dev"),
            pl.len().over([curve, x]).alias("_s"),
        )
        .filter(pl.col("_s") > 1)
        .group_by([curve, session])
        .agg(pl.col("_dev").median().alias("_alpha"), pl.len().alias("_span"))
        .filter(pl.col("_span") >= MIN_SPAN)
        .sort([curve, session])
    )
    alphas = {
        int(cid): part.get_column("_alpha").to_numpy()
        for (cid,), part in offsets.partition_by(curve, as_dict=True).items()
    }
    out: dict[int, tuple[float, float, int]] = {}
    for cid, n in spans.iter_rows():
        alpha = alphas.get(int(cid), np.zeros(0))
        if n >= 2 and alpha.size >= 2:
            out[int(cid)] = (float(np.var(alpha, ddof=1)), alpha.size - 1.0, int(n))
        else:
            out[int(cid)] = (math.nan, 0.0, int(n))
    return out


def environment(frame: pl.DataFrame) -> dict[str, str | None]:
    """Read the run's :data:`ENV_KEYS` values: distinct values in order, ``" | "``-joined."""
    out: dict[str, str | None] = {}
    for key in ENV_KEYS:
        if key not in frame.columns:
            out[key] = None
            continue
        values = frame.get_column(key).drop_nulls().cast(pl.String).unique(maintain_order=True)
        out[key] = " | ".join(values.to_list()) if values.len() else None
    return out
