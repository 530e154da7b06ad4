"""The protocol every analysis result follows.

A result is a frozen dataclass whose tables are polars frames. Subclasses declare
``_tables`` (the frame attributes, in display order) and ``_title``, carry ``params``
(the call's arguments) and ``untested`` (the groups that could not be tested, with the
reason), and write ``_summary()`` (a :class:`regimes._summary.Summary`). This base
gives them the rest, the same way for every analysis: ``summary()``, a short
``__repr__``, ``_repr_html_`` for notebooks, ``to_dict()`` and ``to_json()``, and
``status``, which tells "tested, none found" from "not testable here".

Tables in the caller's library
------------------------------
Every result stores its tables as polars, and the analyses, charts and summaries read
them as polars. ``native`` names the library of the dataframe the user passed in
(``"polars"``, ``"pandas"``, ``"pyarrow"``, ``"modin"``, ...; ``None``: that of the
result's ``source`` when it keeps one, else polars; a path or a run gives polars).
Reading a table attribute (``rep.curve``) or ``tables`` from code outside this package
converts it to that library, once per table (the copy is kept); code inside the package,
and ``dataclasses.replace``, always read polars. The reader is told apart by the module
of the calling frame: that keeps the conversion in this one place, instead of a
``to_polars()`` at every place in the package that reads a result, and a result looks
the same to every internal reader whatever the user passed. ``to_polars()`` and
``to_pandas()`` return the same result with its tables in that library.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, ClassVar

import polars as pl

from regimes._labels import split_shared
from regimes._summary import Summary, notebook_view

__all__ = ["INTERVAL_LEAD_COLUMNS", "AnalysisResult", "native_library", "untested_frame"]

_STORAGE_READERS = ("regimes", "collectors", "dataclasses", "copy")
"""Top-level modules whose code reads result tables as stored (polars): this package's,
and the standard library's that copy a result field by field (``dataclasses.replace``)."""

INTERVAL_LEAD_COLUMNS = ("start", "end", "ratio", "ratio_low", "ratio_high", "q_value", "kind")
"""What the notebook view shows open of a table of intervals (anomalies, collapses)."""


def untested_frame(rows: Sequence[Mapping[str, Any]], group_columns: Sequence[str]) -> pl.DataFrame:
    """Build the ``untested`` table: one row per group that could not be tested.

    Parameters
    ----------
    rows : sequence of mappings
        Each holds the group's values of ``group_columns`` and a ``reason``.
    group_columns : sequence of str
        The columns that identify a group.

    Returns
    -------
    polars.DataFrame
        ``group_columns`` then ``reason`` (str); empty, with that schema, when every
        group was tested.
    """
    columns = [*group_columns, "reason"]
    if not rows:
        return pl.DataFrame(schema={c: pl.String for c in columns})
    return pl.DataFrame([{c: row.get(c) for c in columns} for row in rows])


def native_library(df: Any) -> str:
    """Name the dataframe library of ``df``: ``"polars"`` unless narwhals reads it eagerly.

    Lazy frames of other libraries (DuckDB, Ibis, ...) and anything that is not a
    dataframe (a path, a run) give ``"polars"``: results come back as polars then.

    Examples
    --------
    >>> import pandas as pd
    >>> native_library(pd.DataFrame({"budget": [8]})), native_library("runs/m3max")
    ('pandas', 'polars')
    """
    if df is None or isinstance(df, (pl.DataFrame, pl.LazyFrame, str)):
        return "polars"
    import narwhals as nw

    try:
        frame = nw.from_native(df, eager_only=True)
    except TypeError:
        return "polars"
    return str(frame.implementation.value)


def to_native(frame: pl.DataFrame, library: str) -> Any:
    """Convert a polars frame to ``library`` (a name :func:`native_library` returns)."""
    if library == "polars":
        return frame
    if library == "pandas":
        return frame.to_pandas()
    if library == "pyarrow":
        return frame.to_arrow()
    import narwhals as nw

    # modin, cuDF, ...: narwhals builds them from arrow; the name is one native_library gave
    backend: Any = library
    return nw.from_arrow(frame.to_arrow(), backend=backend).to_native()


def _reads_storage(caller: FrameType | None) -> bool:
    """Whether ``caller`` runs code of :data:`_STORAGE_READERS` (reads tables as polars)."""
    name = caller.f_globals.get("__name__", "") if caller is not None else ""
    return str(name).split(".")[0] in _STORAGE_READERS


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, float):
        return value
    return str(value)


@dataclass(frozen=True, repr=False)
class AnalysisResult:
    """Base class of every analysis result (frozen; see the module docstring)."""

    _tables: ClassVar[tuple[str, ...]] = ()
    _title: ClassVar[str] = "Result"

    native: str | None = field(default=None, kw_only=True, compare=False, repr=False)
    """The caller's dataframe library; ``None``: that of ``source`` when the result keeps
    it, else polars (see the module docstring)."""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name.startswith("_") or not (type(value) is pl.DataFrame or name == "tables"):
            return value
        library = object.__getattribute__(self, "_library")()
        if library == "polars" or _reads_storage(sys._getframe(1)):
            return value
        convert = object.__getattribute__(self, "_converted")
        if name == "tables":
            return {table: convert(table, frame, library) for table, frame in value.items()}
        return convert(name, value, library)

    def _library(self) -> str:
        """``native``, or the library of ``source`` when ``native`` is unset (kept once)."""
        kept: dict[str, Any] = object.__getattribute__(self, "__dict__")
        if "_library_name" not in kept:
            native = object.__getattribute__(self, "native")
            kept["_library_name"] = native or native_library(kept.get("source"))
        return str(kept["_library_name"])

    def _converted(self, name: str, frame: pl.DataFrame, library: str) -> Any:
        """``frame`` in ``library``, converted once per table and kept."""
        cache: dict[str, Any] = self.__dict__.setdefault("_native_tables", {})
        if name not in cache:
            cache[name] = to_native(frame, library)
        return cache[name]

    def to_polars(self) -> AnalysisResult:
        """Return this result with its tables read as polars frames (no copy is made)."""
        return dataclasses.replace(self, native="polars")

    def to_pandas(self) -> AnalysisResult:
        """Return this result with its tables read as pandas frames."""
        return dataclasses.replace(self, native="pandas")

    def summary(self) -> str:
        """Return the readable text summary of the result (:meth:`_summary` as text)."""
        return self._summary().as_text()

    def _summary(self) -> Summary:
        """Return the result's summary, block by block (:class:`regimes._summary.Summary`)."""
        raise NotImplementedError

    @property
    def tables(self) -> dict[str, Any]:
        """The result's tables by name, in display order, in the caller's library."""
        return {name: getattr(self, name) for name in self._tables}

    @property
    def status(self) -> str:
        """One line: what was tested, and what could not be (with the reasons)."""
        untested = getattr(self, "untested", None)
        if untested is None or untested.height == 0:
            return "tested"
        reasons = sorted(set(untested.get_column("reason").to_list()))
        return f"{untested.height} group(s) not testable here: " + "; ".join(reasons)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={frame.height}" for name, frame in self.tables.items())
        return f"{type(self).__name__}({sizes}; {self.status})"

    def _repr_html_(self) -> str:
        """Return the notebook view: headlines, the findings open, the chart, the rest folded.

        Built by :func:`regimes._summary.notebook_view`; each table shows at most
        :data:`regimes._summary.VISIBLE_ROWS` rows.
        """
        return notebook_view(self)

    _lead_columns: ClassVar[tuple[str, ...] | None] = None
    """Columns of the first table that the notebook view shows open (after the group
    columns); ``None``: all of them."""

    def _lead_frame(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, str]:
        """Return the first table, compact, with :attr:`_lead_columns`, and its caption.

        Of the group columns only those that tell its rows apart stay in the rows; those
        that hold one value are named once, in the caption (:func:`split_shared`).
        """
        groups = [str(c) for c in getattr(self, "group_columns", ())]
        rows, caption = split_shared(frame, groups)
        if self._lead_columns is None:
            return rows, caption
        wanted = dict.fromkeys([*groups, *self._lead_columns])
        return rows.select([c for c in wanted if c in rows.columns]), caption

    _explanation: ClassVar[bool] = False
    """Whether the headlines are the report's sentences of an explanation's main table
    (phases, backends, memory, alignment)."""

    def _headlines(self) -> list[str]:
        """Return one sentence per finding, for the notebook view.

        An explanation's are the report's sentences of its main table; other results
        override this, or have none.
        """
        if not self._explanation:
            return []
        from regimes._findings import explanation_findings

        return explanation_findings(self)

    def _empty_text(self) -> str:
        """Return what the notebook view says when the first table has no rows."""
        return "None found."

    def _chart_svg(self) -> tuple[str, str]:
        """Return the chart as base64 SVG with its description; ``("", "")`` if none."""
        import base64

        from regimes.errors import RegimesInputError
        from regimes.viz._save import static_svg

        try:
            spec = self.chart().to_dict()
        except RegimesInputError:  # no chart for this result, or one it cannot draw
            return "", ""
        svg = static_svg(spec)
        encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return encoded, str(spec.get("description", self._title))

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-safe Python objects.

        Returns
        -------
        dict
            ``result`` (the class name), ``status``, ``params`` and one list of row
            records per table; non-finite floats become ``None``, ``"inf"`` or
            ``"-inf"``.
        """
        out: dict[str, Any] = {
            "result": type(self).__name__,
            "status": self.status,
            "params": _json_safe(dict(getattr(self, "params", {}))),
        }
        for name, frame in self.tables.items():
            out[name] = _json_safe(frame.to_dicts())
        untested = getattr(self, "untested", None)
        if untested is not None and "untested" not in out:
            out["untested"] = _json_safe(untested.to_dicts())
        return out

    def chart(self, df: Any = None, **options: Any) -> Any:
        """Return the library's full chart of this result (an Altair chart).

        Parameters
        ----------
        df : polars.DataFrame or pandas.DataFrame, optional
            The trial table, for charts that draw trials; default: the result's own
            ``trials`` when it keeps them.
        **options
            Passed to the chart function (see :func:`regimes.viz.result_chart`).

        Returns
        -------
        altair.TopLevelMixin
            The chart; a notebook renders it, :func:`regimes.plot.save` writes it.
        """
        from regimes.viz import result_chart  # altair loads only when a chart is drawn

        return result_chart(self, df, **options)

    def to_json(self, indent: int | None = 2) -> str:
        """Return :meth:`to_dict` as a JSON string (stable key order)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
