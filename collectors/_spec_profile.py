"""The spec keys of operator profiling: ``profile`` and ``slow_attention``.

``profile = { budgets = [...], trials = 3 }`` adds, in every session, ``trials``
profiled generations of each case whose budget is listed. They run after the session's
measured trials of the same loaded model, under :func:`torch.profiler.profile`, and
write only the run's ``ops`` table (per operator: self time on the host and, where the
backend reports it, on the device, and call counts); they are never rows of the trial
table, since a profiler costs time (:mod:`collectors.profiling`). With ``first = true``
they run *before* the measured trials of their model instead, so that they see the
process cold: with ``warmup_policy = "none"`` a profiled generation then pays whatever a
process pays the first time it meets a shape (cuDNN's attention plans, per KV length),
and the profiled rounds after the first show the same generations warm.

``slow_attention = { start, stop, factor }`` (stop inclusive, ``factor`` a whole number
>= 2) computes every scaled-dot-product attention call of a generation whose budget
lies in ``start..stop`` ``factor`` times: the attention operators are really slower
there, every other operator is untouched. It needs models running the ``sdpa``
attention implementation, and marks the run synthetic (``meta.json``:
``slow_attention``, ``synthetic: true``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import _spec_checks as checks
from ._spec_checks import SpecError

__all__ = ["Profile", "SlowAttention", "check_profile", "check_slow_attention", "profile_in_grid"]


@dataclass(frozen=True)
class Profile:
    """Profiled generations: ``trials`` per session of each case at one of ``budgets``.

    Examples
    --------
    >>> Profile((8, 16), 2).to_dict()
    {'budgets': [8, 16], 'trials': 2}
    >>> Profile((8, 16), 2, first=True).to_dict()
    {'budgets': [8, 16], 'trials': 2, 'first': True}
    """

    budgets: tuple[int, ...]
    trials: int
    first: bool = False
    """Run the profiled generations before the measured trials of their model, not after."""

    def to_dict(self) -> dict[str, Any]:
        """Return the profile as the TOML table that specifies it (``first`` only if set)."""
        table: dict[str, Any] = {"budgets": list(self.budgets), "trials": self.trials}
        if self.first:
            table["first"] = True
        return table


@dataclass(frozen=True)
class SlowAttention:
    """Attention computed ``factor`` times in generations with a budget in ``start..stop``.

    Examples
    --------
    >>> slow = SlowAttention(16, 24, 4)
    >>> slow.factor_for(8), slow.factor_for(16), slow.factor_for(24)
    (1, 4, 4)
    """

    start: int
    stop: int
    factor: int

    def factor_for(self, budget: int) -> int:
        """Return how many times attention is computed at ``budget`` (1 outside)."""
        return self.factor if self.start <= budget <= self.stop else 1

    def to_dict(self) -> dict[str, Any]:
        """Return the table that specifies it."""
        return {"start": self.start, "stop": self.stop, "factor": self.factor}


def check_profile(key: str, value: Any, known: Mapping[str, Any]) -> Profile | None:
    """Check ``profile``: a table of ``budgets`` (whole numbers >= 1), ``trials``, ``first``.

    ``first`` (optional, default false) runs the profiled generations before the
    measured trials of their model.
    """
    if value is None or isinstance(value, Profile):
        return value
    first = False
    if isinstance(value, Mapping) and "first" in value:
        first = value["first"]
        if not isinstance(first, bool):
            raise SpecError(f"'profile.first' must be true or false, got {first!r}")
        value = {k: v for k, v in value.items() if k != "first"}
    table = checks.table_value(key, value, ("budgets", "trials"), " (and optionally first)")
    listed = table["budgets"]
    if not isinstance(listed, (list, tuple)) or not listed:
        raise SpecError(f"'profile.budgets' must be a non-empty list, got {listed!r}")
    budgets = tuple(checks.int_value("profile.budgets", b, minimum=1) for b in listed)
    if len(set(budgets)) != len(budgets):
        raise SpecError(f"'profile.budgets' repeats a budget: {list(budgets)}")
    trials = checks.int_value("profile.trials", table["trials"], minimum=1)
    return Profile(tuple(sorted(budgets)), trials, first)


def check_slow_attention(key: str, value: Any, known: Mapping[str, Any]) -> SlowAttention | None:
    """Check ``slow_attention``: ``start <= stop`` and a whole ``factor`` >= 2."""
    if value is None or isinstance(value, SlowAttention):
        return value
    table = checks.table_value(key, value, ("start", "stop", "factor"))
    start = checks.int_value("slow_attention.start", table["start"], minimum=1)
    stop = checks.int_value("slow_attention.stop", table["stop"], minimum=start)
    factor = checks.int_value("slow_attention.factor", table["factor"], minimum=2)
    return SlowAttention(start, stop, factor)


def profile_in_grid(profile: Profile | None, budgets: tuple[int, ...]) -> None:
    """Refuse profiled budgets that the spec's grid does not measure."""
    if profile is None:
        return
    outside = [b for b in profile.budgets if b not in budgets]
    if outside:
        raise SpecError(
            f"'profile.budgets' {outside} are not budgets of the grid; profile budgets "
            "the sweep measures, so each profile stands beside timed trials of its case"
        )
