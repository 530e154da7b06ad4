"""One offline HTML report of a run: the findings first, then charts, tables and data.

:func:`build_report` analyses a run (or takes analyses already made) and returns a
:class:`RunReport`; :meth:`RunReport.write` renders it to a single HTML file that
needs no network when it is opened: the Vega, Vega-Lite and vega-embed libraries are
inlined (vl-convert's JavaScript bundle), and every chart's data travels inside its
spec. The page reads like a finding: plain sentences with their numbers on top, a
table of contents, charts at the full width of the page (one panel per row on a
phone), tables as HTML tables, and the environment folded away at the end.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from regimes.data.io import Run, read_run
from regimes.data.schema import as_polars, validate_trials
from regimes.errors import RegimesInputError
from regimes.viz import _findings, _page
from regimes.viz import _style as style
from regimes.viz import charts as plot
from regimes.viz._explanations import Explanation, run_explanations
from regimes.viz._frames import GROUP_FIELD, group_labels, report_axes
from regimes.viz._sections import (
    ChartSection,
    Refinement,
    chart_sections,
    compare,
    comparison_section,
    probe_budgets,
    refinement,
    refinement_findings,
    try_speedup,
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
    "RunReport",
    "build_report",
    "headlines",
    "result_summary",
]


@dataclass
class RunReport:
    """Everything a report shows; :meth:`to_html` renders it, :meth:`write` saves it.

    Attributes
    ----------
    title : str
        The page's title.
    meta : dict
        The run's metadata (environment, provenance, the sweep's specification).
    trials : polars.DataFrame
        The measured trials analysed (warm-ups excluded).
    regimes : RegimeResult
        The detection.
    speedup : SpeedupResult or None
        The KV-cache speedup, when both cache settings were measured.
    charts : list of ChartSection
        The charts, in page order.
    notes : list of str
        What was left out and why.
    errors : polars.DataFrame or None
        The cases that raised during the sweep.
    explanations : list of Explanation
        The explanations the data supported.
    comparison : ComparisonResult or None
        This run against a base run, when the report was given one.
    refinement : Refinement or None
        The boundary refinement read back from the run's probes (``result``, a
        :class:`regimes.RefineResult`, and its ``chart``), when the run holds budgets
        off its spec's grid.
    """

    title: str
    meta: dict[str, Any]
    trials: pl.DataFrame
    regimes: Any
    speedup: Any = None
    charts: list[ChartSection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: pl.DataFrame | None = None
    explanations: list[Explanation] = field(default_factory=list)
    comparison: Any = None
    refinement: Refinement | None = None

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
        return headlines(self.regimes, self.speedup, self.meta)

    def findings(self) -> list[str]:
        """Return the findings in plain sentences with their numbers."""
        lines = _findings.anomaly_findings(self.regimes)
        lines += _findings.sensitivity_findings(self.regimes, self.meta)
        if self.comparison is not None:
            lines += _findings.comparison_findings(self.comparison)
        if self.speedup is not None:
            lines += _findings.collapse_findings(self.speedup, self.x)
        if self.refinement is not None:
            lines += refinement_findings(self.refinement.result)
        labels = group_labels(self.regimes.curve, self.group_columns)[0]
        for item in self.explanations:
            lines += _findings.explanation_findings(item.result, labels)
        return lines

    def summary(self) -> str:
        """Return the findings and the detection summary as plain text."""
        return "\n".join(
            [self.title, *("  " + h for h in self.findings()), "", result_summary(self.regimes)]
        )

    # ----------------------------------------------------------------- output

    def to_html(self) -> str:
        """Return the whole report as one self-contained HTML document."""
        import vl_convert as vlc

        bundle = vlc.javascript_bundle(vl_version=plot.vegalite_version())  # type: ignore[call-arg]
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
        return _page.PAGE.format(
            title=escape(self.title),
            style=_page.STYLE,
            bundle=_page.script_safe(bundle),
            body="\n".join(body),
            specs=_page.json_script_safe(json.dumps(specs, separators=(",", ":"), allow_nan=False)),
            loader=_page.LOADER,
        )

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
        charts += [(f"explain-{e.key}", e.chart) for e in self.explanations if e.chart is not None]
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
        blocks = [_figure(s.key, s.title, s.caption, "h3") for s in self.charts]
        return "<section id='charts'><h2>Charts</h2>" + "".join(blocks) + "</section>"

    def _refinement_html(self) -> str:
        if self.refinement is None:
            return ""
        result = self.refinement.result
        cost = result.summary().splitlines()[-1] if result.dense_generations else ""
        return (
            "<section id='refinement'><h2>Boundary refinement</h2>"
            f"<p>The probes this run holds off its grid, read back: {escape(cost)}</p>"
            + _figure("refine", "", self.refinement.caption, "h3")
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
            if item.chart is not None:
                parts.append(_figure(f"explain-{item.key}", "", "", "h4"))
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


def _figure(key: str, title: str, caption: str, heading: str) -> str:
    head = f"<{heading}>{escape(title)}</{heading}>" if title else ""
    cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
    return (
        f"<figure id='figure-{escape(key)}'>{head}<div class='chart' id='chart-{escape(key)}' "
        f"data-chart='{escape(key)}'></div>{cap}</figure>"
    )


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


def headlines(regimes: Any, speedup: Any = None, meta: dict[str, Any] | None = None) -> list[str]:
    """One terse line per anomaly of ``regimes`` and per collapse of ``speedup``.

    Then what the curves without an anomaly, and the inconclusive ones, could have
    found, and the run's collection-time hygiene warnings
    (:func:`regimes.viz._findings.sensitivity_findings`).

    Parameters
    ----------
    regimes : RegimeResult
        The result of :func:`regimes.detect_regimes`.
    speedup : SpeedupResult, optional
        The result of :func:`regimes.cache_speedup`.
    meta : dict, optional
        The run's metadata (``meta.json``), for its hygiene warnings.

    Returns
    -------
    list of str
        Groups named by the labels the charts use; each line gives the interval, the
        ratio over the smooth trend with its CI, the q value and whether it recovers.
        One line saying so when nothing was found and the result carries no
        sensitivity.

    See Also
    --------
    RunReport.findings : the same findings as sentences, with where each recovers.
    """
    x, y, group_columns = report_axes(regimes)
    labels = group_labels(regimes.curve, group_columns)[0]
    level = style.level_text(regimes)
    lines = [
        f"{row[GROUP_FIELD]}: {y} at {x} {_dash_span(row)} is {row['ratio']:.3g}x its smooth "
        f"trend ({level} CI {row['ratio_low']:.3g} to {row['ratio_high']:.3g})"
        + (f", q = {row['q_value']:.2g}" if row.get("q_value") is not None else "")
        + _recovery(row)
        for row in _findings.labelled(regimes.anomalies, group_columns, labels).iter_rows(
            named=True
        )
    ]
    collapses = getattr(speedup, "collapses", None)
    if isinstance(collapses, pl.DataFrame) and collapses.height:
        keys = [c for c in group_columns if c in collapses.columns and c != "use_cache"]
        speed_labels = group_labels(speedup.speedup, keys)[0]
        lines += [
            f"{row[GROUP_FIELD]}: the KV-cache speedup at {x} {_dash_span(row)} is "
            f"{row['ratio']:.3g}x its trend ({style.level_text(speedup)} CI "
            f"{row['ratio_low']:.3g} to {row['ratio_high']:.3g})"
            for row in _findings.labelled(collapses, keys, speed_labels).iter_rows(named=True)
        ]
    lines += _findings.sensitivity_findings(regimes, meta)
    return lines or [f"no anomaly: {y} follows its smooth trend in every group"]


def _dash_span(row: dict[str, Any]) -> str:
    return str(row["start"]) if row["start"] == row["end"] else f"{row['start']}–{row['end']}"


def _recovery(row: dict[str, Any]) -> str:
    recovered = row.get("recovered")
    if recovered is None:
        return ""
    return ", recovers after it" if recovered else ", stays up (a step)"


def build_report(
    source: Any,
    *,
    x: str = "budget",
    y: str = "latency_s",
    by: Sequence[str] | None = None,
    regimes: Any = None,
    speedup: Any = None,
    max_panels: int = 12,
    heatmap_min_groups: int = 4,
    title: str | None = None,
    baseline: Any = None,
    **detect_options: Any,
) -> RunReport:
    """Analyse a run and gather what its report shows.

    Parameters
    ----------
    source : str, os.PathLike, Run or DataFrame
        A run directory or trial file, a :class:`regimes.Run`, or a trial table.
    x : str, default "budget"
        The x column (``budget`` or ``total_tokens``).
    y : str, default "latency_s"
        The measured quantity (``latency_s``, ``decode_s``, ``prefill_s``).
    by : sequence of str, optional
        The group columns. Default: the case columns present.
    regimes : RegimeResult, optional
        A detection already made; default: ``regimes.detect_regimes(trials, x, y, by,
        **detect_options)``.
    speedup : SpeedupResult, optional
        A speedup already made; default: ``regimes.cache_speedup`` when both cache
        settings were measured.
    max_panels : int, default 12
        At most this many latency panels, groups with the strongest anomalies first.
    heatmap_min_groups : int, default 4
        The overview heatmap is drawn from this many groups on.
    title : str, optional
        The page's title. Default: ``"regimes report: <run name>"``.
    baseline : str, os.PathLike, Run or DataFrame, optional
        A base run to compare this one with (:func:`regimes.compare_runs`, base
        first): the report then opens with what appeared, vanished or changed, and
        draws both runs.
    **detect_options
        Passed to the detection (``alpha``, ``min_ratio``, ``n_boot``, ``seed``,
        ``direction`` ...); the shared ones to the speedup and the explanations too.

    Returns
    -------
    RunReport
        The analyses, charts (latency; heatmap; speedup; phases, each when the data
        supports it), the boundary refinement when the run holds probes off its grid
        (read back, never measured), and the explanations the data supports (phases,
        backends, memory, prompt lengths); :meth:`RunReport.write` renders it.

    Raises
    ------
    RegimesInputError
        When the run is missing or malformed, or the detection rejects the data.

    See Also
    --------
    regimes.detect_regimes, regimes.cache_speedup

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from regimes.viz.html import build_report
    >>> report = build_report("examples/data/cuda-h200-gpt2", n_boot=200)
    >>> [s.key for s in report.charts]
    ['latency', 'speedup']
    >>> page = report.write(pathlib.Path(tempfile.mkdtemp()) / "report.html")
    """
    run = _as_run(source)
    notes: list[str] = []
    if regimes is None:
        from regimes.detect import detect_regimes

        regimes = detect_regimes(run.trials, x=x, y=y, by=by, **detect_options)
    x, y, group_columns = report_axes(regimes)
    trials = validate_trials(run.trials, x=x, y=y, required=[*group_columns, x, y])
    if speedup is None:
        speedup = try_speedup(run.trials, (x, y), by, detect_options, notes)
    limits = (max_panels, heatmap_min_groups)
    probes = probe_budgets(run.trials, run.meta)
    charts = chart_sections(regimes, speedup, trials, limits, notes, probes)
    comparison = None
    if baseline is not None:
        comparison = compare(_as_run(baseline).trials, run.trials, (x, y), by, detect_options)
        if comparison.shift.height:
            charts.insert(1, comparison_section(comparison))
        else:
            notes.append(
                "No curve of this run matches one of the base run on "
                f"{', '.join(comparison.group_columns)}; pass by= to match on fewer columns."
            )
    refined = refinement(run.trials, run.meta, detect_options, notes)
    name = run.meta.get("name") or run.meta.get("run_id") or (run.path.name if run.path else "")
    return RunReport(
        title=title or f"regimes report{': ' + str(name) if name else ''}",
        meta=run.meta,
        trials=trials,
        regimes=regimes,
        speedup=speedup,
        charts=charts,
        notes=notes,
        errors=run.errors,
        explanations=run_explanations(run.trials, trials, regimes, detect_options, notes),
        comparison=comparison,
        refinement=refined,
    )


def _as_run(source: Any) -> Run:
    if isinstance(source, Run):
        return source
    if isinstance(source, (str, os.PathLike)):
        return read_run(source)
    return Run(as_polars(source), pl.DataFrame(), pl.DataFrame(), {}, None)


def result_summary(result: Any) -> str:
    """Return ``result.summary()`` as text (a polars table printed in full)."""
    summary = result.summary() if hasattr(result, "summary") else ""
    if isinstance(summary, pl.DataFrame):
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=160):
            return str(summary)
    return str(summary)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _version() -> str:
    from regimes import __version__

    return __version__
