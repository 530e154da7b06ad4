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
stopped. What measures a probe is given, never looked up: this torch-free package does
not import the collectors. ``collectors.refine.run_prober(run_dir)`` measures into a run
directory, appending crash-safe parts (the ``regimes refine`` command passes it);
:class:`SimulatedProbe` answers from a known injected interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from regimes._labels import text_label
from regimes._refine.oracle import SimulatedProbe
from regimes._refine.plan import Plan, ProbeRequest, Settings
from regimes._result import AnalysisResult
from regimes._summary import Summary
from regimes.data.schema import RegimesInputError, as_polars, check_fraction

__all__ = ["ProbeRequest", "Prober", "RefineResult", "SimulatedProbe", "refine_boundaries"]

Prober = Callable[[Sequence[ProbeRequest]], pl.DataFrame]
"""``probe(requests) -> DataFrame``: measures a round's :class:`ProbeRequest` list."""


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
        from regimes._findings import refinement_findings

        return refinement_findings(self)

    def _summary(self) -> Summary:
        """One line per boundary, then the cost against a dense grid."""
        head = (
            f"Boundary refinement: {self.boundaries.height} boundar"
            f"{'y' if self.boundaries.height == 1 else 'ies'}, resolution "
            f"{self.params.get('resolution')}, error rate {self.params.get('error_rate')}"
        )
        out = Summary().add_heading(head, above="", below=None)
        out.add_rows(self.boundaries.iter_rows(named=True), self._line)
        out.add_untested(self.untested, head=None, indent="  not refined: ", label=self._label)
        cost = self.cost()
        return out if cost is None else out.add_lines([cost])

    def cost(self) -> str | None:
        """Return the generations the probes took against a dense grid; ``None`` if unknown."""
        if not self.dense_generations:
            return None
        spent = int(self.boundaries.get_column("generations").sum())
        return (
            f"Probes so far: {spent} generation(s), {spent / self.dense_generations:.1%} "
            f"of the {self.dense_generations} a dense 1-token grid would need (this "
            f"call: {self.generations})."
        )

    def _label(self, row: dict[str, Any]) -> str:
        """Label a boundary by the columns that tell the curves apart, where it has them."""
        return text_label(row, self.params.get("label_columns", []), present=True)

    def _line(self, row: dict[str, Any]) -> str:
        return (
            f"{row['source']} {row['kind']} of {self._label(row)}: "
            f"({row['low']}, {row['high']}) from grid ({row['grid_low']}, "
            f"{row['grid_high']}), {row['status']}; {row['probes']} probe(s), "
            f"{row['generations']} generation(s) ({row['new_generations']} now), "
            f"{row['tokens']} tokens"
        )


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
        ``max_generations``). For a run directory,
        ``collectors.refine.run_prober(run)`` measures with the run's own spec (needs
        torch; what ``regimes refine`` passes). Without one, a frame's boundaries are
        evaluated on what it holds (status ``no prober``), and a run directory that
        still needs probes is refused (``max_generations=0`` reads it back instead).
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
        or a run directory that needs probes and no ``probe`` to measure them.

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
    settings = Settings(resolution, error_rate, max_trials, min_trials, min_sessions)
    _check(settings, max_generations, max_seconds)
    trials, meta, path = _read(run)
    budgets = _grid(trials, meta, grid)
    detect = dict(alpha=alpha, min_ratio=min_ratio, n_boot=n_boot, seed=seed)
    plan = Plan.build(trials, budgets, settings, detect)
    if probe is None and path is not None and max_generations != 0 and plan.wanted():
        raise _no_prober(path)
    prober = None if max_generations == 0 else probe
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
    boundaries, probes, untested = plan.tables()
    return RefineResult(
        boundaries=boundaries,
        probes=probes,
        untested=untested,
        collected=collected,
        generations=collected.height,
        dense_generations=plan.dense_generations,
        params=params,
        trials=everything,
    )


def _no_prober(path: Path) -> RegimesInputError:
    """Say that a run directory's open boundaries need a prober, and how to get one."""
    return RegimesInputError(
        f"the run {str(path)!r} has boundaries to probe and no probe= to measure them: "
        "run `regimes refine RUN` (it measures with the run's spec), pass "
        "probe=collectors.refine.run_prober(RUN) (needs torch: pip install "
        "'regimes[collect]'), or pass max_generations=0 to read back the probes on disk"
    )


def _check(settings: Settings, max_generations: int | None, max_seconds: float | None) -> None:
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


def _rounds(
    plan: Plan,
    prober: Prober | None,
    max_generations: int | None,
    max_seconds: float | None,
    started: float,
) -> pl.DataFrame:
    """Probe the open boundaries round by round until done or out of allowance."""
    if prober is None:
        plan.stop_open("max_generations" if max_generations == 0 else "no prober")
        return pl.DataFrame()
    if not plan.wanted():
        return pl.DataFrame()  # before ``warmup`` is read: a lazy prober stays unbuilt
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
