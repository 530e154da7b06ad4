"""``analyze``: every analysis of a run, computed once, for the report and the shell.

A run is detected once (:func:`regimes.detect_regimes`); what else its data supports is
computed from that one detection: the KV-cache speedup when both cache settings were
measured, the explanations of its anomalies (phases, backends, memory, prompt
lengths), the comparison with a base run when one is given, and the boundary
refinement read back from the probes the run holds off its grid. The result,
:class:`RunAnalysis`, is what :func:`regimes.viz.html.build_report` draws and
``regimes analyze`` prints; neither runs an analysis itself.

Every analysis gets its options from one :class:`regimes.options.DetectionOptions`,
each the options its own signature takes (:meth:`DetectionOptions.for_`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import polars as pl

from regimes import _findings
from regimes._labels import group_labels
from regimes._result import AnalysisResult
from regimes._summary import Summary
from regimes.data.io import Run, read_run
from regimes.data.schema import as_polars, validate_trials
from regimes.errors import RegimesInputError
from regimes.options import DetectionOptions

__all__ = ["Explanation", "RunAnalysis", "analyze", "is_instrumented", "probe_budgets"]


@dataclass(frozen=True)
class Explanation:
    """An explanation of a run's anomalies: what it asks, and its result.

    Attributes
    ----------
    key : str
        ``phases``, ``backends``, ``memory``, ``alignment`` or ``operators``.
    title : str
        The question it answers, as the report heads it.
    result : AnalysisResult
        The explanation's result (:func:`regimes.attribute_phases`, ...).
    main : str
        The name of the result's main table.
    """

    key: str
    title: str
    result: Any
    main: str

    @property
    def table(self) -> pl.DataFrame:
        """The result's main table (one row per anomaly explained)."""
        frame: pl.DataFrame = getattr(self.result, self.main)
        return frame


@dataclass(frozen=True, repr=False)
class RunAnalysis(AnalysisResult):
    """Result of :func:`analyze`: one run's analyses, each computed once.

    Attributes
    ----------
    run : Run
        The run analysed (trials with warm-ups, errors, metadata).
    options : DetectionOptions
        The options every analysis was given.
    trials : polars.DataFrame
        The measured trials the detection read (warm-ups excluded).
    detection : RegimeResult
        The detection (:func:`regimes.detect_regimes`).
    speedup : SpeedupResult or None
        The KV-cache speedup, when both cache settings were measured.
    explanations : tuple of Explanation
        The explanations the data supports, run on the anomalies found.
    comparison : ComparisonResult or None
        This run against the base run, when one was given (its new side is
        ``detection``: the run is not detected again).
    refinement : RefineResult or None
        The boundary refinement read back from the run's probes off its spec's grid
        (nothing measured), when it holds some and its grid shows a boundary.
    probes : tuple of int
        The budgets the run measured off its spec's grid.
    notes : tuple of str
        What could not be analysed, and why.
    params : dict
        The options, and the base run's label when there is one.
    untested : polars.DataFrame
        The detection's groups that could not be tested, with the reason.
    """

    run: Run
    options: DetectionOptions
    trials: pl.DataFrame
    detection: Any
    speedup: Any = None
    explanations: tuple[Explanation, ...] = ()
    comparison: Any = None
    refinement: Any = None
    probes: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    untested: pl.DataFrame = field(default_factory=pl.DataFrame)

    _tables: ClassVar[tuple[str, ...]] = ("anomalies",)
    _title: ClassVar[str] = "Run analysis"

    @property
    def anomalies(self) -> pl.DataFrame:
        """The detection's anomalies."""
        frame: pl.DataFrame = self.detection.anomalies
        return frame

    @property
    def history(self) -> str | None:
        """Which anomalies process history explains, or may explain (read when asked).

        The detection's :attr:`regimes.RegimeResult.history_note`: fitting each
        anomalous curve's process history costs more than the detection, so it is
        computed the first time it is read, once.
        """
        note: str | None = self.detection.history_note
        return note

    @property
    def name(self) -> str:
        """The run's name: ``meta.json``'s ``name`` or ``run_id``, else its folder's."""
        meta = self.run.meta
        path = self.run.path
        return str(meta.get("name") or meta.get("run_id") or (path.name if path else ""))

    def headlines(self) -> list[str]:
        """One terse line per finding (each anomaly, each speedup collapse).

        See :func:`regimes._findings.headlines`.
        """
        return _findings.headlines(self.detection, self.speedup, self.run.meta)

    def findings(self) -> list[str]:
        """Return every finding in plain sentences with their numbers.

        The anomalies, each curve's sensitivity, the comparison, the speedup's collapses,
        the refined boundaries and one sentence per explained anomaly, in that order.
        """
        rep = self.detection
        lines = _findings.anomaly_findings(rep)
        lines += _findings.sensitivity_findings(rep, self.run.meta)
        if self.comparison is not None:
            lines += _findings.comparison_findings(self.comparison)
        if self.speedup is not None:
            lines += _findings.collapse_findings(self.speedup, rep.x)
        if self.refinement is not None:
            lines += _findings.refinement_findings(self.refinement)
        labels = group_labels(rep.curve, rep.group_columns)[0]
        for item in self.explanations:
            lines += _findings.explanation_findings(item.result, labels)
        return lines

    def _summary(self) -> Summary:
        """Return the findings and the notes, then the detection's summary."""
        title = f"regimes analysis{': ' + self.name if self.name else ''}"
        out = Summary().add_heading(title, above="", below=None)
        out.add_rows(self.findings(), str).add_rows(self.notes, str, indent="  note: ")
        return out.add_lines([""]).add_summary(self.detection._summary())

    def _headlines(self) -> list[str]:
        return self.findings()

    def to_dict(self) -> dict[str, Any]:
        """Return every analysis as plain JSON-safe objects, one key each.

        Returns
        -------
        dict
            ``result``, ``status``, ``params``, ``notes``, then ``detection``,
            ``speedup``, ``comparison``, ``refinement`` (each its own ``to_dict()`` or
            ``None``) and ``explanations`` (by key).
        """
        out = super().to_dict()
        out.pop("anomalies", None)
        out["notes"] = list(self.notes)
        for name in ("detection", "speedup", "comparison", "refinement"):
            value = getattr(self, name)
            out[name] = None if value is None else value.to_dict()
        out["explanations"] = {e.key: e.result.to_dict() for e in self.explanations}
        return out

    def __repr__(self) -> str:
        done = [
            name
            for name in ("speedup", "comparison", "refinement")
            if getattr(self, name) is not None
        ]
        done += [e.key for e in self.explanations]
        return (
            f"RunAnalysis(anomalies={self.detection.anomalies.height}; "
            f"{', '.join(done) or 'detection only'}; {self.status})"
        )


def analyze(
    run: Any,
    options: DetectionOptions | None = None,
    baseline: Any = None,
    *,
    detection: Any = None,
    **changes: Any,
) -> RunAnalysis:
    """Analyse a run: detect once, then everything the data supports.

    Parameters
    ----------
    run : str, os.PathLike, Run or DataFrame
        A run directory or trial file, a :class:`regimes.Run`, or a trial table.
    options : DetectionOptions, optional
        The detection options; default: those of ``detection`` when given, else the
        defaults of :func:`regimes.detect_regimes`.
    baseline : str, os.PathLike, Run or DataFrame, optional
        A base run to compare this one with (:func:`regimes.compare_runs`, base first).
        The base run is detected once; this run is not detected again when the curves
        the comparison matches are the detection's (else the comparison detects it on
        its coarser curves, and says so in ``notes``).
    detection : RegimeResult, optional
        A detection of ``run`` already made, used instead of detecting.
    **changes
        Options to change (``alpha=0.01``, ``n_boot=400``, ...), by the names of
        :class:`DetectionOptions`.

    Returns
    -------
    RunAnalysis
        The detection and, where the data supports them, the speedup, the
        explanations, the comparison and the refinement read back.

    Raises
    ------
    RegimesInputError
        When the run is missing or malformed, an option is out of range, or the
        detection rejects the data. An analysis beyond the detection that the data
        cannot support leaves a note instead.

    See Also
    --------
    regimes.viz.html.build_report : draws the analysis as one offline HTML page.

    Examples
    --------
    >>> import regimes
    >>> analysis = regimes.analyze("examples/data/cuda-h200-gpt2", n_boot=200)
    >>> analysis.speedup is not None, analysis.comparison is None
    (True, True)
    >>> analysis.options.n_boot
    200
    """
    if options is None and detection is not None:
        given = {k: v for k, v in detection.params.items() if k in DetectionOptions.names()}
        options = DetectionOptions(**given)
    options = DetectionOptions.coerce(options, **changes)
    found = as_run(run)
    if detection is None:
        from regimes.detect import detect_regimes

        detection = detect_regimes(found.trials, **options.for_(detect_regimes))
    x, y, group_columns = detection.x, detection.y, list(detection.group_columns)
    trials = validate_trials(found.trials, x=x, y=y, required=[*group_columns, x, y])
    notes: list[str] = []
    comparison = None
    if baseline is not None:
        comparison = _compare(as_run(baseline).trials, found.trials, detection, options, notes)
    probes = probe_budgets(found.trials, found.meta)
    return RunAnalysis(
        run=found,
        options=options,
        trials=trials,
        detection=detection,
        speedup=_speedup(found.trials, options, notes),
        explanations=tuple(_explain(found.trials, trials, detection, options, notes, found.ops)),
        comparison=comparison,
        refinement=_refinement(found, probes, options, notes) if probes else None,
        probes=tuple(probes),
        notes=tuple(notes),
        params=options.to_dict() | ({"baseline": _label(baseline)} if baseline is not None else {}),
        untested=detection.untested,
    )


def as_run(source: Any) -> Run:
    """Return ``source`` as a :class:`regimes.Run` (read from disk when it is a path)."""
    if isinstance(source, Run):
        return source
    if isinstance(source, (str, os.PathLike)):
        return read_run(source)
    return Run(as_polars(source), pl.DataFrame(), pl.DataFrame(), {}, None)


def _label(source: Any) -> str:
    if isinstance(source, Run):
        return str(source.path) if source.path is not None else "run"
    return str(source) if isinstance(source, (str, os.PathLike)) else "trial table"


def _speedup(trials: pl.DataFrame, options: DetectionOptions, notes: list[str]) -> Any:
    """Return the cache speedup when both cache settings were measured, else ``None``."""
    if "use_cache" not in trials.columns or trials["use_cache"].drop_nulls().n_unique() < 2:
        return None
    from regimes.speedup import cache_speedup

    taken = options.for_(cache_speedup)
    # one speedup curve covers both cache settings: use_cache cannot also group it
    if taken.get("by") is not None:
        taken["by"] = [c for c in taken["by"] if c != "use_cache"]
    try:
        return cache_speedup(trials, **taken)
    except RegimesInputError as exc:  # e.g. no budget measured both ways
        notes.append(f"KV-cache speedup not analysed: {exc}")
        return None


def _compare(
    base: pl.DataFrame,
    trials: pl.DataFrame,
    detection: Any,
    options: DetectionOptions,
    notes: list[str],
) -> Any:
    """Compare the run with the base run, reusing the run's detection where it fits."""
    from regimes._compare.sides import detection_fits, match_columns
    from regimes.compare import compare_runs

    matched = match_columns(base, trials, options.by, detection.x)
    reason = detection_fits(detection, matched)
    if reason is not None:
        notes.append(f"The comparison detects this run again on its own curves: {reason}.")
    reused = detection if reason is None else None
    comparison = compare_runs(base, trials, detection=reused, **options.for_(compare_runs))
    if comparison.shift.height == 0:
        notes.append(
            "No curve of this run matches one of the base run on "
            f"{', '.join(comparison.group_columns)}; pass by= to match on fewer columns."
        )
    return comparison


def probe_budgets(trials: pl.DataFrame, meta: dict[str, Any]) -> list[int]:
    """Return the budgets measured off the spec's grid (refinement probes), sorted.

    Empty when the run has no spec grid (``meta.json`` ``spec.budgets``) or none off it.
    """
    grid = (meta.get("spec") or {}).get("budgets")
    if not grid or "budget" not in trials.columns:
        return []
    present = trials.get_column("budget").drop_nulls().unique().to_list()
    return sorted(set(present) - set(grid))


def _refinement(
    run: Run, probes: Sequence[int], options: DetectionOptions, notes: list[str]
) -> Any:
    """Read back the refinement of a run that holds probes off its grid, else ``None``.

    The brackets come from the probes on disk (:func:`regimes.refine_boundaries` with
    no generation allowed): nothing is measured and no collector is loaded. The
    refinement detects the spec's grid alone, a table other than the whole run's: the
    probes were placed where the grid's detection put each boundary, so they do not
    enter the test that found it.
    """
    from regimes.refine import refine_boundaries

    grid = run.meta["spec"]["budgets"]
    try:
        result = refine_boundaries(
            run.trials, grid=grid, max_generations=0, **options.for_(refine_boundaries)
        )
    except RegimesInputError as exc:
        notes.append(f"Boundary refinement not shown: {exc}")
        return None
    if result.boundaries.height == 0:
        notes.append(
            "The run holds budgets off its grid, but the grid shows no boundary to refine."
        )
        return None
    return result


_MEMORY_COLUMNS = ("mem_driver_bytes", "mem_allocated_bytes", "rss_bytes")

_OWN_OPTIONS: dict[str, tuple[str, ...]] = {
    "phases": ("level", "seed", "session"),
    "backends": ("alpha", "level", "session"),
    "memory": ("alpha", "level", "session"),
    "alignment": (),
    "operators": ("alpha", "level", "seed"),
}
"""The options each explanation takes beside the detection it explains.

Not read from the signatures: there ``n_boot``, ``seed`` and ``alpha`` name the
detection an explanation runs when it is given none, which it refuses alongside one,
except the phases' own bootstrap (its ``seed``; its draws keep their default, 2000,
as ``--n-boot`` counts the detection's)."""


def _explanation_plans(
    trials_raw: pl.DataFrame, trials: pl.DataFrame, detection: Any, ops: pl.DataFrame
) -> list[tuple[str, str, Callable[..., Any], str]]:
    """Plan the explanations the data supports: ``(key, title, function, main table)``."""
    from regimes.explain.alignment import align_boundaries
    from regimes.explain.backends import compare_backends
    from regimes.explain.memory import memory_confound
    from regimes.explain.operators import attribute_operators
    from regimes.explain.phases import attribute_phases

    group_columns = list(detection.group_columns)
    plans: list[tuple[str, str, Callable[..., Any], str]] = []
    if is_instrumented(trials):
        title = "Prefill or decode: where the excess time goes"
        plans.append(("phases", title, attribute_phases, "phases"))
    if "backend" in group_columns and trials["backend"].n_unique() >= 2:
        title = "Is it specific to one backend?"
        plans.append(("backends", title, compare_backends, "comparisons"))
    memory = next(
        (c for c in _MEMORY_COLUMNS if c in trials.columns and trials[c].drop_nulls().len() > 0),
        None,
    )
    if memory is not None:
        run = partial(memory_confound, memory=memory)
        plans.append(("memory", f"Does memory ({memory}) explain it?", run, "effects"))
    if "prompt_tokens" in group_columns and trials["prompt_tokens"].n_unique() >= 2:
        title = "Does it follow the budget or the total length?"
        plans.append(("alignment", title, align_boundaries, "boundaries"))
    if ops.height:

        def operators(_: Any, report: Any, **own: Any) -> Any:
            return attribute_operators(ops, report, **own)

        title = "Operators: which operations carry the excess"
        plans.append(("operators", title, operators, "operators"))
    return plans


def _explain(
    trials_raw: pl.DataFrame,
    trials: pl.DataFrame,
    detection: Any,
    options: DetectionOptions,
    notes: list[str],
    ops: pl.DataFrame | None = None,
) -> list[Explanation]:
    """Run each explanation the data supports on the anomalies found.

    Phases need instrumented trials, backends two backends or more, memory a memory
    reading, alignment two prompt lengths or more, operators profiled generations
    (the run's ``ops`` table). One that cannot run on this data
    leaves a note saying why instead of stopping the analysis.
    """
    if detection.anomalies.height == 0:
        return []
    given = options.to_dict()
    done = []
    empty = pl.DataFrame() if ops is None else ops
    for key, title, function, main in _explanation_plans(trials_raw, trials, detection, empty):
        own = {name: given[name] for name in _OWN_OPTIONS[key]}
        try:
            result = function(trials_raw, detection, **own)
        except RegimesInputError as exc:
            notes.append(f"{title} not analysed: {exc}")
            continue
        done.append(Explanation(key, title, result, main))
    return done


def is_instrumented(trials: pl.DataFrame) -> bool:
    """Whether some trial carries both phase times (``prefill_s`` and ``decode_s``)."""
    if not {"prefill_s", "decode_s"} <= set(trials.columns):
        return False
    both = pl.col("prefill_s").is_not_null() & pl.col("decode_s").is_not_null()
    return bool(trials.select(both.any()).item())
