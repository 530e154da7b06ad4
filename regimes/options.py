"""The detection options: one object, its constraints declared once, checked in one place.

Every analysis of a run reads the same few parameters: the axes (``x``, ``y``), the
grouping (``by``, ``session``) and the detection's statistics (``alpha``,
``min_ratio``, ``direction``, ``level``, ``n_boot``, ``seed``, ``penalty``, ``fdr``,
``ratio_interval``).
:data:`PARAMETER_CONSTRAINTS` declares what each may hold, keyed by the parameter's
name as :func:`regimes.detect_regimes` spells it; :func:`check_options` is the one
validator (:func:`regimes.detect_regimes` calls it too), so a bad value is refused in
the same words whichever entry point it came through. :class:`DetectionOptions` holds
one checked set, and :meth:`DetectionOptions.for_` hands each analysis the options its
signature takes, so no caller keeps a list of who takes what.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from regimes.data.schema import check_fraction, check_min_ratio, check_n_boot, check_seed
from regimes.errors import RegimesInputError

__all__ = [
    "DIRECTIONS",
    "FDR_FAMILIES",
    "PARAMETER_CONSTRAINTS",
    "RATIO_INTERVALS",
    "DetectionOptions",
    "check_options",
]

DIRECTIONS = ("up", "down", "both")
"""Which departures are tested: slowdowns, speed-ups, or either."""

FDR_FAMILIES = ("curve", "call")
"""Benjamini-Hochberg families of the anomaly tests: each curve's own regimes (so that
a curve's answer does not depend on the other curves of the call), or the call's."""

RATIO_INTERVALS = ("bootstrap", "t")
"""Which interval an anomaly's ratio carries: the basic bootstrap interval over the
model's draws with the selection re-done in each, or the ``t`` interval of the selected
regime held fixed (the dual of its TREAT test)."""

_Check = Callable[[str, Any, Mapping[str, Any]], None]
"""A constraint: ``check(name, value, options)`` raises :class:`RegimesInputError`
naming the parameter; ``options`` holds the other values given (a bound may read them)."""


def _fraction(name: str, value: Any, options: Mapping[str, Any]) -> None:
    check_fraction(**{name: value})


def _min_ratio(name: str, value: Any, options: Mapping[str, Any]) -> None:
    check_min_ratio(value)


def _n_boot(name: str, value: Any, options: Mapping[str, Any]) -> None:
    # the floor depends on the level: a percentile bound needs replicates beyond it
    check_n_boot(value, level=options.get("level", 0.95))


def _seed(name: str, value: Any, options: Mapping[str, Any]) -> None:
    check_seed(value)


def _positive(name: str, value: Any, options: Mapping[str, Any]) -> None:
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (real and math.isfinite(value) and value > 0):
        raise RegimesInputError(f"{name} must be a positive number, got {value!r}")


def _one_of(choices: Sequence[str], why: str = "") -> _Check:
    def check(name: str, value: Any, options: Mapping[str, Any]) -> None:
        if value not in choices:
            raise RegimesInputError(f"{name} must be one of {tuple(choices)}{why}, got {value!r}")

    return check


def _column(name: str, value: Any, options: Mapping[str, Any]) -> None:
    if not isinstance(value, str) or not value:
        raise RegimesInputError(f"{name} must name a column (a non-empty string), got {value!r}")


def _optional(check: _Check) -> _Check:
    def optional(name: str, value: Any, options: Mapping[str, Any]) -> None:
        if value is not None:
            check(name, value, options)

    return optional


def _columns(name: str, value: Any, options: Mapping[str, Any]) -> None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not all(isinstance(c, str) and c for c in items):
        raise RegimesInputError(
            f"{name} must be a column name or a sequence of column names, got {value!r}"
        )


PARAMETER_CONSTRAINTS: dict[str, _Check] = {
    "alpha": _fraction,
    "level": _fraction,
    "min_ratio": _min_ratio,
    "direction": _one_of(DIRECTIONS),
    "n_boot": _n_boot,
    "seed": _seed,
    "penalty": _positive,
    "fdr": _one_of(FDR_FAMILIES, " (the Benjamini-Hochberg family)"),
    "ratio_interval": _one_of(RATIO_INTERVALS),
    "x": _column,
    "y": _column,
    "by": _optional(_columns),
    "session": _optional(_column),
}
"""What each detection option may hold, in the order the checks run.

The names are those of :func:`regimes.detect_regimes`'s signature (a test holds them
equal); the order keeps the first complaint about a call with several bad values the
one the statistics would meet first."""


def check_options(**options: Any) -> dict[str, Any]:
    """Check detection options against :data:`PARAMETER_CONSTRAINTS`; return them.

    Parameters
    ----------
    **options
        Any of the detection options, by name; those not given are not checked.

    Returns
    -------
    dict
        ``options``, unchanged.

    Raises
    ------
    RegimesInputError
        When a name is not a detection option (the closest one is named) or a value
        breaks its constraint (the message names the parameter and the value).

    Examples
    --------
    >>> check_options(alpha=0.05, direction="up")
    {'alpha': 0.05, 'direction': 'up'}
    >>> check_options(alpha=1.5)
    Traceback (most recent call last):
    ...
    regimes.errors.RegimesInputError: alpha must lie in (0, 1), got 1.5
    """
    unknown = [name for name in options if name not in PARAMETER_CONSTRAINTS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(PARAMETER_CONSTRAINTS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegimesInputError(
            f"unknown detection option {unknown[0]!r}{hint}; the options are "
            f"{', '.join(PARAMETER_CONSTRAINTS)}"
        )
    for name, check in PARAMETER_CONSTRAINTS.items():
        if name in options:
            check(name, options[name], options)
    return options


@dataclass(frozen=True)
class DetectionOptions:
    """The detection options of one analysis of a run, checked when made.

    The defaults are :func:`regimes.detect_regimes`'s (a test holds them equal); each
    field is described there. ``by`` is kept as a tuple of column names (a single name
    becomes a 1-tuple), or ``None`` for the case columns present.

    Attributes
    ----------
    x, y : str
        The position and the measured quantity.
    by : tuple of str or None
        The group columns.
    alpha, min_ratio, direction, level, n_boot, seed, penalty, session, fdr, ratio_interval
        As :func:`regimes.detect_regimes` takes them.

    Raises
    ------
    RegimesInputError
        When a value breaks its constraint (:func:`check_options`).

    Examples
    --------
    >>> from regimes.options import DetectionOptions
    >>> options = DetectionOptions(n_boot=400, by="model")
    >>> options.by, options.n_boot
    (('model',), 400)
    >>> import regimes
    >>> sorted(options.for_(regimes.cache_speedup))
    ['alpha', 'by', 'level', 'min_ratio', 'session', 'x', 'y']
    """

    x: str = "budget"
    y: str = "latency_s"
    by: tuple[str, ...] | None = None
    alpha: float = 0.05
    min_ratio: float = 1.25
    direction: str = "up"
    n_boot: int = 200
    seed: int = 0
    level: float = 0.95
    penalty: float = 2.0
    session: str | None = None
    fdr: str = "curve"
    ratio_interval: str = "bootstrap"

    def __post_init__(self) -> None:
        check_options(**{f.name: getattr(self, f.name) for f in fields(self)})
        if isinstance(self.by, str):
            object.__setattr__(self, "by", (self.by,))
        elif self.by is not None:
            object.__setattr__(self, "by", tuple(self.by))

    @classmethod
    def coerce(cls, options: DetectionOptions | None = None, **changes: Any) -> DetectionOptions:
        """Return ``options`` (default: the defaults) with ``changes`` applied, checked.

        A name that is not an option is refused with the closest one named.
        """
        check_options(**changes)
        return replace(options or cls(), **changes)

    def to_dict(self) -> dict[str, Any]:
        """Return every option by name (``by`` as a list, as the results' ``params``)."""
        out = asdict(self)
        out["by"] = None if self.by is None else list(self.by)
        return out

    def for_(self, analysis: Callable[..., Any]) -> dict[str, Any]:
        """Return the options that ``analysis`` takes, by its signature.

        Parameters
        ----------
        analysis : callable
            An analysis of the package (:func:`regimes.cache_speedup`,
            :func:`regimes.compare_runs`, an explanation ...).

        Returns
        -------
        dict
            The options named in its signature, as keyword arguments.
        """
        taken = inspect.signature(analysis).parameters
        return {name: value for name, value in self.to_dict().items() if name in taken}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Return the options' names, in the signature's order."""
        return tuple(f.name for f in fields(cls))
