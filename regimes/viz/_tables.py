"""HTML tables of the report: frames, key-value settings, anomalies with their CIs."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from regimes.viz._frames import ratio_label

MAX_TABLE_ROWS = 200


def escape(value: Any) -> str:
    """Text safe inside HTML elements and attribute values."""
    return html.escape(str(value), quote=True)


def _as_text(shown: pl.DataFrame) -> pl.DataFrame:
    """Every cell as text: floats to four significant digits, nested values as JSON."""

    def text(column: str, dtype: pl.DataType) -> pl.Expr:
        col = pl.col(column)
        if dtype.is_float():
            return (
                col.fill_nan(None)
                .map_elements(lambda v: f"{v:.4g}", return_dtype=pl.String)
                .fill_null("")
                .alias(column)
            )
        if dtype.is_numeric() or dtype in (pl.String, pl.Boolean):
            return col.cast(pl.String).fill_null("").alias(column)
        return col.map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String).alias(
            column
        )

    return shown.select([text(c, t) for c, t in shown.schema.items()])


def html_table(frame: pl.DataFrame, *, caption: str = "") -> str:
    """Render a plain HTML table in a scrolling wrapper; long tables are cut.

    Numbers are right-aligned in tabular figures, so columns of them line up.
    """
    if frame.width == 0 or frame.height == 0:
        return "<p>None.</p>"
    shown = frame.head(MAX_TABLE_ROWS)
    numeric = {c for c, t in shown.schema.items() if t.is_numeric()}
    head = "".join(
        f"<th scope='col'{' class=num' if c in numeric else ''}>{escape(c)}</th>"
        for c in shown.columns
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td class='num'>{escape(v)}</td>" if c in numeric else f"<td>{escape(v)}</td>"
            for c, v in zip(shown.columns, row, strict=True)
        )
        + "</tr>"
        for row in _as_text(shown).iter_rows()
    )
    more = (
        f"<p class='more'>{frame.height - MAX_TABLE_ROWS} more row(s) not shown.</p>"
        if frame.height > MAX_TABLE_ROWS
        else ""
    )
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (
        f"<div class='table'><table>{cap}<thead><tr>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>{more}"
    )


def key_value_table(pairs: Iterable[tuple[str, Any]], *, caption: str = "") -> str:
    """Two columns, setting and value, from ``(key, value)`` pairs."""
    rows = "".join(
        f"<tr><th scope='row'>{escape(k)}</th><td>{escape(_plain(v))}</td></tr>" for k, v in pairs
    )
    if not rows:
        return "<p>None.</p>"
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<div class='table'><table class='kv'>{cap}<tbody>{rows}</tbody></table></div>"


def _plain(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def flatten(meta: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested metadata as ``(dotted.key, text)`` pairs."""
    out: list[tuple[str, str]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += flatten(value, f"{name}.")
        else:
            out.append((name, _plain(value)))
    return out


def interval_table(frame: pl.DataFrame | None, group_columns: Sequence[str]) -> str:
    """Anomalies or collapses: group, interval, ``×ratio [CI]`` first, then the rest."""
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
    return html_table(shown.select([*leading, *rest]))


def result_tables(result: Any) -> str:
    """Every table of an analysis result, each under its name."""
    tables = getattr(result, "tables", None)
    if not isinstance(tables, dict):
        tables = {
            name: frame
            for name in ("phases", "comparisons", "verdicts", "effects", "boundaries", "positions")
            if isinstance(frame := getattr(result, name, None), pl.DataFrame)
        }
    return "".join(
        f"<h4>{escape(name)}</h4>{html_table(frame)}"
        for name, frame in tables.items()
        if isinstance(frame, pl.DataFrame)
    )
