"""The one HTML builder of the package: tables, and the notebook view of a result.

Every HTML table (a result's notebook view, the offline report) comes from
:func:`html_table`, :func:`text_table` and :func:`key_value_table`, a summary's blocks
(:class:`regimes._summary.Summary`) from :func:`summary_blocks`, and a result's view
from :func:`result_view`: Jinja2 templates with autoescaping on, so no cell can break the
markup and no caller writes tags by hand. Cells are formatted once, by
:func:`cell_texts` (floats to four significant digits, nested values as JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import polars as pl

__all__ = [
    "Fold",
    "cell_texts",
    "html_table",
    "key_value_table",
    "plain_text",
    "result_view",
    "summary_blocks",
    "text_table",
]

_ENV = jinja2.Environment(
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined
)

_EMPTY = _ENV.from_string("<p>{{ text }}</p>")

_TABLE = _ENV.from_string(
    """<div class='table'><table>
{% if caption %}<caption>{{ caption }}</caption>{% endif %}
<thead><tr>
{%- for name, num in columns %}
<th scope='col'{% if num %} class=num{% endif %}>{{ name }}</th>
{%- endfor %}
</tr></thead>
<tbody>
{% for row in rows %}<tr>
{%- for text, num in row %}
<td{% if num %} class='num'{% endif %}>{{ text }}</td>
{%- endfor %}
</tr>
{% endfor %}</tbody></table></div>
{% if more %}<p class='more'>{{ more }} more row(s) not shown.</p>{% endif %}"""
)

_KEY_VALUE = _ENV.from_string(
    """<div class='table'><table class='kv'>
{% if caption %}<caption>{{ caption }}</caption>{% endif %}
<tbody>{% for key, value in pairs %}<tr><th scope='row'>{{ key }}</th><td>{{ value }}</td></tr>\
{% endfor %}</tbody></table></div>"""
)

_VIEW = _ENV.from_string(
    """<div class='regimes-result'>
<style>
.regimes-result .table {overflow-x: auto; max-width: 100%}
.regimes-result table {border-collapse: collapse; font-size: 0.9em; margin: 0.3em 0}
.regimes-result th, .regimes-result td {padding: 0.15em 0.6em; text-align: left}
.regimes-result .num {text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap}
.regimes-result p, .regimes-result li {overflow-wrap: break-word}
.regimes-result pre {overflow-x: auto; max-width: 100%}
.regimes-result thead th {border-bottom: 1px solid #999}
.regimes-result caption {text-align: left; color: #555; padding: 0.15em 0}
.regimes-result .status, .regimes-result .more {color: #555; margin: 0.2em 0}
.regimes-result details {margin: 0.3em 0}
.regimes-result img {max-width: 100%; height: auto}
</style>
<h4>{{ title }}</h4>
<p class='status'>{{ status }}</p>
{% if headlines %}<ul class='headlines'>
{% for line in headlines %}<li>{{ line }}</li>
{% endfor %}</ul>
{% endif %}
{% if lead %}<h5>{{ lead.name }}</h5>
{{ lead.body | safe }}
{% endif %}
{% if chart_svg %}<figure>
<img alt='{{ chart_alt }}' src='data:image/svg+xml;base64,{{ chart_svg }}'>
</figure>
{% endif %}
{% for fold in folds %}<details><summary>{{ fold.name }}
{%- if fold.rows is not none %} ({{ fold.rows }} row(s)){% endif %}</summary>
{{ fold.body | safe }}
</details>
{% endfor %}</div>"""
)

_SUMMARY = _ENV.from_string(
    """<div class='summary'>
{% for kind, value in blocks %}
{% if kind == 'title' %}<h5>{{ value }}</h5>
{% elif kind == 'heading' %}<h6>{{ value }}</h6>
{% elif kind == 'text' %}<p>{{ value }}</p>
{% elif kind == 'lines' %}<pre>{{ value }}</pre>
{% else %}{{ value | safe }}
{% endif %}
{% endfor %}</div>"""
)


@dataclass(frozen=True)
class Fold:
    """A named block of a result's view: its HTML and the row count its summary shows.

    ``rows`` is ``None`` for a block that is no table (a result's summary).
    """

    name: str
    body: str
    rows: int | None


def cell_texts(frame: pl.DataFrame) -> pl.DataFrame:
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

    return frame.select([text(c, t) for c, t in frame.schema.items()])


def html_table(
    frame: pl.DataFrame, *, max_rows: int, caption: str = "", empty: str = "None."
) -> str:
    """Render ``frame`` as an HTML table of at most ``max_rows`` rows.

    Numbers are right-aligned in tabular figures, so columns of them line up; a longer
    frame ends with a line saying how many rows were left out.

    Parameters
    ----------
    frame : polars.DataFrame
        The table.
    max_rows : int
        Rows shown at most.
    caption : str, optional
        The table's caption.
    empty : str, default "None."
        What a frame without rows or columns shows instead, as a paragraph.

    Returns
    -------
    str
        The HTML.

    Examples
    --------
    >>> import polars as pl
    >>> page = html_table(pl.DataFrame({"budget": [8, 16], "model": ["<a>", "b"]}), max_rows=1)
    >>> "<td class='num'>8</td><td>&lt;a&gt;</td>" in page, "1 more row(s)" in page
    (True, True)
    """
    if frame.width == 0 or frame.height == 0:
        return _EMPTY.render(text=empty)
    shown = frame.head(max_rows)
    numeric = [t.is_numeric() for t in shown.schema.values()]
    rows = [list(zip(row, numeric, strict=True)) for row in cell_texts(shown).iter_rows()]
    return _TABLE.render(
        columns=list(zip(shown.columns, numeric, strict=True)),
        rows=rows,
        caption=caption,
        more=max(frame.height - max_rows, 0),
    )


def text_table(
    heads: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[bool],
    max_rows: int,
    caption: str = "",
) -> str:
    """Render a table of texts already formatted (a summary's table, :mod:`regimes._summary`).

    Parameters
    ----------
    heads : sequence of str
        The column headings.
    rows : sequence of sequences of str
        The cells, row by row.
    right : sequence of bool
        Per column, whether it is right-aligned (numbers, in tabular figures).
    max_rows : int
        Rows shown at most.
    caption : str, optional
        The table's caption.

    Returns
    -------
    str
        The HTML.
    """
    shown = [list(zip(row, right, strict=True)) for row in rows[:max_rows]]
    return _TABLE.render(
        columns=list(zip(heads, right, strict=True)),
        rows=shown,
        caption=caption,
        more=max(len(rows) - max_rows, 0),
    )


def summary_blocks(blocks: Sequence[tuple[str, str]]) -> str:
    """Render a summary's blocks (:meth:`regimes._summary.Summary.as_html`).

    Each block is ``(kind, value)``: kind ``title``, ``heading``, ``text`` or ``lines``
    (text, escaped), or ``html`` (a table rendered by this module).
    """
    return _SUMMARY.render(blocks=blocks)


def key_value_table(pairs: Iterable[tuple[str, Any]], *, caption: str = "") -> str:
    """Two columns, setting and value, from ``(key, value)`` pairs (``<p>None.</p>`` if none).

    Values print as text; lists and mappings as JSON, ``None`` as an empty cell.
    """
    listed = [(str(k), plain_text(v)) for k, v in pairs]
    if not listed:
        return "<p>None.</p>"
    return _KEY_VALUE.render(pairs=listed, caption=caption)


def result_view(
    *,
    title: str,
    status: str,
    headlines: Sequence[str],
    lead: Fold | None,
    chart_svg: str,
    chart_alt: str,
    folds: Sequence[Fold],
) -> str:
    """Render a result for a notebook: what it found first, the details folded.

    Parameters
    ----------
    title, status : str
        The result's title and its status line.
    headlines : sequence of str
        One sentence per finding.
    lead : Fold or None
        The table shown open (the findings, compact).
    chart_svg, chart_alt : str
        The chart as base64 SVG (``""``: none) and its description; an image shows in
        every notebook viewer, also those that run no JavaScript (GitHub, nbconvert).
    folds : sequence of Fold
        The other tables, each folded in a ``<details>`` element.

    Returns
    -------
    str
        One ``<div>`` with its own scoped styles.
    """
    return _VIEW.render(
        title=title,
        status=status,
        headlines=headlines,
        lead=lead,
        chart_svg=chart_svg,
        chart_alt=chart_alt,
        folds=folds,
    )


def plain_text(value: Any) -> str:
    """Return a value as a cell's text: lists and mappings as JSON, ``None`` as empty."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)
