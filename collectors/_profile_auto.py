"""``profile = "auto"``: profile a few budgets inside and around each regime found.

A run whose spec says ``profile = "auto"`` (:class:`~collectors._spec_profile.AutoProfile`)
first measures its timed trials as any run does. Once every one is on disk, the
library's own detection (:func:`regimes.detect_regimes`, with the profile's ``alpha``
and ``min_ratio`` where given) runs on them, and for every anomaly it reports, in any
group, these budgets of the grid are chosen: the anomaly's start, its end, its middle
(where it holds three budgets or more), and its nearest neighbours on the grid, as many on
either side as the operators' trend needs to be tested against (two, or three on the one
side of an anomaly at an end of the grid). The choice is recorded in ``meta.json``
under ``profile_auto`` (the budgets, why each was chosen, the anomalies, the detection
options, or why none was chosen) before any profiled generation runs, and every reader
of the run's spec (a session process, a resumed call) profiles those budgets: the
sessions of the run are resumed, and each profiles ``trials`` generations of each case
at the chosen budgets, as a ``profile`` table would. Where detection finds no anomaly
(or cannot run), nothing is profiled and ``profile_auto.reason`` says why. A rerun
never chooses again: the recorded choice stands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import polars as pl

from regimes._stats.fixed_intervals import EDGE_FLANK, SIDE_FLANK
from regimes.data.io import RunWriter
from regimes.data.io import read_meta as read_run_meta
from regimes.data.runs.parts import write_text_atomically
from regimes.errors import RegimesInputError

from ._spec_profile import AutoProfile, Profile
from .spec import SweepSpec

__all__ = ["AutoChoice", "choose_budgets", "needs_choice", "record_choice", "resolved"]

META_KEY = "profile_auto"
"""Where ``meta.json`` records the budgets ``profile = "auto"`` chose."""

_LABEL_COLUMNS = ("model", "backend", "dtype", "use_cache", "prompt_tokens", "attn_implementation")


@dataclass(frozen=True)
class AutoChoice:
    """The budgets ``profile = "auto"`` chose from the timed trials, and why.

    Attributes
    ----------
    budgets : tuple of int
        The budgets to profile, sorted (empty: nothing is profiled).
    why : dict of int to list of str
        For each budget, the anomalies and the role it plays for them.
    anomalies : list of dict
        Each anomaly detected: ``group`` (a label), ``start``, ``end``, ``ratio``.
    reason : str or None
        Why nothing is profiled, where nothing is.
    options : dict
        The detection options used (``alpha``, ``min_ratio``; ``None``: defaults).
    """

    budgets: tuple[int, ...]
    why: dict[int, list[str]] = field(default_factory=dict)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_meta(self, trials: int) -> dict[str, Any]:
        """Return what ``meta.json`` records under ``profile_auto``."""
        return {
            "budgets": list(self.budgets),
            "trials": trials,
            "why": [{"budget": b, "why": self.why[b]} for b in self.budgets],
            "anomalies": self.anomalies,
            "reason": self.reason,
            "detection": self.options,
            "chosen_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def message(self) -> str:
        """Say in one line what was chosen, or why nothing was."""
        if not self.budgets:
            return f'profile = "auto": nothing profiled: {self.reason}'
        return (
            f'profile = "auto": profiling budgets {list(self.budgets)} around '
            f"{len(self.anomalies)} anomaly(ies) of the timed trials "
            "(meta.json profile_auto says why each)"
        )


def _label(row: dict[str, Any], group_columns: list[str]) -> str:
    shown = [c for c in group_columns if c in _LABEL_COLUMNS and row.get(c) is not None]
    return ", ".join(f"{c}={row[c]}" for c in shown) or "all trials"


def _roles(grid: list[int], start: int, end: int) -> dict[int, str]:
    """Choose the grid budgets for one anomaly ``start..end``, each with its role."""
    inside = [b for b in grid if start <= b <= end]
    before = [b for b in grid if b < start]
    after = [b for b in grid if b > end]
    # the flanks the operators' trend is fitted on: as many cells as the attribution's
    # test asks of them (regimes._stats.fixed_intervals.flank_support), or one profiled
    # anomaly would be untestable; an interval at an end of the grid has one flank
    flank = SIDE_FLANK if before and after else EDGE_FLANK
    roles = {b: "trend before" for b in before[-flank:]}
    if inside:
        roles[inside[0]] = "start of"
        if len(inside) >= 3:
            roles.setdefault(inside[len(inside) // 2], "middle of")
        roles.setdefault(inside[-1], "end of")
    roles.update({b: "trend after" for b in after[:flank]})
    return roles


def _detect(trials: pl.DataFrame, profile: AutoProfile) -> Any:
    """Run the library's detection on the timed trials with the profile's options."""
    import regimes

    options = {k: v for k in ("alpha", "min_ratio") if (v := getattr(profile, k)) is not None}
    return regimes.detect_regimes(trials, **options)


def choose_budgets(
    trials: pl.DataFrame, spec: SweepSpec, batches: frozenset[int] = frozenset()
) -> AutoChoice:
    """Choose the budgets to profile from a run's timed trials.

    Parameters
    ----------
    trials : polars.DataFrame
        The run's trial table (warm-ups are ignored).
    spec : SweepSpec
        The run's spec; its ``profile`` must be an :class:`AutoProfile`.
    batches : frozenset of int, optional
        Sessions of batches added to the run (other budgets): left out.

    Returns
    -------
    AutoChoice
        For each anomaly detected, its start, end and middle (where it holds three
        budgets or more) and its neighbours on the grid; no budget, with a reason,
        where no anomaly is detected or detection cannot run.
    """
    profile = spec.profile
    assert isinstance(profile, AutoProfile)
    options = {"alpha": profile.alpha, "min_ratio": profile.min_ratio}
    measured = trials.filter(~pl.col("warmup") & ~pl.col("session").is_in(list(batches)))
    try:
        rep = _detect(measured, profile)
    except RegimesInputError as exc:
        reason = f"detection could not run on the timed trials ({exc})"
        return AutoChoice((), reason=reason, options=options)
    grid = sorted(spec.budgets)
    why: dict[int, list[str]] = {}
    anomalies = []
    for row in rep.anomalies.iter_rows(named=True):
        start, end = int(row["start"]), int(row["end"])
        label = _label(row, rep.group_columns)
        anomalies.append({"group": label, "start": start, "end": end, "ratio": row["ratio"]})
        for budget, role in _roles(grid, start, end).items():
            why.setdefault(budget, []).append(f"{role} the anomaly {start}..{end} ({label})")
    if not why:
        return AutoChoice((), reason=_no_anomaly(rep, measured.height), options=options)
    return AutoChoice(tuple(sorted(why)), why, anomalies, None, options)


def _no_anomaly(rep: Any, n: int) -> str:
    """Say why detection chose no budget: nothing found, or nothing it could test."""
    untested = rep.untested
    if untested.height and untested.height == rep.groups.height:
        reasons = "; ".join(sorted(set(untested.get_column("reason").to_list())))
        return f"detection tested no group of the {n} timed trial(s) ({reasons})"
    return (
        f"no anomaly detected in {n} timed trial(s) "
        f"(alpha {rep.params['alpha']:g}, min_ratio {rep.params['min_ratio']:g})"
    )


def needs_choice(spec: SweepSpec, meta: dict[str, Any]) -> bool:
    """Tell whether ``spec`` profiles automatically and ``meta`` records no choice yet."""
    return isinstance(spec.profile, AutoProfile) and META_KEY not in meta


def resolved(spec: SweepSpec, meta: dict[str, Any]) -> SweepSpec:
    """Return ``spec`` profiling the budgets ``meta`` records as chosen (as is otherwise).

    Before the choice, and where it chose none, an automatic profile profiles nothing
    (its budgets are empty); after it, the spec profiles the chosen budgets.
    """
    profile = spec.profile
    if not isinstance(profile, AutoProfile) or META_KEY not in meta:
        return spec
    budgets = tuple(int(b) for b in meta[META_KEY].get("budgets", []))
    return replace(spec, profile=Profile(budgets, profile.trials) if budgets else None)


def record_choice(writer: RunWriter, spec: SweepSpec) -> AutoChoice:
    """Choose the budgets from what ``writer``'s run holds and record them in ``meta.json``.

    Call with the run locked, once its timed trials are all on disk.
    """
    assert isinstance(spec.profile, AutoProfile)
    path = writer.path / "meta.json"
    meta = read_run_meta(path)
    batches = frozenset(s for entry in meta.get("batches", []) for s in entry["sessions"])
    choice = choose_budgets(writer.existing().trials, spec, batches)
    meta[META_KEY] = choice.to_meta(spec.profile.trials)
    write_text_atomically(json.dumps(meta, indent=2, default=str), path)
    writer.meta[META_KEY] = meta[META_KEY]
    return choice
