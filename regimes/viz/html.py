"""One offline HTML report of a run: the findings first, then charts, tables and data.

:func:`build_report` draws a :class:`regimes.analysis.RunAnalysis` (it runs no analysis:
:func:`regimes.analyze` does) and returns a :class:`RunReport`; :meth:`RunReport.write`
renders it to a single HTML file that needs no network when it is opened: the Vega,
Vega-Lite and vega-embed libraries are inlined (vl-convert's JavaScript bundle), and
every chart's data travels inside its spec. The page reads like a finding: plain
sentences with their numbers on top, a table of contents, charts at the full width of
the page (one panel per row on a phone), tables as HTML tables, and the environment
folded away at the end.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from regimes import _findings
from regimes._findings import headlines, result_summary
from regimes._summary import Summary
from regimes.analysis import Explanation, RunAnalysis
from regimes.errors import RegimesInputError
from regimes.viz import _page
from regimes.viz import charts as plot
from regimes.viz._explanations import explanation_charts
from regimes.viz._frames import group_labels, report_axes
from regimes.viz._save import html_page
from regimes.viz._sections import (
    ChartSection,
    Refinement,
    chart_sections,
    refinement_section,
)
from regimes.viz._tables import (
    escape,
    flatten,
    html_table,
    interval_table,
    key_value_table,
    result_tables,
)

__all__ = [
    "ChartSection",
    "Explanation",
    "Refinement",
    "RunReport",
    "build_report",
    "headlines",
    "result_summary",
]


@dataclass
class RunReport:
    """What a report shows of a run's analysis; :meth:`to_html` renders it.

    Attributes
    ----------
    analysis : RunAnalysis
        The analysis drawn (:func:`regimes.analyze`).
    title : str
        The page's title.
    charts : list of ChartSection
        The charts, in page order.
    notes : list of str
        What was left out and why: the analysis's notes, then the drawing's.
    refinement : Refinement or None
        The boundary refinement read back (``result``, a :class:`regimes.RefineResult`,
        and its ``chart``), when the analysis holds one.
    explanation_charts : dict
        Each explanation's chart, by its key.
    """

    analysis: RunAnalysis
    title: str
    charts: list[ChartSection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refinement: Refinement | None = None
    explanation_charts: dict[str, alt.TopLevelMixin] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        """The run's metadata (environment, provenance, the sweep's specification)."""
        return self.analysis.run.meta

    @property
    def trials(self) -> pl.DataFrame:
        """The measured trials analysed (warm-ups excluded)."""
        frame: pl.DataFrame = self.analysis.trials
        return frame

    @property
    def regimes(self) -> Any:
        """The detection (a :class:`regimes.RegimeResult`)."""
        return self.analysis.detection

    @property
    def speedup(self) -> Any:
        """The KV-cache speedup, when both cache settings were measured, else ``None``."""
        return self.analysis.speedup

    @property
    def comparison(self) -> Any:
        """The comparison with the base run, when the analysis has one, else ``None``."""
        return self.analysis.comparison

    @property
    def errors(self) -> pl.DataFrame | None:
        """The cases that raised during the sweep."""
        return self.analysis.run.errors

    @property
    def explanations(self) -> list[Explanation]:
        """The explanations the data supported, in page order."""
        return list(self.analysis.explanations)

    @property
    def x(self) -> str:
        """The x column of the detection."""
        return report_axes(self.regimes)[0]

    @property
    def y(self) -> str:
        """The measured quantity of the detection."""
        return report_axes(self.regimes)[1]

    @property
    def group_columns(self) -> list[str]:
        """The columns that identify a group."""
        return report_axes(self.regimes)[2]

    # ----------------------------------------------------------------- text

    def headlines(self) -> list[str]:
        """One terse line per finding (each anomaly, each speedup collapse)."""
        return self.analysis.headlines()

    def findings(self) -> list[str]:
        """Return the findings in plain sentences with their numbers."""
        return self.analysis.findings()

    def summary(self) -> str:
        """Return the findings and the detection summary as plain text."""
        return self._summary().as_text()

    def _summary(self) -> Summary:
        """Return the report's title and findings, then the detection's summary."""
        out = Summary().add_heading(self.title, above="", below=None)
        out.add_rows(self.findings(), str).add_lines([""])
        return out.add_summary(self.regimes._summary())

    # ----------------------------------------------------------------- output

    def to_html(self) -> str:
        """Return the whole report as one self-contained HTML document."""
        specs = {f"chart-{key}": chart.to_dict() for key, chart in self.figures()}
        body = [
            f"<header><h1>{escape(self.title)}</h1><p class='sub'>{escape(self._byline())}</p>"
            "</header>",
            _page.contents(self._contents()),
            self._findings_html(),
            self._charts_html(),
            self._refinement_html(),
            self._explanations_html(),
            self._tables_html(),
            self._data_html(),
            self._environment_html(),
        ]
        return html_page(self.title, body, specs)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_html` to ``path``, atomically; return the path written."""
        target = Path(path)
        text = self.to_html()
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            raise RegimesInputError(f"cannot write {str(target)!r}: {exc.strerror}") from None
        return target

    def write_images(self, directory: str | os.PathLike[str], fmt: str = "png") -> list[Path]:
        """Save every chart as ``<key>.<fmt>`` (png or svg) in ``directory``."""
        if fmt not in ("png", "svg"):
            raise RegimesInputError(f"image format must be 'png' or 'svg', got {fmt!r}")
        out = Path(directory)
        return [plot.save(chart, out / f"{key}.{fmt}") for key, chart in self.figures()]

    # ----------------------------------------------------------------- sections

    def figures(self) -> list[tuple[str, alt.TopLevelMixin]]:
        """Return every chart of the page as ``(key, chart)``, in page order.

        The charts come first, then the refinement's (keyed ``refine``), then the
        explanations' charts (keyed ``explain-<key>``).
        """
        charts = [(s.key, s.chart) for s in self.charts]
        if self.refinement is not None:
            charts.append(("refine", self.refinement.chart))
        drawn = self.explanation_charts
        charts += [(f"explain-{e.key}", drawn[e.key]) for e in self.explanations if e.key in drawn]
        return charts

    def _byline(self) -> str:
        device = self.meta.get("environment", {}).get("device") or ", ".join(
            sorted({str(d) for d in self.trials.get_column("device").unique().to_list()})
            if "device" in self.trials.columns
            else []
        )
        parts = [f"{self.trials.height} measured trials", device]
        parts.append(f"generated {_now()} by regimes {_version()}")
        return " · ".join(p for p in parts if p)

    def _contents(self) -> list[tuple[str, str, list[tuple[str, str]]]]:
        sections: list[tuple[str, str, list[tuple[str, str]]]] = [("findings", "Findings", [])]
        sections.append(("charts", "Charts", [(f"figure-{s.key}", s.title) for s in self.charts]))
        if self.refinement is not None:
            sections.append(("refinement", "Boundary refinement", []))
        if self.explanations:
            explained = [(f"explain-{e.key}", e.title) for e in self.explanations]
            sections.append(("explanations", "What the anomalies go with", explained))
        sections += [("tables", "Tables", []), ("data", "Data", [])]
        sections.append(("environment", "Environment", []))
        return sections

    def _findings_html(self) -> str:
        items = "".join(f"<li>{escape(line)}</li>" for line in self.findings())
        notes = "".join(f"<li>{escape(n)}</li>" for n in self.notes)
        return (
            "<section id='findings'><h2>Findings</h2>"
            f"<div class='findings'><ol>{items}</ol></div>"
            + (f"<ul class='notes'>{notes}</ul>" if notes else "")
            + "</section>"
        )

    def _charts_html(self) -> str:
        blocks = [_page.figure(s.key, s.title, s.caption, "h3") for s in self.charts]
        return "<section id='charts'><h2>Charts</h2>" + "".join(blocks) + "</section>"

    def _refinement_html(self) -> str:
        if self.refinement is None:
            return ""
        result = self.refinement.result
        cost = result.cost() or ""
        return (
            "<section id='refinement'><h2>Boundary refinement</h2>"
            f"<p>The probes this run holds off its grid, read back: {escape(cost)}</p>"
            + _page.figure("refine", "", self.refinement.caption, "h3")
            + html_table(result.boundaries, caption="Boundaries, each to its refined bracket")
            + f"<details><summary>Probes ({result.probes.height})</summary>"
            + html_table(result.probes)
            + "</details></section>"
        )

    def _explanations_html(self) -> str:
        if not self.explanations:
            return ""
        labels = group_labels(self.regimes.curve, self.group_columns)[0]
        parts = ["<section id='explanations'><h2>What the anomalies go with</h2>"]
        for item in self.explanations:
            found = _findings.explanation_findings(item.result, labels)
            sentences = "".join(f"<li>{escape(s)}</li>" for s in found)
            parts.append(f"<h3 id='explain-{escape(item.key)}'>{escape(item.title)}</h3>")
            parts.append(f"<ul>{sentences}</ul>" if sentences else "")
            if item.key in self.explanation_charts:
                parts.append(_page.figure(f"explain-{item.key}", "", "", "h4"))
            parts.append(
                f"<details><summary>Tables</summary>{result_tables(item.result)}</details>"
            )
        parts.append("</section>")
        return "".join(parts)

    def _tables_html(self) -> str:
        rep = self.regimes
        parts = ["<section id='tables'><h2>Tables</h2><h3>Detection</h3>"]
        parts.append(key_value_table(_settings(rep), caption="What was analysed, and how"))
        parts.append("<h4>Anomalies</h4>" + interval_table(rep.anomalies, self.group_columns))
        parts.append(_change_point_table(rep))
        groups = getattr(rep, "groups", None)
        if isinstance(groups, pl.DataFrame):
            parts.append("<h4>Groups</h4>" + html_table(groups))
        if self.comparison is not None:
            parts.append("<h3>Against the base run</h3>" + result_tables(self.comparison))
        if self.speedup is not None:
            keys = [c for c in self.group_columns if c != "use_cache"]
            parts.append("<h3>KV-cache speedup</h3>")
            parts.append(key_value_table(_settings(self.speedup), caption="Settings"))
            parts.append("<h4>Collapses</h4>" + interval_table(self.speedup.collapses, keys))
            parts.append(
                "<details><summary>Speedup per budget</summary>"
                + html_table(self.speedup.speedup)
                + "</details>"
            )
        parts.append("</section>")
        return "".join(parts)

    def _data_html(self) -> str:
        per_group = _per_group(self.trials, self.group_columns, self.x)
        parts = [
            "<section id='data'><h2>Data</h2>",
            f"<p>{self.trials.height} measured trials (warm-ups excluded) in "
            f"{per_group.height} group(s).</p>",
            html_table(per_group),
        ]
        if self.errors is not None and self.errors.height:
            parts.append(f"<h3>Cases that raised ({self.errors.height})</h3>")
            parts.append(html_table(self.errors.drop("traceback", strict=False)))
        parts.append("</section>")
        return "".join(parts)

    def _environment_html(self) -> str:
        meta = dict(self.meta)
        spec = meta.pop("spec", None)
        pairs = flatten(meta)
        parts = ["<section id='environment'><h2>Environment</h2>"]
        parts.append(
            f"<details><summary>Machine, versions and provenance ({len(pairs)} entries)"
            f"</summary>{key_value_table(pairs)}</details>"
            if pairs
            else "<p>The run carries no metadata.</p>"
        )
        if spec is not None:
            parts.append(
                "<details><summary>Sweep specification</summary><pre>"
                + escape(json.dumps(spec, indent=2, default=str))
                + "</pre></details>"
            )
        parts.append("</section>")
        return "".join(parts)


def _settings(result: Any) -> list[tuple[str, Any]]:
    """List what a result analysed (x, y, groups) and the parameters it was given."""
    pairs: list[tuple[str, Any]] = [
        (name, getattr(result, name))
        for name in ("x", "y", "group_columns")
        if getattr(result, name, None) is not None
    ]
    params = getattr(result, "params", None) or {}
    return pairs + [(k, v) for k, v in params.items() if k not in ("x", "y")]


def _change_point_table(rep: Any) -> str:
    change_points = getattr(rep, "change_points", None)
    if not isinstance(change_points, pl.DataFrame):
        return ""
    tested = change_points.height
    if "significant" in change_points.columns:
        change_points = change_points.filter(pl.col("significant"))
    return (
        f"<h4>Change points</h4><p>{change_points.height} significant of {tested} tested.</p>"
        + html_table(change_points)
    )


def _per_group(trials: pl.DataFrame, keys: list[str], x: str) -> pl.DataFrame:
    sessions = (
        [pl.col("session").n_unique().alias("sessions")] if "session" in trials.columns else []
    )
    return (
        trials.group_by(keys or pl.lit(1).alias("_all"), maintain_order=True)
        .agg(
            pl.col(x).n_unique().alias(f"{x} values"),
            pl.col(x).min().alias(f"min {x}"),
            pl.col(x).max().alias(f"max {x}"),
            pl.len().alias("trials"),
            *sessions,
        )
        .sort(keys or "_all")
        .drop("_all", strict=False)
    )


# --------------------------------------------------------------------------- building


def build_report(
    analysis: RunAnalysis,
    *,
    max_panels: int = 12,
    heatmap_min_groups: int = 4,
    title: str | None = None,
) -> RunReport:
    """Draw a run's analysis: the charts, tables and sentences of its report.

    Parameters
    ----------
    analysis : RunAnalysis
        The analysis to draw (:func:`regimes.analyze`); nothing is analysed here.
    max_panels : int, default 12
        At most this many latency panels, groups with the strongest anomalies first.
    heatmap_min_groups : int, default 4
        The overview heatmap is drawn from this many groups on.
    title : str, optional
        The page's title. Default: ``"regimes report: <run name>"``.

    Returns
    -------
    RunReport
        The charts (latency; heatmap; comparison; speedup; phases, each when the
        analysis holds what it draws), the refinement's chart and the explanations';
        :meth:`RunReport.write` renders the page.

    Raises
    ------
    RegimesInputError
        When ``analysis`` is not a :class:`regimes.analysis.RunAnalysis`.

    See Also
    --------
    regimes.analyze : the analysis drawn.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import regimes
    >>> from regimes.viz.html import build_report
    >>> report = build_report(regimes.analyze("examples/data/cuda-h200-gpt2", n_boot=200))
    >>> [s.key for s in report.charts]
    ['latency', 'speedup']
    >>> page = report.write(pathlib.Path(tempfile.mkdtemp()) / "report.html")
    """
    if not isinstance(analysis, RunAnalysis):
        raise RegimesInputError(
            f"build_report draws a RunAnalysis, got {type(analysis).__name__}: pass "
            "regimes.analyze(run, ...) (the run's path, Run or trial table, and its options)"
        )
    notes = list(analysis.notes)
    limits = (max_panels, heatmap_min_groups)
    charts = chart_sections(analysis, limits, notes)
    name = analysis.name
    return RunReport(
        analysis=analysis,
        title=title or f"regimes report{': ' + name if name else ''}",
        charts=charts,
        notes=notes,
        refinement=refinement_section(analysis.refinement),
        explanation_charts=explanation_charts(analysis.explanations),
    )


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _version() -> str:
    from regimes import __version__

    return __version__
