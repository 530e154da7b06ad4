"""The boundaries being refined, the evidence they share, and what they cost.

:class:`Plan` is the state of one :func:`regimes.refine_boundaries` call: built from a
detection on the grid (every significant boundary bracketed, the probes already on disk
taken in and charged), asked each round for the batches its open boundaries want, and
told what the prober measured. The public facade is :mod:`regimes.refine`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from regimes._labels import label_columns
from regimes._refine.brackets import Boundary, boundaries_from, curve_noise
from regimes._refine.design import BoundaryState, Evidence
from regimes._refine.sprt import LEFT, RIGHT, Thresholds
from regimes._result import untested_frame
from regimes.data.schema import RegimesInputError

__all__ = ["Plan", "ProbeRequest", "Settings"]


@dataclass(frozen=True)
class ProbeRequest:
    """One batch to measure: ``trials`` generations of ``budget`` tokens for ``case``.

    ``case`` holds the values of the curve's case columns (``model``, ``backend``,
    ``dtype``, ``use_cache``, ``prompt_tokens``... those the run has).
    """

    case: dict[str, Any]
    budget: int
    trials: int


@dataclass(frozen=True)
class Settings:
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
class Plan:
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
        settings: Settings,
        options: dict[str, Any],
    ) -> Plan:
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
        labels = label_columns(report.groups, columns)
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

    def tables(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """Return the boundaries, probes and untested tables of the final states."""
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
        return (
            pl.DataFrame(rows, schema=_boundary_schema(self.schema), orient="row"),
            pl.DataFrame(probes, schema=_PROBE_SCHEMA, orient="row"),
            untested_frame(self.untested, self.group_columns),
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
