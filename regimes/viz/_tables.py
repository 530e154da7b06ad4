"""HTML tables of the report: frames, key-value settings, anomalies with their CIs.

The markup itself comes from the package's one builder, :mod:`regimes._html`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from regimes import _html
from regimes._labels import split_shared
from regimes.viz._frames import ratio_label

MAX_TABLE_ROWS = 200


def escape(value: Any) -> str:
    """Text safe inside HTML elements and attribute values."""
    return html.escape(str(value), quote=True)


def html_table(frame: pl.DataFrame, *, caption: str = "") -> str:
    """Render a report table (:func:`regimes._html.html_table`); long tables are cut."""
    return _html.html_table(frame, max_rows=MAX_TABLE_ROWS, caption=caption)


def group_table(frame: pl.DataFrame, group_columns: Sequence[str]) -> str:
    """Render a table whose group columns holding one value are said once, as its caption."""
    rows, caption = split_shared(frame, group_columns)
    return html_table(rows, caption=caption)


def key_value_table(pairs: Iterable[tuple[str, Any]], *, caption: str = "") -> str:
    """Two columns, setting and value, from ``(key, value)`` pairs."""
    return _html.key_value_table(pairs, caption=caption)


def flatten(meta: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested metadata as ``(dotted.key, text)`` pairs."""
    out: list[tuple[str, str]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += flatten(value, f"{name}.")
        else:
            out.append((name, _html.plain_text(value)))
    return out


def interval_table(frame: pl.DataFrame | None, group_columns: Sequence[str]) -> str:
    """Anomalies or collapses: group, interval, ``×ratio [CI]`` first, then the rest.

    Group columns that hold one value in every row are named once, in the caption.
    """
    if frame is None or frame.height == 0:
        return "<p>None significant.</p>"
    keys = [c for c in group_columns if c in frame.columns]
    shown = frame.with_columns(ratio_label("ratio", "ratio_low", "ratio_high").alias("ratio [CI]"))
    leading = [*keys, "start", "end", "ratio [CI]"]
    rest = [
        c
        for c in shown.columns
        if c not in leading and c not in ("ratio", "ratio_low", "ratio_high")
    ]
    return group_table(shown.select([*leading, *rest]), keys)


def result_tables(result: Any) -> str:
    """Every table of an analysis result, each under its name, its shared group once."""
    tables = getattr(result, "tables", None)
    if not isinstance(tables, dict):
        tables = {
            name: frame
            for name in ("phases", "comparisons", "verdicts", "effects", "boundaries", "positions")
            if isinstance(frame := getattr(result, name, None), pl.DataFrame)
        }
    groups = [str(c) for c in getattr(result, "group_columns", ())]
    return "".join(
        f"<h4>{escape(name)}</h4>{group_table(frame, groups)}"
        for name, frame in tables.items()
        if isinstance(frame, pl.DataFrame)
    )
