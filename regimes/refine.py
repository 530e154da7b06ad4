"""``refine_boundaries``: each regime boundary to the exact token, by sequential probing.

A coarse grid knows a boundary only to a bracket: the last normal and the first
anomalous budget. Refinement measures budgets inside each bracket, one probe at a time,
until the bracket is ``resolution`` tokens wide:

1. the run's grid is analysed (:func:`regimes.detect_regimes`, and
   :func:`regimes.cache_speedup` when both cache settings were measured); every
   significant boundary gets its starting bracket, the grid budgets the detection's
   bootstrap bounds it by (``start_low..start_high`` of an onset, ``end_low..end_high``
   of a recovery, widened to the grid budget on the normal side), and the two levels it
   separates, a smooth normal trend and the anomalous level next to it
   (:mod:`regimes._refine.brackets`);
2. the next probe is the budget that best splits the boundary's remaining uncertainty
   (probabilistic bisection; :mod:`regimes._refine.design`);
3. each probe is measured in batches, each in a fresh session, and decided "left" or
   "right" of the boundary by Wald's sequential probability ratio test at ``error_rate``
   between the two levels, with the noise scales estimated from the run; a probe still
   undecided at ``max_trials`` trials is reported undecided and does not move the bracket
   (:mod:`regimes._refine.sprt`);
4. the boundaries are probed in rounds (one probe batch of each open boundary per
   round, measured together), until each is resolved, undecidable, or the allowance
   (``max_generations``, ``max_seconds``) runs out.

Probes already in the run count as evidence: a rerun continues where the last one
stopped, and new trials are appended to the run by the prober (crash-safe for a run on
disk, :mod:`collectors.refine`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from regimes._refine.brackets import Boundary, boundaries_from, curve_noise
from regimes._refine.design import BoundaryState, Evidence
from regimes._refine.oracle import SimulatedProbe
from regimes._refine.sprt import LEFT, RIGHT, Thresholds
from regimes._result import AnalysisResult, untested_frame
from regimes.data.schema import RegimesInputError, as_polars, check_fraction

__all__ = ["ProbeRequest", "RefineResult", "SimulatedProbe", "refine_boundaries"]

Prober = Callable[[Sequence["ProbeRequest"]], pl.DataFrame]


@dataclass(frozen=True)
class ProbeRequest:
    """One batch to measure: ``trials`` generations of ``budget`` tokens for ``case``.

    ``case`` holds the values of the curve's case columns (``model``, ``backend``,
    ``dtype``, ``use_cache``, ``prompt_tokens``... those the run has).
    """

    case: dict[str, Any]
    budget: int
    trials: int


@dataclass(frozen=True, repr=False)
class RefineResult(AnalysisResult):
    """Result of :func:`refine_boundaries`.

    Attributes
    ----------
    boundaries : polars.DataFrame
        One row per boundary: ``boundary`` (index), ``source`` (``latency`` or
        ``speedup``), the group columns, ``kind`` (``onset``, ``recovery``,
        ``change``), ``low`` and ``high`` (the bracket: ``low`` on the left side, the
        last normal budget of an onset or the last anomalous one of a recovery),
        ``resolved``, ``status`` (``resolved``, ``undecided``, ``inconsistent``,
        ``max_generations``, ``max_seconds``, ``no prober``), ``grid_low``,
        ``grid_high``, ``probes``, ``generations`` and ``tokens`` spent on it (every
        generation, warm-ups included, at a budget inside its grid bracket off the
        grid: this call's and earlier calls'; a budget two boundaries share counts for
        both) and ``new_generations`` (this call's, each counted once).
    probes : polars.DataFrame
        One row per probe: ``boundary``, ``budget``, ``n`` (trials), ``sessions``,
        ``level`` (median log latency, or log speedup), ``mu_left``, ``mu_right``,
        ``llr`` (log-likelihood ratio, right over left), ``decision`` (the side's
        state, e.g. ``normal``/``anomalous``; ``undecided`` at the cap; ``between`` or
        ``beyond`` for a level that fits neither side; ``pending`` while measured),
        ``batches`` measured by this call and ``on_disk`` (it had trials before).
    untested : polars.DataFrame
        Boundaries that could not be refined, with the reason.
    collected : polars.DataFrame
        The trial rows this call measured (warm-ups included).
    trials : polars.DataFrame
        Every trial the brackets rest on: the run's (grid and earlier probes) and this
        call's, warm-ups included; what :meth:`chart` draws.
    generations, dense_generations : int
        Generations this call ran, and those of a dense 1-token grid over the
        boundaries' curves' grid range with the run's trials per budget.
    params : dict
        The call's parameters.
    """

    boundaries: pl.DataFrame
    probes: pl.DataFrame
    untested: pl.DataFrame
    collected: pl.DataFrame
    generations: int = 0
    dense_generations: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    trials: pl.DataFrame = field(default_factory=pl.DataFrame)

    _tables: ClassVar[tuple[str, ...]] = ("boundaries", "probes")
    _title: ClassVar[str] = "Boundary refinement"

    def _headlines(self) -> list[str]:
        """Return one sentence per refined boundary, as the report words it."""
        from regimes.viz._sections import refinement_findings

        return refinement_findings(self)

    def summary(self) -> str:
        """One line per boundary, then the cost against a dense grid."""
        lines = [
            f"Boundary refinement: {self.boundaries.height} boundar"
            f"{'y' if self.boundaries.height == 1 else 'ies'}, resolution "
            f"{self.params.get('resolution')}, error rate {self.params.get('error_rate')}"
        ]
        for row in self.boundaries.iter_rows(named=True):
            lines.append(
                f"  {row['source']} {row['kind']} of {_label(row, self.params)}: "
                f"({row['low']}, {row['high']}) from grid ({row['grid_low']}, "
                f"{row['grid_high']}), {row['status']}; {row['probes']} probe(s), "
                f"{row['generations']} generation(s) ({row['new_generations']} now), "
                f"{row['tokens']} tokens"
            )
        for row in self.untested.iter_rows(named=True):
            lines.append(f"  not refined: {_label(row, self.params)}: {row['reason']}")
        if self.dense_generations:
            spent = int(self.boundaries.get_column("generations").sum())
            lines.append(
                f"Probes so far: {spent} generation(s), {spent / self.dense_generations:.1%} "
                f"of the {self.dense_generations} a dense 1-token grid would need (this "
                f"call: {self.generations})."
            )
        return "\n".join(lines)


def _label(row: dict[str, Any], params: dict[str, Any]) -> str:
    shown = [c for c in params.get("label_columns", []) if row.get(c) is not None]
    if not shown and row.get("model") is not None:
        shown = ["model"]
    return ", ".join(f"{c}={row[c]}" for c in shown) or "all rows"


def refine_boundaries(
    run: Any,
    *,
    probe: Prober | None = None,
    resolution: int = 1,
    max_generations: int | None = None,
    max_seconds: float | None = None,
    error_rate: float = 0.01,
    max_trials: int = 24,
    min_trials: int = 3,
    min_sessions: int = 2,
    grid: Sequence[int] | None = None,
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    n_boot: int = 200,
    seed: int = 0,
) -> RefineResult:
    """Bracket every regime boundary of a run to ``resolution`` tokens by probing.

    Parameters
    ----------
    run : str, path or DataFrame
        A run directory (new trials are appended to it) or a trial table.
    probe : callable, optional
        ``probe(requests) -> DataFrame``: measures a list of :class:`ProbeRequest` in
        one fresh session and returns the new trial rows, warm-ups included (its
        ``warmup`` attribute, if any, is the warm-ups per case, used to keep within
        ``max_generations``). Default for a run directory: the run's own spec through
        :func:`collectors.refine.run_prober` (needs torch); for a frame, none (the
        boundaries are evaluated on what the frame holds).
    resolution : int, default 1
        Stop when ``high - low`` is at most this many tokens.
    max_generations : int, optional
        Most generations (warm-ups included) this call may run; 0 reads the probes
        already in the run back and never builds a prober (no collectors needed).
    max_seconds : float, optional
        Wall time after which no new round starts (a round under way finishes).
    error_rate : float, default 0.01
        Each probe's error rates, ``alpha = beta``, of the sequential test.
    max_trials : int, default 24
        Cap on a probe's trials (per curve); a probe undecided there stays undecided.
    min_trials : int, default 3
        Trials of a batch, and fewest a decision rests on (a median of three is robust
        to one hiccup).
    min_sessions : int, default 2
        Fewest fresh sessions a decision rests on: one process that happens to run
        slow (MPSGraph may pick a slower kernel per process) cannot decide a probe.
    grid : sequence of int, optional
        The budgets the detection sees; default the run's spec budgets (``meta.json``)
        or, for a frame, every budget in it.
    alpha, min_ratio
        Passed to :func:`regimes.detect_regimes` (and :func:`regimes.cache_speedup`).
    n_boot, seed
        Passed to :func:`regimes.detect_regimes`: its bootstrap draws, which set the
        bounds each boundary's starting bracket is read from.

    Returns
    -------
    RefineResult
        The brackets, every probe's evidence, the cost, the new trials.

    Raises
    ------
    RegimesInputError
        Bad arguments, an unreadable run, a grid with no significant boundary's data,
        or a run directory to probe without the collectors (torch) installed.

    See Also
    --------
    regimes.detect_regimes : the grid analysis whose boundaries are refined.
    regimes.align_boundaries : budget or total tokens, at token resolution once refined.

    References
    ----------
    .. [1] A. Wald, "Sequential tests of statistical hypotheses", Annals of
       Mathematical Statistics 16(2), 117-186, 1945.
    .. [2] R. Waeber, P. I. Frazier and S. G. Henderson, "Bisection search with noisy
       responses", SIAM Journal on Control and Optimization 51(3), 2261-2279, 2013.

    Examples
    --------
    >>> from regimes.refine import SimulatedProbe, refine_boundaries
    >>> oracle = SimulatedProbe(505, 633, factor=3.0, seed=1)  # synthetic
    >>> coarse = oracle.sweep(range(480, 657, 16), trials=3)
    >>> res = refine_boundaries(coarse, probe=oracle)
    >>> res.boundaries.select("kind", "low", "high", "resolved").rows()
    [('onset', 504, 505, True), ('recovery', 633, 634, True)]
    """
    settings = _Settings(resolution, error_rate, max_trials, min_trials, min_sessions)
    _check(settings, max_generations, max_seconds)
    trials, meta, path = _read(run)
    budgets = _grid(trials, meta, grid)
    detect = dict(alpha=alpha, min_ratio=min_ratio, n_boot=n_boot, seed=seed)
    plan = _Plan.build(trials, budgets, settings, detect)
    # With no generation allowed the run is only read back: no prober is built, so a
    # report or a summary of a refined run never needs the collectors (torch).
    prober = probe if probe is not None or max_generations == 0 else _default_prober(path, plan)
    started = time.monotonic()
    collected = _rounds(plan, prober, max_generations, max_seconds, started)
    params = dict(
        resolution=resolution, max_generations=max_generations, max_seconds=max_seconds,
        error_rate=error_rate, max_trials=max_trials, min_trials=min_trials,
        min_sessions=min_sessions,
        grid=sorted(budgets), alpha=alpha, min_ratio=min_ratio, n_boot=n_boot, seed=seed,
        label_columns=plan.label_columns, elapsed_s=time.monotonic() - started,
    )  # fmt: skip
    everything = (
        pl.concat([trials, collected], how="diagonal_relaxed") if collected.height else trials
    )
    return plan.result(collected, params, everything)


@dataclass(frozen=True)
class _Settings:
    """The sequential design's settings, checked once."""

    resolution: int
    error_rate: float
    max_trials: int
    min_trials: int
    min_sessions: int

    def state(self, boundary: Boundary) -> BoundaryState:
        """Start refining ``boundary`` under these settings."""
        return BoundaryState(
            boundary,
            Thresholds.from_error_rate(self.error_rate),
            self.min_trials,
            self.max_trials,
            self.resolution,
            self.min_sessions,
        )


def _check(settings: _Settings, max_generations: int | None, max_seconds: float | None) -> None:
    s = settings
    if not (isinstance(s.resolution, int) and s.resolution >= 1):
        raise RegimesInputError(
            f"resolution must be a whole number of tokens >= 1, got {s.resolution!r}"
        )
    if max_generations is not None and not (
        isinstance(max_generations, int) and max_generations >= 0
    ):
        raise RegimesInputError(f"max_generations must be an integer >= 0, got {max_generations!r}")
    if max_seconds is not None and not (math.isfinite(max_seconds) and max_seconds >= 0):
        raise RegimesInputError(f"max_seconds must be a number >= 0, got {max_seconds!r}")
    check_fraction(error_rate=s.error_rate)
    if s.error_rate >= 0.5:
        raise RegimesInputError(f"error_rate must be below 0.5, got {s.error_rate}")
    if not (isinstance(s.min_trials, int) and s.min_trials >= 2):
        raise RegimesInputError(
            "min_trials must be an integer >= 2 (a probe's noise needs replication), "
            f"got {s.min_trials!r}"
        )
    if not (isinstance(s.min_sessions, int) and s.min_sessions >= 1):
        raise RegimesInputError(f"min_sessions must be an integer >= 1, got {s.min_sessions!r}")
    if not (isinstance(s.max_trials, int) and s.max_trials >= s.min_trials * s.min_sessions):
        raise RegimesInputError(
            f"max_trials must be an integer >= min_trials x min_sessions "
            f"({s.min_trials * s.min_sessions}), got {s.max_trials!r}"
        )


def _read(run: Any) -> tuple[pl.DataFrame, dict[str, Any], Path | None]:
    """Read the trial table (warm-ups included), the run's metadata and its directory."""
    if isinstance(run, (str, Path)):
        from regimes.data.io import read_run

        found = read_run(run)
        path = Path(run) if Path(run).is_dir() else None
        return found.trials, dict(found.meta), path
    return as_polars(run), {}, None


def _grid(trials: pl.DataFrame, meta: dict[str, Any], grid: Sequence[int] | None) -> set[int]:
    """Choose the budgets the detection sees: given, the spec's, or every one present."""
    if "budget" not in trials.columns:
        raise RegimesInputError("the trial table has no 'budget' column")
    present = set(trials.get_column("budget").drop_nulls().to_list())
    spec_budgets = (meta.get("spec") or {}).get("budgets")
    chosen = set(grid) if grid is not None else set(spec_budgets or present)
    if len(chosen & present) < 3:
        raise RegimesInputError(
            f"the grid has {len(chosen & present)} budget(s) with trials; refinement starts "
            "from a detection on a grid of at least 3 budgets (pass grid= to name them)"
        )
    return chosen & present


def _log_trials(frame: pl.DataFrame, group_columns: list[str]) -> pl.DataFrame:
    """Select the measured trials as the evidence needs them.

    Group columns, budget, ``_ly`` and ``_session`` (run, session and process
    together, those present).
    """
    if "warmup" in frame.columns:
        frame = frame.filter(~pl.col("warmup").fill_null(False))
    frame = frame.filter(pl.col("latency_s").is_not_null() & (pl.col("latency_s") > 0))
    present = [c for c in ("run_id", "session", "process_id") if c in frame.columns]
    session = (
        pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in present], separator="|")
        if present
        else pl.lit("0")
    )
    return frame.select(
        *group_columns,
        pl.col("budget").cast(pl.Int64),
        pl.col("latency_s").cast(pl.Float64).log().alias("_ly"),
        session.alias("_session"),
    )


@dataclass
class _Plan:
    """The boundaries being refined, the evidence they share, and what they cost."""

    states: list[BoundaryState]
    evidence: Evidence
    group_columns: list[str]
    label_columns: list[str]
    untested: list[dict[str, Any]]
    dense_generations: int
    schema: dict[str, pl.DataType]

    @classmethod
    def build(
        cls,
        trials: pl.DataFrame,
        grid: set[int],
        settings: _Settings,
        options: dict[str, Any],
    ) -> _Plan:
        """Detect on the grid, bracket every boundary and take in the probes on disk."""
        from regimes.detect import detect_regimes

        on_grid = trials.filter(pl.col("budget").is_in(sorted(grid)))
        report = detect_regimes(on_grid, **options)
        columns = list(report.group_columns)
        measured = _log_trials(trials, columns)
        noise = curve_noise(columns, report.groups)
        boundaries, untested = boundaries_from(report, _speedup(on_grid, options), noise)
        evidence = Evidence(measured, columns, noise)
        states = []
        for boundary in boundaries:
            state = settings.state(boundary)
            state.start(evidence)
            if not state.separable():
                untested.append(boundary.group | {"reason": _inseparable(boundary)})
                continue
            states.append(state)
        varying = [c for c in columns if report.groups.get_column(c).n_unique() > 1]
        labels = varying or [c for c in ("model",) if c in columns]
        _charge_earlier_probes(
            states, trials.filter(~pl.col("budget").is_in(sorted(grid))), columns
        )
        dense = _dense_generations(on_grid, columns, states)
        schema = {c: trials.schema[c] for c in columns}
        return cls(states, evidence, columns, labels, untested, dense, schema)

    def wanted(self) -> list[tuple[int, int, int]]:
        """``(state index, budget, trials)`` of every open boundary's next batch."""
        out = []
        for i, state in enumerate(self.states):
            request = state.next_request()
            if request is not None:
                out.append((i, *request))
        return out

    def stop_open(self, reason: str) -> None:
        """Mark every boundary that still wants probes as stopped for ``reason``."""
        for state in self.states:
            if state.next_request() is not None:
                state.stopped = reason

    def case_of(self, curve: tuple[Any, ...]) -> dict[str, Any]:
        """Return the case columns of a curve, as a prober needs them."""
        return dict(zip(self.group_columns, curve, strict=True))

    def units(
        self, wanted: list[tuple[int, int, int]], warmup: int, room: float
    ) -> tuple[list[ProbeRequest], dict[tuple[tuple[Any, ...], int], list[int]]]:
        """Merge the round's batches by (curve, budget), within ``room`` generations.

        A boundary whose batches do not fit stops (``max_generations``); a batch two
        boundaries share is measured once, with the larger trial count.
        """
        merged: dict[tuple[tuple[Any, ...], int], int] = {}
        askers: dict[tuple[tuple[Any, ...], int], list[int]] = {}
        cost = 0
        for index, budget, trials in wanted:
            curves = [c.curve for c in self.states[index].boundary.components]
            extra = sum(
                trials - merged.get((c, budget), 0) + (0 if (c, budget) in merged else warmup)
                for c in curves
                if trials > merged.get((c, budget), 0)
            )
            if cost + extra > room:
                self.states[index].stopped = "max_generations"
                continue
            cost += extra
            for curve in curves:
                key = (curve, budget)
                merged[key] = max(trials, merged.get(key, 0))
                askers.setdefault(key, []).append(index)
        requests = [ProbeRequest(self.case_of(c), b, n) for (c, b), n in merged.items()]
        return requests, askers

    def record(
        self, rows: pl.DataFrame, askers: dict[tuple[tuple[Any, ...], int], list[int]]
    ) -> None:
        """Charge new rows to the boundaries that asked, and move the brackets.

        A boundary whose batch brought no measured trial (its case failed) stops.
        """
        counts = _row_counts(rows, self.group_columns)
        batches: set[tuple[int, int]] = set()
        for key, indices in askers.items():
            generations, tokens, measured = counts.get(key, (0, 0, 0))
            owner = self.states[indices[0]]
            owner.generations += generations
            owner.tokens += tokens
            for index in indices:
                batches.add((index, key[1]))
                if measured == 0:
                    self.states[index].stopped = "collection failed"
        for index, budget in batches:
            self.states[index].probes[budget].batches += 1
        self.evidence.add(_log_trials(rows, self.group_columns))
        for state in self.states:
            state.update(self.evidence)

    def result(
        self, collected: pl.DataFrame, params: dict[str, Any], trials: pl.DataFrame
    ) -> RefineResult:
        """Build the result tables from the boundaries' final states."""
        rows, probes = [], []
        for index, state in enumerate(self.states):
            b = state.boundary
            rows.append(
                {"boundary": index, "source": b.source}
                | {c: b.group.get(c) for c in self.group_columns}
                | {
                    "kind": b.kind,
                    "low": state.low,
                    "high": state.high,
                    "resolved": state.resolved,
                    "status": _status(state),
                    "grid_low": b.low,
                    "grid_high": b.high,
                    "probes": sum(1 for p in state.probes.values() if p.n > 0),
                    "generations": state.generations,
                    "tokens": state.tokens,
                    "new_generations": state.generations - state.prior_generations,
                }
            )
            probes += [
                _probe_row(index, state, p)
                for p in sorted(state.probes.values(), key=lambda p: p.budget)
                if p.n > 0
            ]
        generations = collected.height
        return RefineResult(
            boundaries=pl.DataFrame(rows, schema=_boundary_schema(self.schema), orient="row"),
            probes=pl.DataFrame(probes, schema=_PROBE_SCHEMA, orient="row"),
            untested=untested_frame(self.untested, self.group_columns),
            collected=collected,
            generations=generations,
            dense_generations=self.dense_generations,
            params=params,
            trials=trials,
        )


_PROBE_SCHEMA: dict[str, pl.DataType] = {
    "boundary": pl.Int64(),
    "budget": pl.Int64(),
    "n": pl.Int64(),
    "sessions": pl.Int64(),
    "level": pl.Float64(),
    "mu_left": pl.Float64(),
    "mu_right": pl.Float64(),
    "llr": pl.Float64(),
    "decision": pl.String(),
    "batches": pl.Int64(),
    "on_disk": pl.Boolean(),
}


def _boundary_schema(groups: dict[str, pl.DataType]) -> dict[str, pl.DataType]:
    return (
        {"boundary": pl.Int64(), "source": pl.String()}
        | groups
        | {
            "kind": pl.String(),
            "low": pl.Int64(),
            "high": pl.Int64(),
            "resolved": pl.Boolean(),
            "status": pl.String(),
            "grid_low": pl.Int64(),
            "grid_high": pl.Int64(),
            "probes": pl.Int64(),
            "generations": pl.Int64(),
            "tokens": pl.Int64(),
            "new_generations": pl.Int64(),
        }
    )


def _status(state: BoundaryState) -> str:
    if state.resolved:
        return "resolved"
    if not state.consistent:
        return "inconsistent"
    return state.stopped or "undecided"


def _probe_row(index: int, state: BoundaryState, probe: Any) -> tuple[Any, ...]:
    b = state.boundary
    if probe.decision == LEFT:
        decision = b.left_state
    elif probe.decision == RIGHT:
        decision = b.right_state
    elif probe.misfit is not None:
        decision = probe.misfit
    else:
        decision = "undecided" if probe.exhausted else "pending"
    return (
        index,
        probe.budget,
        probe.n,
        probe.sessions,
        probe.level,
        probe.mu_left,
        probe.mu_right,
        probe.llr,
        decision,
        probe.batches,
        probe.on_disk,
    )


def _default_prober(path: Path | None, plan: _Plan) -> Prober | None:
    """Return the run's own collector when a run directory has work, else None."""
    if path is None or not plan.wanted():
        return None
    try:
        from collectors.refine import run_prober
    except ImportError as exc:
        raise RegimesInputError(
            f"probing a run needs the collectors and torch ({exc}); install them with "
            "pip install 'regimes[collect]', or pass probe="
        ) from None
    return run_prober(path)


def _row_counts(
    rows: pl.DataFrame, group_columns: list[str]
) -> dict[tuple[tuple[Any, ...], int], tuple[int, int, int]]:
    """Per (curve, budget): generations, tokens generated and measured trials."""
    if rows.height == 0:
        return {}
    warm = pl.col("warmup").fill_null(False) if "warmup" in rows.columns else pl.lit(False)
    tokens = (
        pl.col("new_tokens").fill_null(pl.col("budget"))
        if "new_tokens" in rows.columns
        else pl.col("budget")
    )
    table = rows.group_by([*group_columns, "budget"]).agg(
        pl.len().alias("_g"), tokens.sum().alias("_t"), (~warm).sum().alias("_m")
    )
    return {
        (tuple(r[c] for c in group_columns), int(r["budget"])): (
            int(r["_g"]),
            int(r["_t"]),
            int(r["_m"]),
        )
        for r in table.iter_rows(named=True)
    }


def _charge_earlier_probes(
    states: list[BoundaryState], off_grid: pl.DataFrame, group_columns: list[str]
) -> None:
    """Start each boundary's spending at what earlier calls spent inside its bracket."""
    counts = _row_counts(off_grid, group_columns)
    for state in states:
        b = state.boundary
        curves = {c.curve for c in b.components}
        for (curve, budget), (generations, tokens, _) in counts.items():
            if curve in curves and b.low < budget < b.high:
                state.generations += generations
                state.tokens += tokens
        state.prior_generations = state.generations


def _speedup(on_grid: pl.DataFrame, options: dict[str, Any]) -> Any:
    """Return the speedup result when the grid has both cache settings, else None."""
    if "use_cache" not in on_grid.columns or on_grid.get_column("use_cache").n_unique() < 2:
        return None
    from regimes.speedup import cache_speedup

    # the speedup resamples nothing: the detection's bootstrap options are not its own
    shared = {k: v for k, v in options.items() if k not in ("n_boot", "seed")}
    try:
        return cache_speedup(on_grid, **shared)
    except RegimesInputError:
        return None


def _inseparable(boundary: Boundary) -> str:
    return (
        f"{boundary.source} {boundary.kind} ({boundary.low}, {boundary.high}): a step of "
        f"x{math.exp(abs(boundary.step())):.3g} cannot be decided at one budget against "
        "the run's noise within max_trials (the cell-to-cell wobble and the uncertainty of "
        "the two levels do not shrink with more trials)"
    )


def _dense_generations(
    on_grid: pl.DataFrame, group_columns: list[str], states: list[BoundaryState]
) -> int:
    """Count the generations of a dense 1-token grid over the grid's range.

    For the curves being refined, with the run's generations per budget (warm-ups
    included).
    """
    curves = {c.curve for s in states for c in s.boundary.components}
    if not curves:
        return 0
    budgets = on_grid.get_column("budget")
    width = int(budgets.max()) - int(budgets.min()) + 1  # type: ignore[arg-type]
    per_cell = on_grid.group_by([*group_columns, "budget"]).agg(pl.len().alias("_g"))
    per_curve = per_cell.group_by(group_columns or pl.lit(0)).agg(pl.col("_g").median())
    total = 0.0
    for row in per_curve.iter_rows(named=True):
        if tuple(row[c] for c in group_columns) in curves:
            total += float(row["_g"]) * width
    return int(round(total))


def _rounds(
    plan: _Plan,
    prober: Prober | None,
    max_generations: int | None,
    max_seconds: float | None,
    started: float,
) -> pl.DataFrame:
    """Probe the open boundaries round by round until done or out of allowance."""
    if prober is None:
        plan.stop_open("max_generations" if max_generations == 0 else "no prober")
        return pl.DataFrame()
    warmup = int(getattr(prober, "warmup", 0))
    spent = 0
    collected: list[pl.DataFrame] = []
    while wanted := plan.wanted():
        if max_seconds is not None and time.monotonic() - started >= max_seconds:
            plan.stop_open("max_seconds")
            break
        room = math.inf if max_generations is None else max_generations - spent
        requests, askers = plan.units(wanted, warmup, room)
        if not requests:
            break
        rows = prober(requests)
        spent += rows.height
        collected.append(rows)
        plan.record(rows, askers)
    return pl.concat(collected, how="diagonal_relaxed") if collected else pl.DataFrame()
