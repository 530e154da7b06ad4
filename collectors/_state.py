"""What a run directory already holds, as far as planning the rest of a sweep needs it.

A run directory is created by the first sweep of a spec and then only appended to:
:class:`RunState` reads what is on disk (measured keys, failed cases, warm-ups stored,
the next execution ``order``) so that a resumed session runs exactly what is left.
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import RunWriter, read_meta

from .spec import Case, SpecError, SweepSpec

__all__ = [
    "CASE_FIELDS",
    "RunState",
    "case_dict",
    "check_run_dir",
    "error_row",
    "remove_stale_temp_files",
]

CASE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(Case) if f.name != "attn_implementation"
)
"""Case columns, in the order they lead :data:`regimes.data.io.TRIAL_KEY` (the trial
table records the attention implementation that ran in a column of its own)."""


def case_dict(case: Case) -> dict[str, Any]:
    """Map the case's column names to its values."""
    return {name: getattr(case, name) for name in CASE_FIELDS}


@dataclass(frozen=True)
class RunState:
    """What a run directory already holds, as far as planning needs it."""

    done: frozenset[tuple[Any, ...]]
    failed: frozenset[tuple[Case, int]]
    warmups_stored: dict[tuple[Case, int], int]
    next_order: int
    run_id: str
    sessions: frozenset[int] = frozenset()
    """Every session number with a trial or an error on disk."""
    profiled: frozenset[tuple[Any, ...]] = frozenset()
    """Keys of the profiled generations on disk (``ops`` table), in the order of ``done``."""

    def named_by(self, spec: SweepSpec) -> RunState:
        """Name the stored trials as ``spec`` names its cases.

        Trials record the attention implementation that ran; a spec that leaves it
        to the model's default names its cases without one. Failed cases are stored
        without it (the ``errors`` table has no such column).
        """
        if spec.attn_implementation != (None,):
            return self
        done = frozenset((*key[:-1], None) for key in self.done)
        profiled = frozenset((*key[:-1], None) for key in self.profiled)
        warm: dict[tuple[Case, int], int] = {}
        for (case, session), n in self.warmups_stored.items():
            warm[case.base, session] = max(n, warm.get((case.base, session), 0))
        return replace(self, done=done, warmups_stored=warm, profiled=profiled)

    def measured_counts(self, spec: SweepSpec) -> Counter[tuple[Case, int]]:
        """Count the measured trials stored per (case, session), cases named as ``spec`` does.

        Counted once per state (a cached table): planning asks for every session, and a
        big run holds millions of keys.
        """
        return self._counts_without_attn if spec.attn_implementation == (None,) else self._counts

    @cached_property
    def _counts(self) -> Counter[tuple[Case, int]]:
        return Counter((_case(key, key[9]), key[6]) for key in self.done)  # keys are unique

    @cached_property
    def _counts_without_attn(self) -> Counter[tuple[Case, int]]:
        # without the attention column two stored keys may name one trial: count it once
        trials = {key[:8] for key in self.done}
        return Counter((_case(key, None), key[6]) for key in trials)

    def failed_in(self, session: int) -> frozenset[Case]:
        """Return the cases that failed in ``session``, named without their attention."""
        return self._failed_by_session.get(session, frozenset())

    @cached_property
    def _failed_by_session(self) -> dict[int, frozenset[Case]]:
        by_session: dict[int, set[Case]] = {}
        for case, session in self.failed:
            by_session.setdefault(session, set()).add(case)
        return {session: frozenset(cases) for session, cases in by_session.items()}

    @classmethod
    def read(cls, writer: RunWriter) -> RunState:
        """Read the state of the run ``writer`` appends to."""
        run = writer.existing()
        trials, errors = run.trials, run.errors
        case_cols = list(CASE_FIELDS)
        measured = trials.filter(~pl.col("warmup"))
        key = [*case_cols, "session", "trial", "warmup", "attn_implementation"]
        done = frozenset(measured.select(key).iter_rows())
        failed = frozenset(
            (Case(*row[:-1]), row[-1]) for row in errors.select([*case_cols, "session"]).iter_rows()
        )
        warm = (
            trials.filter(pl.col("warmup"))
            .group_by([*case_cols, "attn_implementation", "session"])
            .agg(pl.col("trial").max() + 1)
        )
        warmups_stored = {(Case(*row[:-2]), row[-2]): row[-1] for row in warm.iter_rows()}
        next_order = int(trials["order"].max()) + 1 if trials.height else 0  # type: ignore[arg-type]
        sessions = frozenset(trials["session"].to_list()) | frozenset(errors["session"].to_list())
        profiled = frozenset(
            run.ops.with_columns(pl.lit(False).alias("warmup")).select(key).unique().iter_rows()
        )
        return cls(done, failed, warmups_stored, next_order, writer.run_id, sessions, profiled)


def _case(key: tuple[Any, ...], attn: str | None) -> Case:
    """Name the case of a stored trial key (:data:`regimes.data.io.TRIAL_KEY` order)."""
    model, backend, dtype, use_cache, prompt_tokens, budget = key[:6]
    return Case(model, backend, dtype, use_cache, prompt_tokens, budget, attn)


def error_row(
    run_id: str,
    case: Case,
    session: int,
    exc: BaseException | None,
    *,
    error_type: str | None = None,
    message: str | None = None,
    trace: str | None = None,
) -> dict[str, Any]:
    """Build a row of the ``errors`` table: the case, its session and what went wrong."""
    return {
        "run_id": run_id,
        "session": session,
        **case_dict(case),
        "error_type": error_type or type(exc).__name__,
        "error": message if message is not None else str(exc),
        "traceback": trace if trace is not None else "".join(traceback.format_exception(exc)),
    }


def check_run_dir(spec: SweepSpec, run_dir: Path) -> None:
    """Refuse a directory that holds another spec's run, or something else than a run.

    Called before anything is written, so a refused directory is left as it was.
    """
    meta_path = run_dir / "meta.json"
    if meta_path.exists():
        # Read as every reader reads it: a regular file holding a JSON object whose keys
        # have the kinds regimes writes (a list or a deep nest is one line, not a crash).
        stored = read_meta(meta_path).get("spec")
        if not isinstance(stored, dict):
            raise SpecError(f"{str(run_dir)!r} holds a run without a readable sweep spec")
        previous = SweepSpec.from_dict(stored, check_available=False)
        differences = previous.differences(spec)
        if differences:
            detail = "; ".join(
                f"{k}: {getattr(previous, k)!r} there, {getattr(spec, k)!r} now"
                for k in differences
            )
            raise SpecError(
                f"{str(run_dir)!r} holds a run of a different spec ({detail}); "
                "use a new output directory, or the original spec to resume"
            )
    elif run_dir.exists() and (
        not run_dir.is_dir() or any(p.name != ".lock" for p in run_dir.iterdir())
    ):
        raise SpecError(
            f"{str(run_dir)!r} exists and is not a run directory; choose an empty or new one"
        )


def remove_stale_temp_files(run_dir: Path) -> None:
    """Delete temporary files of writes that were killed mid-way.

    Only called with the run locked, so none of them can belong to a live writer: the
    parts' and ``meta.json``'s (a full disk while rewriting it).
    """
    for stale in [*run_dir.glob("*/.part-*.tmp"), *run_dir.glob(".meta.json.*.tmp")]:
        stale.unlink()
