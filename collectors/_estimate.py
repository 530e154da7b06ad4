"""How long a sweep will take, said before it starts.

The estimate counts what is left to generate from the spec and what the run directory
holds (:func:`collectors._schedule.generations_left`, arithmetic, never the plan
itself) and multiplies the tokens by a pace: the run's own seconds per generated token
when it already holds trials, else :data:`ASSUMED_SECONDS_PER_TOKEN`. ``regimes
collect`` prints it and asks for a confirmation when the call may run longer than
:data:`CONFIRM_ABOVE_S`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from regimes.data.io import RunWriter

from ._schedule import generations_left
from ._state import RunState
from .spec import SweepSpec

__all__ = ["ASSUMED_SECONDS_PER_TOKEN", "CONFIRM_ABOVE_S", "Estimate", "estimate_sweep"]

ASSUMED_SECONDS_PER_TOKEN = 0.01
"""The pace assumed before a run holds trials: a small model's decoding step through
``generate()`` on a laptop or a GPU box is of this order (its Python overhead alone is a
few milliseconds)."""

CONFIRM_ABOVE_S = 4 * 3600.0
"""A call estimated to run longer than this asks for a confirmation (``--yes``)."""


@dataclass(frozen=True)
class Estimate:
    """The work a sweep has left and the time it should take.

    Attributes
    ----------
    generations, tokens : int
        Generations left (warm-ups included) and the tokens they decode.
    seconds_per_token : float
        The pace used.
    measured : bool
        Whether the pace was measured on the run's own trials (else assumed).
    """

    generations: int
    tokens: int
    seconds_per_token: float
    measured: bool

    @property
    def seconds(self) -> float:
        """The estimated duration of what is left."""
        return self.tokens * self.seconds_per_token

    def describe(self) -> str:
        """Say the estimate in one line, with what it rests on."""
        source = "measured on the run's trials" if self.measured else "assumed"
        return (
            f"about {format_duration(self.seconds)} for {self.generations:,} generation(s) "
            f"of {self.tokens:,} token(s) at {self.seconds_per_token * 1000:.3g} ms per "
            f"token ({source})"
        )


def format_duration(seconds: float) -> str:
    """Write a duration with its two largest units, e.g. ``3 h 20 min`` or ``12 d 4 h``."""
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    rest = max(int(round(seconds)), 0)
    parts: list[str] = []
    for name, size in units:
        if rest >= size or (name == "s" and not parts):
            parts.append(f"{rest // size} {name}")
            rest %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def estimate_sweep(spec: SweepSpec, run_dir: Path) -> Estimate:
    """Estimate what is left of ``spec`` in ``run_dir`` (a new or an empty directory too).

    Parameters
    ----------
    spec : SweepSpec
        The sweep (its own sessions; a fleet's ``every-host`` copies are not counted).
    run_dir : pathlib.Path
        The run directory, already checked to be new, empty or a run of ``spec``.

    Returns
    -------
    Estimate
        Generations and tokens left, and the pace.
    """
    empty = RunState(frozenset(), frozenset(), {}, 0, "")
    trials = None
    if (run_dir / "meta.json").is_file():
        writer = RunWriter(run_dir, None)
        state = RunState.read(writer)
        trials = writer.existing().trials
    else:
        state = empty
    generations = tokens = 0
    for session in range(spec.sessions):
        for case, n in generations_left(spec, session, state).items():
            generations += n
            tokens += n * case.budget
    if trials is not None and trials.height and trials["budget"].sum() > 0:
        pace = float(trials["latency_s"].sum()) / float(trials["budget"].sum())
        return Estimate(generations, tokens, pace, True)
    return Estimate(generations, tokens, ASSUMED_SECONDS_PER_TOKEN, False)
