"""The schedule: a seeded, shuffled, interleaved order of generations per session.

Within a session the cases are grouped by what must be loaded, the (model, backend,
dtype) triple, so each model is built once per session and freed before the next
(memory stays bounded by one model). Group order is shuffled per session. Inside a
group run ``trials`` rounds; round :math:`r` runs trial :math:`r` of every case of the
group in a fresh random permutation. Each budget is therefore measured once per round,
spread over the whole time the group runs, so a slow drift (thermal throttling, a
background job) adds noise to every budget alike instead of masquerading as a budget
effect. The permutations come from ``numpy.random.default_rng((seed, session))``: the
same spec gives the same order.

Warm-ups are lazy: in each process, a case's ``warmup`` warm-up generations run
immediately before that case's first measured trial in that process (so, in a fresh
session, inside round 0 just before the case's turn). A sliced or interrupted process
has therefore warmed only the cases it measured, and a process that resumes warms
only the cases it reaches, instead of paying every case's warm-ups up front. That is
``warmup_policy = "per-case"``; ``"max-first"`` runs each loaded model's warm-ups at its
largest budget before its first measured trial in a process (one generation then
visits every KV length the model's trials will), and ``"none"`` runs none. Warm-ups
draw no random numbers, so the measured order is the same under every policy.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._state import RunState
from .spec import Case, SweepSpec

__all__ = [
    "ScheduledTrial",
    "generations_left",
    "iter_measured",
    "iter_plan",
    "measured_left_per_case",
    "measured_order",
    "plan_session",
    "profiled_left_per_case",
    "schedule",
]


@dataclass(frozen=True)
class ScheduledTrial:
    """One generation to run: a case, in a session, as warm-up or measured trial."""

    case: Case
    session: int
    trial: int
    warmup: bool
    profiled: bool = False
    """A generation under the profiler: it writes the ``ops`` table, never a trial row."""

    @property
    def key(self) -> tuple[Any, ...]:
        """The trial's identity: :data:`regimes.data.io.TRIAL_KEY` order, then attention."""
        c = self.case
        return (
            c.model,
            c.backend,
            c.dtype,
            c.use_cache,
            c.prompt_tokens,
            c.budget,
            self.session,
            self.trial,
            self.warmup,
            c.attn_implementation,
        )


def iter_measured(spec: SweepSpec, session: int) -> Iterator[ScheduledTrial]:
    """Yield the measured trials of one session in execution order (groups, then rounds).

    Lazily: the permutations are drawn as the rounds are reached, in the same sequence
    as when the whole order is listed, so a session of millions of trials starts at once.
    """
    return _iter_groups(spec, session, profiled=False)


_PROFILE_STREAM = 1
"""Seeds the profiled generations' order apart from the measured one's, so that adding a
profile to a spec leaves the measured order as it was."""


def _iter_groups(spec: SweepSpec, session: int, *, profiled: bool) -> Iterator[ScheduledTrial]:
    """Each loaded model's measured rounds; then, if asked, its profiled generations.

    Profiled generations (spec key ``profile``) run after the measured trials of their
    model in the session (before them with ``profile.first``), ``profile.trials``
    rounds of the profiled cases, each round in a fresh permutation of its own seeded
    stream.
    """
    rng = np.random.default_rng((spec.seed, session))
    other = np.random.default_rng((spec.seed, session, _PROFILE_STREAM))
    cases = spec.cases()
    groups = [list(g) for _, g in itertools.groupby(cases, key=lambda c: c.load_key)]
    first = spec.profile is not None and spec.profile.first
    for g in rng.permutation(len(groups)):
        group = groups[g]
        if first:
            yield from _profiled_rounds(spec, group, session, other, profiled)
        for r in range(spec.trials):
            for i in rng.permutation(len(group)):
                yield ScheduledTrial(group[i], session, r, False)
        if not first:
            yield from _profiled_rounds(spec, group, session, other, profiled)


def _profiled_rounds(
    spec: SweepSpec, group: list[Case], session: int, rng: np.random.Generator, profiled: bool
) -> Iterator[ScheduledTrial]:
    """One loaded model's profiled generations, round by round (none unless asked)."""
    if not profiled or spec.profile is None:
        return
    chosen = [c for c in group if c.budget in spec.profile.budgets]
    for r in range(spec.profile.trials if chosen else 0):
        for i in rng.permutation(len(chosen)):
            yield ScheduledTrial(chosen[i], session, r, False, profiled=True)


def measured_order(spec: SweepSpec, session: int) -> list[ScheduledTrial]:
    """List the measured trials of one session in execution order (groups, then rounds)."""
    return list(iter_measured(spec, session))


def _warm_before_first(
    measured: Iterable[ScheduledTrial],
    count: int,
    warmups_stored: dict[tuple[Case, int], int],
    group: Callable[[Case], Hashable],
    warm_case: Callable[[Case], Case],
) -> Iterator[ScheduledTrial]:
    """Put ``count`` warm-ups before the first trial of each ``group`` in ``measured``.

    The warm-ups run ``warm_case`` of the trial's case. Their numbers continue after
    the ``warmups_stored`` ones of that (case, session), so that no key repeats across
    resumes.
    """
    warmed: set[Hashable] = set()
    for t in measured:
        if group(t.case) not in warmed:
            warmed.add(group(t.case))
            case = warm_case(t.case)
            first = warmups_stored.get((case, t.session), 0)
            yield from (ScheduledTrial(case, t.session, first + w, True) for w in range(count))
        yield t


def _largest_cases(spec: SweepSpec) -> dict[tuple[Any, ...], Case]:
    """Map each loaded model to its case with the largest budget (then prompt length).

    Ties go to the case first in spec order.
    """
    largest: dict[tuple[Any, ...], Case] = {}
    for case in spec.cases():
        top = largest.get(case.load_key)
        if top is None or (case.budget, case.prompt_tokens) > (top.budget, top.prompt_tokens):
            largest[case.load_key] = case
    return largest


def _with_warmups(
    measured: Iterable[ScheduledTrial],
    spec: SweepSpec,
    warmups_stored: dict[tuple[Case, int], int],
) -> Iterator[ScheduledTrial]:
    """Add the warm-ups ``spec.warmup_policy`` asks for to a measured order.

    ``per-case``: each case's warm-ups just before its first trial; ``max-first``: each
    loaded model's warm-ups, at its largest case, before its first trial; ``none``.
    """
    if spec.warmup_policy == "none":
        return iter(measured)
    if spec.warmup_policy == "max-first":
        largest = _largest_cases(spec)
        return _warm_before_first(
            measured,
            spec.warmup,
            warmups_stored,
            lambda case: case.load_key,
            lambda case: largest[case.load_key],
        )
    return _warm_before_first(
        measured, spec.warmup, warmups_stored, lambda case: case, lambda case: case
    )


def schedule(spec: SweepSpec, session: int) -> list[ScheduledTrial]:
    """List every generation of one session in execution order, warm-ups included.

    Deterministic in ``(spec.seed, session)``: the warm-ups draw no random numbers, so
    the measured order does not depend on ``spec.warmup``.

    Parameters
    ----------
    spec : SweepSpec
        The sweep.
    session : int
        The session's number (it seeds the shuffles).

    Returns
    -------
    list of ScheduledTrial
        Every generation of the session, in the order it runs.

    See Also
    --------
    plan_session : what is left of a session, given what a run already holds.
    """
    return list(_with_warmups(iter_measured(spec, session), spec, {}))


def iter_plan(spec: SweepSpec, session: int, state: RunState) -> Iterator[ScheduledTrial]:
    """Yield what a process starting ``session`` now runs, given what ``state`` holds.

    The measured order of :func:`schedule` (with each model's profiled generations
    after its measured trials, spec key ``profile``), less the trials already stored
    and every trial of a case that failed in this session; then each case left gets
    fresh warm-ups immediately before its first remaining trial (whatever an earlier
    process warmed is gone), numbered after the warm-ups already stored for that
    (case, session). Lazy, as :func:`iter_measured` is.
    """
    state = state.named_by(spec)
    # the failed cases, looked up once per case rather than once per trial
    failed = state.failed_in(session)
    blocked = {c for c in spec.cases() if c.base in failed} if failed else set()
    left = (t for t in _iter_groups(spec, session, profiled=True) if t.case not in blocked)
    if state.done or state.profiled:
        left = (t for t in left if t.key not in (state.profiled if t.profiled else state.done))
    return _with_warmups(left, spec, state.warmups_stored)


def plan_session(spec: SweepSpec, session: int, state: RunState) -> list[ScheduledTrial]:
    """List what a process starting ``session`` now runs (:func:`iter_plan`, listed)."""
    return list(iter_plan(spec, session, state))


def measured_left_per_case(spec: SweepSpec, session: int, state: RunState) -> dict[Case, int]:
    """Count the measured trials each case of ``session`` has left, without planning them.

    As many as :func:`iter_plan` yields, from counts: ``trials`` less those stored,
    none for a case that failed in the session.
    """
    stored = state.measured_counts(spec)
    failed = state.failed_in(session)
    return {
        case: 0 if failed and case.base in failed else max(spec.trials - stored[case, session], 0)
        for case in spec.cases()
    }


def profiled_left_per_case(spec: SweepSpec, session: int, state: RunState) -> dict[Case, int]:
    """Count the profiled generations each case of ``session`` has left (spec key ``profile``).

    As many as :func:`iter_plan` yields: ``profile.trials`` for each case at a profiled
    budget, less those the ``ops`` table holds, none for a case that failed in the session.
    """
    profile = spec.profile
    if profile is None or not profile.budgets:
        return {}
    named = state.named_by(spec)
    stored = Counter((_stored_case(key), key[6]) for key in named.profiled if key[6] == session)
    failed = state.failed_in(session)
    return {
        case: 0
        if failed and case.base in failed
        else max(profile.trials - stored[case, session], 0)
        for case in spec.cases()
        if case.budget in profile.budgets
    }


def _stored_case(key: tuple[Any, ...]) -> Case:
    """Name the case of a stored key (:data:`regimes.data.io.TRIAL_KEY` order, attention last)."""
    model, backend, dtype, use_cache, prompt_tokens, budget = key[:6]
    return Case(model, backend, dtype, use_cache, prompt_tokens, budget, key[9])


def generations_left(spec: SweepSpec, session: int, state: RunState) -> Counter[Case]:
    """Count the generations, warm-ups included, :func:`iter_plan` yields for each case.

    Measured trials, profiled generations and warm-ups: every case with a generation
    left is warmed again, as :func:`iter_plan` warms it. Warm-ups are counted under the
    case they run (under ``max-first``, the loaded model's largest), as the session
    runner counts what a failure skips.
    """
    counts = Counter({c: n for c, n in measured_left_per_case(spec, session, state).items() if n})
    counts.update({c: n for c, n in profiled_left_per_case(spec, session, state).items() if n})
    if spec.warmup_policy == "per-case":
        for case in list(counts):
            counts[case] += spec.warmup
    elif spec.warmup_policy == "max-first":
        largest = _largest_cases(spec)
        for load_key in {case.load_key for case in counts}:
            counts[largest[load_key]] += spec.warmup
    return counts
