"""The one summary builder: every result's text, and its notebook view.

Modelled on statsmodels' ``iolib/summary.py``: a result's ``_summary()`` fills a
:class:`Summary` with blocks (a title between rules; a header of ``(name, value)``
pairs in one or two columns, like statsmodels' ``summary_top``; tables of declared
columns (:class:`Column`), like its ``summary_params``; section headings, lines,
wrapped notes and the rows a result could not test), and :meth:`Summary.as_text` lays
them out in fixed width while :meth:`Summary.as_html` writes the same blocks as HTML
through :mod:`regimes._html`. A result's ``summary()`` is ``_summary().as_text()``, and its
``_repr_html_`` is :func:`notebook_view`, which folds that summary's HTML in with the
findings, the chart and the tables.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import polars as pl

from regimes import _html
from regimes._labels import text_label

__all__ = ["VISIBLE_ROWS", "WIDTH", "Column", "Summary", "notebook_view", "number"]

WIDTH = 96
"""Characters a line of a fixed-width summary holds."""

VISIBLE_ROWS = 25
"""Rows a table of a result's notebook view shows at most (the rest is counted)."""

Row = dict[str, Any]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Column:
    """One column of a summary table: its heading, its width and how a row fills it.

    Parameters
    ----------
    head : str
        The heading.
    text : callable
        A row (a mapping of column names to values) to the cell's text.
    width : int, default 0
        The field width; 0: as wide as the text.
    align : {">", "<"}, default ">"
        Right (numbers) or left (names) within the field.
    clip : int, optional
        Cut the text to this many characters first.
    gap : int, default 0
        Spaces before the field.
    """

    head: str
    text: Callable[[Row], str]
    width: int = 0
    align: str = ">"
    clip: int | None = None
    gap: int = 0

    def cell(self, text: str) -> str:
        """Return ``text`` laid out in this column's field."""
        if self.clip is not None:
            text = text[: self.clip]
        return " " * self.gap + f"{text:{self.align}{self.width}}"


def number(name: str, spec: str, prefix: str = "") -> Callable[[Row], str]:
    """Return a number column's cell: ``row[name]`` formatted with ``spec``, after ``prefix``."""
    return lambda row: prefix + format(row[name], spec)


@dataclass
class _Block:
    """One block of a summary: its fixed-width lines and its HTML as (kind, value)."""

    lines: list[str]
    html: tuple[str, str] | None


@dataclass
class Summary:
    """A result's summary, built block by block and rendered as text or HTML.

    Each ``add_*`` method appends a block and returns the summary, so calls chain.

    Parameters
    ----------
    width : int, default :data:`WIDTH`
        Characters per line of the text.

    Examples
    --------
    >>> s = Summary(width=30).add_title("Result").add_pairs([("Groups:", "2")], columns=1)
    >>> print(s.add_lines(["  a line"]).as_text())
    ==============================
                Result
    ==============================
    Groups:        2
      a line
    """

    width: int = WIDTH
    blocks: list[_Block] = field(default_factory=list)

    def _add(self, lines: list[str], html: tuple[str, str] | None) -> Summary:
        self.blocks.append(_Block(lines, html))
        return self

    def add_title(self, title: str) -> Summary:
        """Add a title, centred between rules of ``=``."""
        rule = "=" * self.width
        return self._add([rule, title.center(self.width), rule], ("title", title))

    def add_rule(self, char: str = "-") -> Summary:
        """Add a rule across the width (text only)."""
        return self._add([char * self.width], None)

    def add_heading(self, title: str, *, above: str = "-", below: str | None = "-") -> Summary:
        """Add a section heading, with a rule of ``above`` before it and of ``below`` after."""
        lines = [above * self.width, title] if above else [title]
        if below:
            lines.append(below * self.width)
        return self._add(lines, ("heading", title))

    def add_pairs(self, pairs: Sequence[tuple[str, str]], *, columns: int = 2) -> Summary:
        """Add a header of ``(name, value)`` pairs (statsmodels' ``summary_top``).

        With ``columns=2`` the first half of the pairs fills the left column and the
        rest the right, each name in 15 characters and each value right-aligned in 31.
        With ``columns=1`` each value follows its name, wrapped to the width; pairs of
        empty text are left out.
        """
        if columns == 2:
            half = (len(pairs) + 1) // 2

            def cell(i: int) -> str:
                return f"{pairs[i][0]:<15}{pairs[i][1]:>31}" if i < len(pairs) else ""

            lines = [f"{cell(i)}    {cell(i + half)}".rstrip() for i in range(half)]
        else:
            lines = []
            for name, text in pairs:
                wrapped = textwrap.wrap(text, self.width - 15) or [""]
                lines += [
                    f"{name if k == 0 else '':<15}{part}".rstrip() for k, part in enumerate(wrapped)
                ]
            lines = [line for line in lines if line]
        kept = [(name, text) for name, text in pairs if name or text]
        return self._add(lines, ("html", _html.key_value_table(kept)))

    def add_table(
        self,
        rows: Iterable[Row],
        columns: Sequence[Column],
        *,
        empty: str,
        indent: str = "",
        details: Callable[[Row], list[str]] | None = None,
    ) -> Summary:
        """Add a table of declared columns (statsmodels' ``summary_params``).

        Parameters
        ----------
        rows : iterable of mappings
            One per table row.
        columns : sequence of Column
            The columns, in order; the heading line lays out their ``head``.
        empty : str
            The line written instead of the table when there are no rows.
        indent : str, default ""
            Put before every line.
        details : callable, optional
            A row to the lines written under it (already indented).
        """
        listed = list(rows)
        if not listed:
            return self._add([indent + empty], ("text", empty))
        heads = [c.head for c in columns]
        right = [c.align == ">" for c in columns]
        lines = [indent + "".join(c.cell(c.head) for c in columns)]
        cells, notes = [], []
        for row in listed:
            texts = [c.text(row) for c in columns]
            cells.append([t.strip() for t in texts])
            lines.append(indent + "".join(c.cell(t) for c, t in zip(columns, texts, strict=True)))
            below = details(row) if details is not None else []
            lines += below
            notes.append("; ".join(line.strip() for line in below))
        if any(notes):  # the lines under each row, in a last column of the HTML
            heads, right = [*heads, "details"], [*right, False]
            cells = [[*texts, note] for texts, note in zip(cells, notes, strict=True)]
        table = _html.text_table(heads, cells, right=right, max_rows=VISIBLE_ROWS)
        return self._add(lines, ("html", table))

    def add_lines(self, lines: Sequence[str]) -> Summary:
        """Add lines as they are (indented by the caller)."""
        if not lines:
            return self
        return self._add(list(lines), ("lines", "\n".join(lines)))

    def add_rows(
        self,
        rows: Iterable[_T],
        line: Callable[[_T], str],
        *,
        empty: str | None = None,
        indent: str = "  ",
    ) -> Summary:
        """Add one indented line per row, or ``empty`` when there is none (if given)."""
        texts = [line(row) for row in rows] or ([] if empty is None else [empty])
        return self.add_lines([indent + text for text in texts])

    def add_listing(
        self,
        head: str,
        frame: pl.DataFrame,
        line: Callable[[Row], str],
        *,
        empty: str,
        untested: pl.DataFrame | None = None,
    ) -> Summary:
        """Add a heading, then one indented line per row of ``frame`` (or ``empty``).

        With ``untested`` (a result's table of what could not be tested and why), its
        rows follow under "not testable here", so that the summary never reads as "none
        found" when the question could not be asked.
        """
        self.add_heading(head, above="", below=None)
        self.add_rows(frame.iter_rows(named=True), line, empty=empty)
        if untested is not None:
            self.add_untested(untested, head="  not testable here:", indent="    ")
        return self

    def wrap(self, text: str, *, indent: str = "", subsequent: str | None = None) -> list[str]:
        """Return ``text`` wrapped to the width (``indent`` first, ``subsequent`` after)."""
        return textwrap.wrap(
            text,
            self.width,
            initial_indent=indent,
            subsequent_indent=indent if subsequent is None else subsequent,
        )

    def add_wrapped(self, text: str, *, indent: str = "", subsequent: str | None = None) -> Summary:
        """Add a paragraph wrapped to the width (:meth:`wrap`)."""
        return self._add(self.wrap(text, indent=indent, subsequent=subsequent), ("text", text))

    def add_untested(
        self,
        untested: pl.DataFrame,
        *,
        head: str | None,
        columns: Sequence[str] | None = None,
        indent: str = "  ",
        label: Callable[[Row], str] | None = None,
    ) -> Summary:
        """Add the rows a result could not test: ``label: reason`` under ``head``.

        The label is :func:`regimes._labels.text_label` of ``columns`` (default: every
        column but ``reason``) unless ``label`` is given; nothing is added without rows.
        """
        if untested.height == 0:
            return self
        shown = [c for c in untested.columns if c != "reason"] if columns is None else columns

        def named(row: Row) -> str:
            return label(row) if label is not None else text_label(row, shown)

        lines = [] if head is None else [head]
        rows = untested.iter_rows(named=True)
        lines += [f"{indent}{named(row)}: {row['reason']}" for row in rows]
        return self.add_lines(lines)

    def add_summary(self, other: Summary) -> Summary:
        """Add every block of another summary (a part, such as the detection's)."""
        self.blocks.extend(other.blocks)
        return self

    def as_text(self) -> str:
        """Return the summary as fixed-width text."""
        return "\n".join(line for block in self.blocks for line in block.lines)

    def as_html(self) -> str:
        """Return the summary as HTML: headings, tables and paragraphs (no rules)."""
        return _html.summary_blocks([b.html for b in self.blocks if b.html is not None])

    def __str__(self) -> str:
        return self.as_text()


def notebook_view(result: Any) -> str:
    """Return a result's notebook view: headlines, the findings open, the chart, the rest folded.

    The first of the result's tables shows open and compact (its ``_lead_frame``), the
    others, the untested groups, the parameters and the summary (:meth:`Summary.as_html`)
    each fold in a ``<details>`` element; each table shows at most
    :data:`VISIBLE_ROWS` rows. Built by :func:`regimes._html.result_view`.
    """
    tables = result.tables
    lead = None
    if result._tables:
        name = result._tables[0]
        frame = tables.pop(name)
        rows, caption = result._lead_frame(frame)
        body = _html.html_table(
            rows, max_rows=VISIBLE_ROWS, caption=caption, empty=result._empty_text()
        )
        lead = _html.Fold(name, body, frame.height)
    folds = [
        _html.Fold(name, _html.html_table(frame, max_rows=VISIBLE_ROWS), frame.height)
        for name, frame in tables.items()
    ]
    untested = getattr(result, "untested", None)
    if isinstance(untested, pl.DataFrame) and untested.height:
        body = _html.html_table(untested, max_rows=VISIBLE_ROWS)
        folds.append(_html.Fold("untested", body, untested.height))
    params = dict(getattr(result, "params", {}))
    folds.append(_html.Fold("params", _html.key_value_table(params.items()), len(params)))
    folds.append(_html.Fold("summary", result._summary().as_html(), None))
    svg, alt = result._chart_svg()
    return _html.result_view(
        title=result._title,
        status=result.status,
        headlines=result._headlines(),
        lead=lead,
        chart_svg=svg,
        chart_alt=alt,
        folds=folds,
    )
