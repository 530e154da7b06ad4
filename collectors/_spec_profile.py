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

``profile = "auto"`` (or ``{ budgets = "auto", trials = N, alpha = A, min_ratio = R }``,
each of the last three optional: 3 trials, detection's own defaults) chooses the budgets
itself: once every timed trial is on disk the run's detection looks at them, and a few
budgets inside and around each regime it finds are profiled
(:mod:`collectors._profile_auto`).

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

__all__ = [
    "AUTO",
    "AutoProfile",
    "Profile",
    "SlowAttention",
    "check_profile",
    "check_slow_attention",
    "profile_in_grid",
]

AUTO = "auto"
"""The value of ``profile`` (or of its ``budgets``) that lets the timed trials choose."""


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
class AutoProfile(Profile):
    """Profiled generations at budgets the timed trials choose (``profile = "auto"``).

    Its ``budgets`` are empty until the run's detection has chosen them; the run then
    profiles ``trials`` generations per session of each case at the chosen budgets,
    detecting with ``alpha`` and ``min_ratio`` (``None``: detection's defaults).

    Examples
    --------
    >>> AutoProfile().to_dict()
    'auto'
    >>> AutoProfile(trials=2, min_ratio=2.0).to_dict()
    {'budgets': 'auto', 'trials': 2, 'min_ratio': 2.0}
    """

    budgets: tuple[int, ...] = ()
    trials: int = 3
    alpha: float | None = None
    min_ratio: float | None = None

    def to_dict(self) -> Any:
        """Return ``"auto"``, or the table that specifies it where it sets anything."""
        if (self.trials, self.alpha, self.min_ratio) == (3, None, None):
            return AUTO
        table: dict[str, Any] = {"budgets": AUTO, "trials": self.trials}
        table.update({k: v for k in ("alpha", "min_ratio") if (v := getattr(self, k)) is not None})
        return table


def _auto_profile(key: str, value: Any) -> AutoProfile:
    """Check ``"auto"`` or ``{ budgets = "auto", trials, alpha, min_ratio }``."""
    if isinstance(value, str):
        return AutoProfile()
    allowed = ("budgets", "trials", "alpha", "min_ratio")
    for name in value:
        if name not in allowed:
            raise SpecError(
                f"unknown key {name!r} in {key!r}{checks.suggest(str(name), allowed)}"
                ' (with budgets = "auto": trials, alpha, min_ratio)'
            )
    trials = checks.int_value(f"{key}.trials", value.get("trials", 3), minimum=1)
    alpha = value.get("alpha")
    if alpha is not None and not (_is_number(alpha) and 0 < alpha < 1):
        raise SpecError(f"'{key}.alpha' must be a number between 0 and 1, got {alpha!r}")
    min_ratio = value.get("min_ratio")
    if min_ratio is not None and not (_is_number(min_ratio) and min_ratio > 1):
        raise SpecError(f"'{key}.min_ratio' must be a number above 1, got {min_ratio!r}")
    return AutoProfile(
        trials=trials,
        alpha=None if alpha is None else float(alpha),
        min_ratio=None if min_ratio is None else float(min_ratio),
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _is_auto(value: Any) -> bool:
    if isinstance(value, Mapping):
        return isinstance(value.get("budgets"), str) and value["budgets"] == AUTO
    return isinstance(value, str) and value == AUTO


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
    """Check ``profile``: ``"auto"``, or a table of ``budgets``, ``trials``, ``first``.

    ``budgets`` are whole numbers >= 1, or ``"auto"`` (:class:`AutoProfile`).

    ``first`` (optional, default false) runs the profiled generations before the
    measured trials of their model.
    """
    if value is None or isinstance(value, Profile):
        return value
    if _is_auto(value):
        return _auto_profile(key, value)
    if not isinstance(value, Mapping):
        raise SpecError(
            f"{key!r} must be a table {{ budgets = [...], trials = N }} or {AUTO!r}, "
            f"got {value!r} ({checks.type_name(value)})"
        )
    first = False
    if "first" in value:
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
