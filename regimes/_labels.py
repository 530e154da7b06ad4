"""Names and numbers as people read them: group labels, axis words, three digits.

What the charts, the findings and the text summaries share without drawing anything:
the label of each group (from the columns that vary between groups, else the model:
:func:`label_columns`, written ``backend=mps, model=gpt2`` by :func:`text_label` and
``mps · gpt2`` by :func:`group_labels`), the axes of a detection result, the quantity
a column measures, a result's confidence level and numbers to three significant digits.
Nothing here imports a plotting library, so the sentences of :mod:`regimes._findings`
read results without loading the charts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from regimes.data.schema import CASE_COLUMNS
from regimes.errors import RegimesInputError

__all__ = [
    "GROUP_FIELD",
    "LABEL_FALLBACK",
    "axis_title",
    "frame_attr",
    "group_labels",
    "label_columns",
    "level_text",
    "optional_frame",
    "quantity",
    "report_axes",
    "sig3",
    "split_shared",
    "text_label",
]

GROUP_FIELD = "group"
"""Name of the label column that identifies a group in every chart's data."""

LABEL_FALLBACK = ("model",)
"""What labels a group when no group column varies: its model, when it has one."""


def label_columns(
    keys: pl.DataFrame, group_columns: Sequence[str], fallback: Sequence[str] = LABEL_FALLBACK
) -> list[str]:
    """Return the group columns that tell the groups of ``keys`` apart.

    Parameters
    ----------
    keys : polars.DataFrame
        Any frame holding ``group_columns`` (a result's groups, a curve, trials).
    group_columns : sequence of str
        The columns that identify a group.
    fallback : sequence of str, default :data:`LABEL_FALLBACK`
        The columns that label the groups when none varies (those of them present).

    Returns
    -------
    list of str
        The columns of ``group_columns`` with more than one value in ``keys``, in
        order; when none varies, those of ``fallback`` among ``group_columns``.

    Examples
    --------
    >>> keys = pl.DataFrame({"backend": ["mps", "cpu"], "model": ["gpt2", "gpt2"]})
    >>> label_columns(keys, ["backend", "model"]), label_columns(keys[:1], ["backend", "model"])
    (['backend'], ['model'])
    """
    varying = [c for c in group_columns if keys.get_column(c).n_unique() > 1]
    return varying or [c for c in fallback if c in group_columns]


def text_label(row: Mapping[str, Any], columns: Sequence[str], *, present: bool = False) -> str:
    """Label one row for text: ``backend=mps, model=gpt2``; ``all rows`` without columns.

    With ``present=True`` only the columns the row has a value for are written (a
    speedup boundary has no ``use_cache``), and when it has none of them, the columns
    of :data:`LABEL_FALLBACK` it has a value for.

    Examples
    --------
    >>> text_label({"backend": "mps", "model": "gpt2"}, ["backend", "model"])
    'backend=mps, model=gpt2'
    >>> text_label({"use_cache": None, "model": "gpt2"}, ["use_cache"], present=True)
    'model=gpt2'
    """
    if present:
        shown = [c for c in columns if row.get(c) is not None]
        columns = shown or [c for c in LABEL_FALLBACK if row.get(c) is not None]
    return ", ".join(f"{c}={row[c]}" for c in columns) or "all rows"


def frame_attr(obj: Any, name: str) -> pl.DataFrame:
    """Return the polars frame ``obj.<name>``, or raise a clear error."""
    frame = getattr(obj, name, None)
    if not isinstance(frame, pl.DataFrame):
        raise RegimesInputError(
            f"expected a result with a polars DataFrame attribute {name!r}, "
            f"got {type(obj).__name__}"
        )
    return frame


def optional_frame(obj: Any, name: str) -> pl.DataFrame | None:
    """``obj.<name>`` when it is a non-empty polars frame, else ``None``."""
    frame = getattr(obj, name, None)
    return frame if isinstance(frame, pl.DataFrame) and frame.height else None


def report_axes(report: Any) -> tuple[str, str, list[str]]:
    """``(x, y, group_columns)`` of a regime detection result.

    Parameters
    ----------
    report : RegimeResult
        A result of :func:`regimes.detect_regimes` (anything with a ``curve`` frame).

    Returns
    -------
    tuple of (str, str, list of str)
        Read from the result's ``x``, ``y`` and ``group_columns`` attributes; when a
        result lacks them, ``x`` is the first of ``budget`` / ``total_tokens`` in its
        curve, ``y`` defaults to ``latency_s`` and the groups are the case columns
        present in the curve.

    Raises
    ------
    RegimesInputError
        When the result has no ``curve`` frame or the curve has no x column.
    """
    curve = frame_attr(report, "curve")
    x = getattr(report, "x", None) or next(
        (c for c in ("budget", "total_tokens") if c in curve.columns), None
    )
    if x is None or x not in curve.columns:
        raise RegimesInputError(
            f"the report's curve has no x column (looked for {x!r}); columns: {curve.columns}"
        )
    y = getattr(report, "y", None) or "latency_s"
    groups = getattr(report, "group_columns", None)
    if groups is None:
        groups = [c for c in CASE_COLUMNS if c in curve.columns and c != x]
    return x, str(y), list(groups)


def _format_value(column: str) -> pl.Expr:
    """Label one group key value for people (``cache on``, ``prompt 65``)."""
    col = pl.col(column)
    if column == "use_cache":
        expr = pl.when(col).then(pl.lit("cache on")).otherwise(pl.lit("cache off"))
    elif column == "prompt_tokens":
        expr = pl.lit("prompt ") + col.cast(pl.String)
    else:
        expr = col.cast(pl.String)
    return expr.fill_null(f"{column}=?").alias(column)


def group_labels(keys: pl.DataFrame, group_columns: Sequence[str]) -> tuple[pl.DataFrame, str]:
    """Label each distinct group and describe what all groups share.

    Parameters
    ----------
    keys : polars.DataFrame
        Any frame holding ``group_columns`` (a curve, a trial table).
    group_columns : sequence of str
        The columns that identify a group.

    Returns
    -------
    labels : polars.DataFrame
        The distinct key rows (sorted) with a ``group`` label column built from the
        columns that vary between groups (``"mps · cache on"``). With a single group
        every key goes into its label, so a panel is never titled by nothing.
    caption : str
        The values every group shares (``"gpt2 · float32"``), ``""`` when none.
    """
    group_columns = list(group_columns)
    if not group_columns:
        return pl.DataFrame({GROUP_FIELD: ["all"]}), ""
    distinct = keys.select(group_columns).unique().sort(group_columns, nulls_last=True)
    varying = label_columns(distinct, group_columns, fallback=())
    constant = [c for c in group_columns if c not in varying]
    labelled = distinct.with_columns(
        pl.concat_str([_format_value(c) for c in varying or group_columns], separator=" · ").alias(
            GROUP_FIELD
        )
    )
    return labelled, _shared_text(distinct, constant) if varying else ""


def _shared_text(frame: pl.DataFrame, columns: Sequence[str]) -> str:
    """Return the values of ``columns`` in the first row of ``frame``: ``gpt2 · float32``."""
    if not columns:
        return ""
    return " · ".join(str(v) for v in frame.head(1).select(map(_format_value, columns)).row(0))


def split_shared(frame: pl.DataFrame, columns: Sequence[str]) -> tuple[pl.DataFrame, str]:
    """Take the columns of ``columns`` that hold one value in every row out of ``frame``.

    A table of one group's rows (an anomaly's operators) repeats the group in each
    row; said once, as the table's caption, it tells what the table is about and
    leaves the rows to what tells them apart.

    Parameters
    ----------
    frame : polars.DataFrame
        The table.
    columns : sequence of str
        The columns that may be taken out (a result's group columns); those absent
        from ``frame`` are ignored.

    Returns
    -------
    rows : polars.DataFrame
        ``frame`` without the columns that hold one value (it unchanged when it has no
        rows).
    caption : str
        Their values as the charts label groups (``gpt2 · cache on``); ``""`` when none.

    Examples
    --------
    >>> frame = pl.DataFrame({"model": ["gpt2"] * 2, "use_cache": [True, False], "x": [1, 2]})
    >>> rows, caption = split_shared(frame, ["model", "use_cache"])
    >>> rows.columns, caption
    (['use_cache', 'x'], 'gpt2')
    """
    if frame.height == 0:
        return frame, ""
    shared = [c for c in columns if c in frame.columns and frame.get_column(c).n_unique() == 1]
    return frame.drop(shared), _shared_text(frame, shared)


def sig3(value: float | None) -> str:
    """Three significant digits, trailing zeros kept: ``10.0``, ``9.13``, ``112``."""
    if value is None or value != value:
        return "?"
    return f"{value:#.3g}".rstrip(".")


_TITLES = {
    "budget": "decoding budget (tokens)",
    "total_tokens": "total tokens (prompt + budget)",
    "prompt_tokens": "prompt length (tokens)",
    "latency_s": "latency (s)",
    "decode_s": "decode time (s)",
    "prefill_s": "prefill time (s)",
}


def axis_title(column: str) -> str:
    """Return the axis title of a column, with its unit (``latency (s)``).

    Columns the library does not know keep their name; a name ending in ``_s``
    (seconds, by the trial table's convention) gets ``(s)``.
    """
    if column in _TITLES:
        return _TITLES[column]
    if column.endswith("_s"):
        return f"{column[:-2].replace('_', ' ')} (s)"
    return column


def quantity(column: str) -> str:
    """Name what a column measures, without its unit (``latency``)."""
    return axis_title(column).split(" (")[0]


def level_text(result: object) -> str:
    """``95%``: the confidence level a result's intervals were computed at."""
    params = getattr(result, "params", None) or {}
    level = (
        params.get("level", getattr(result, "level", 0.95)) if isinstance(params, dict) else 0.95
    )
    return f"{100 * float(level):g}%"
