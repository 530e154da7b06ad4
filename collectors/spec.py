"""Sweep specifications: what to measure, read from TOML and checked before any work.

A sweep is the cross product

.. math::

    \\text{models} \\times \\text{backends} \\times \\text{dtypes} \\times \\text{use\\_cache}
    \\times \\text{prompt\\_tokens} \\times \\text{budgets}

of *cases*, each measured ``trials`` times in each of ``sessions`` sessions after
``warmup`` unrecorded-by-analysis warm-up generations. Example::

    models        = ["gpt2-medium"]
    backends      = ["mps"]
    dtypes        = ["float32", "float16"]
    use_cache     = [true, false]
    prompt_tokens = [65]
    budgets       = { start = 480, stop = 656, step = 16 }   # stop inclusive
    trials        = 5
    warmup        = 3
    sessions      = 2
    isolation     = "process"

Every mistake a spec can hold (an unknown key, with the closest valid one suggested; an
unknown model, dtype or engine; empty or non-positive budgets; a sequence longer than
the model's positions; a backend this machine lacks; a value of the wrong type) raises
a :class:`SpecError` naming it, so a sweep never dies an hour in on a typo.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from regimes.data.schema import RegimesInputError

from .backends import BACKEND_NAMES, get_backend
from .engines import ENGINES
from .models import DTYPES, PRESETS, WEIGHTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["Case", "ISOLATIONS", "SpecError", "SweepSpec"]

ISOLATIONS: tuple[str, ...] = ("none", "process")

# A hub id is "name" or "org/name" made of letters, digits, '-', '_' and '.'.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class SpecError(RegimesInputError):
    """A sweep specification that cannot be run; the message names the problem."""


@dataclass(frozen=True, order=True)
class Case:
    """One measured condition: a generation of ``budget`` tokens after a prompt."""

    model: str
    backend: str
    dtype: str
    use_cache: bool
    prompt_tokens: int
    budget: int

    @property
    def load_key(self) -> tuple[str, str, str]:
        """The (model, backend, dtype) that must be loaded to run this case."""
        return (self.model, self.backend, self.dtype)

    def label(self) -> str:
        cache = "cache" if self.use_cache else "no-cache"
        return (
            f"{self.model}/{self.backend}/{self.dtype}/{cache}/"
            f"prompt={self.prompt_tokens}/budget={self.budget}"
        )


def _type_name(value: Any) -> str:
    return type(value).__name__


def _is_int(value: Any) -> bool:
    # bool is a subclass of int in Python, but `trials = true` is a mistake, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _int(key: str, value: Any, *, minimum: int) -> int:
    if not _is_int(value):
        raise SpecError(f"{key!r} must be an integer, got {value!r} ({_type_name(value)})")
    if value < minimum:
        raise SpecError(f"{key!r} must be >= {minimum}, got {value}")
    return int(value)


def _choice(key: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{key!r} must be a string, one of {list(allowed)}; got {value!r}")
    if value not in allowed:
        raise SpecError(
            f"unknown {key} {value!r}{_suggest(value, allowed)}; expected one of {list(allowed)}"
        )
    return value


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(f"{key!r} must be a list, got {value!r} ({_type_name(value)})")
    if not value:
        raise SpecError(f"{key!r} is empty; give at least one value")
    return value


def _no_repeats(key: str, values: Sequence[Any]) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
    if repeated:
        raise SpecError(f"{key!r} lists {repeated} more than once")


def _suggest(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _budgets(value: Any) -> tuple[int, ...]:
    if isinstance(value, Mapping):
        allowed = ("start", "stop", "step")
        for name in value:
            if name not in allowed:
                raise SpecError(
                    f"unknown key {name!r} in 'budgets'{_suggest(name, allowed)}; "
                    "a budget range is {start, stop, step} with stop inclusive"
                )
        missing = [name for name in ("start", "stop") if name not in value]
        if missing:
            raise SpecError(f"'budgets' range lacks {missing}; give {{start, stop, step}}")
        start = _int("budgets.start", value["start"], minimum=1)
        stop = _int("budgets.stop", value["stop"], minimum=1)
        step = _int("budgets.step", value.get("step", 1), minimum=1)
        if stop < start:
            raise SpecError(f"'budgets' range is empty: stop ({stop}) < start ({start})")
        return tuple(range(start, stop + 1, step))
    items = _list("budgets", value)
    budgets = []
    for item in items:
        if not _is_int(item):
            raise SpecError(f"'budgets' must hold integers, got {item!r} ({_type_name(item)})")
        if item < 1:
            raise SpecError(f"'budgets' must be positive (max_new_tokens >= 1), got {item}")
        budgets.append(int(item))
    _no_repeats("budgets", budgets)
    return tuple(budgets)


def _model_name(name: Any, weights: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"'models' must hold non-empty strings, got {name!r}")
    if name in PRESETS:
        return name
    if weights == "random":
        raise SpecError(
            f"unknown model preset {name!r}{_suggest(name, list(PRESETS))}; presets are "
            f'{list(PRESETS)} (for a hub id or a local directory set weights = "pretrained")'
        )
    if os.path.isdir(name) or _HUB_ID.match(name):
        return name
    raise SpecError(
        f"model {name!r} is neither a preset, an existing directory nor a hub id (org/name)"
    )


def _max_positions(model: str, weights: str) -> int | None:
    preset = PRESETS.get(model)
    if preset is None or weights != "random":
        return None  # a checkpoint's limit is known once loaded; the engine checks it then
    for attribute in ("n_positions", "max_position_embeddings"):
        value = preset.config_kwargs.get(attribute)
        if _is_int(value) and value > 0:
            return int(value)
    return None


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep specification (see the module docstring for the TOML form).

    Build it with :meth:`from_toml` or :meth:`from_dict`; both validate. Lists are
    stored as tuples and budgets as the explicit list, so two specs compare equal
    exactly when they ask for the same measurements.
    """

    models: tuple[str, ...]
    backends: tuple[str, ...]
    budgets: tuple[int, ...]
    weights: str = "random"
    dtypes: tuple[str, ...] = ("float32",)
    use_cache: tuple[bool, ...] = (True,)
    prompt_tokens: tuple[int, ...] = (65,)
    trials: int = 5
    warmup: int = 1
    sessions: int = 1
    isolation: str = "none"
    instrument: bool = False
    engine: str = "generate"
    seed: int = 0

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys a spec may hold."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], *, check_available: bool = True) -> SweepSpec:
        """Read and validate a TOML spec file."""
        p = Path(path)
        if not p.is_file():
            raise SpecError(f"no sweep spec at {str(p)!r}")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{str(p)!r} is not valid TOML: {exc}") from None
        return cls.from_dict(data, check_available=check_available)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, check_available: bool = True) -> SweepSpec:
        """Validate a spec given as a mapping (the parsed TOML).

        ``check_available=False`` skips asking whether each backend exists on this
        machine, so that a spec written for another machine can still be checked.
        """
        if not isinstance(data, Mapping):
            raise SpecError(f"a sweep spec must be a table of keys, got {_type_name(data)}")
        known = cls.keys()
        for key in data:
            if key not in known:
                raise SpecError(
                    f"unknown key {key!r}{_suggest(str(key), known)}; valid keys are {list(known)}"
                )
        for key in ("models", "backends", "budgets"):
            if key not in data:
                raise SpecError(f"the spec lacks the required key {key!r}")

        weights = _choice("weights", data.get("weights", "random"), WEIGHTS)
        models = tuple(_model_name(m, weights) for m in _list("models", data["models"]))
        _no_repeats("models", models)

        backends = []
        for name in _list("backends", data["backends"]):
            if not isinstance(name, str):
                raise SpecError(f"'backends' must hold strings, got {name!r}")
            if name not in BACKEND_NAMES:
                # "cuda:1" is refused too: the trial table names the backend, not the
                # index, so a GPU is picked with CUDA_VISIBLE_DEVICES instead.
                raise SpecError(
                    f"unknown backend {name!r}{_suggest(name, BACKEND_NAMES)}; expected one of "
                    f"{list(BACKEND_NAMES)} (pick a CUDA GPU with CUDA_VISIBLE_DEVICES)"
                )
            backend = get_backend(name)
            if check_available and not backend.is_available():
                raise SpecError(
                    f"backend {name!r} is not available on this machine: {backend.unavailable_reason()}"
                )
            backends.append(name)
        _no_repeats("backends", backends)

        dtypes = tuple(
            _choice("dtype", d, DTYPES) for d in _list("dtypes", data.get("dtypes", ["float32"]))
        )
        _no_repeats("dtypes", dtypes)

        use_cache = []
        for flag in _list("use_cache", data.get("use_cache", [True])):
            if not isinstance(flag, bool):
                raise SpecError(f"'use_cache' must hold true/false, got {flag!r}")
            use_cache.append(flag)
        _no_repeats("use_cache", use_cache)

        prompts = tuple(
            _int("prompt_tokens", p, minimum=1)
            for p in _list("prompt_tokens", data.get("prompt_tokens", [65]))
        )
        _no_repeats("prompt_tokens", prompts)
        budgets = _budgets(data["budgets"])

        for model in models:
            limit = _max_positions(model, weights)
            longest = max(prompts) + max(budgets)
            if limit is not None and longest > limit:
                raise SpecError(
                    f"prompt_tokens ({max(prompts)}) + budget ({max(budgets)}) = {longest} "
                    f"exceeds {model}'s {limit} positions"
                )

        instrument = data.get("instrument", False)
        if not isinstance(instrument, bool):
            raise SpecError(f"'instrument' must be true or false, got {instrument!r}")
        seed = data.get("seed", 0)
        if not _is_int(seed):
            raise SpecError(f"'seed' must be an integer, got {seed!r}")

        return cls(
            models=models,
            backends=tuple(backends),
            budgets=budgets,
            weights=weights,
            dtypes=dtypes,
            use_cache=tuple(use_cache),
            prompt_tokens=prompts,
            trials=_int("trials", data.get("trials", cls.trials), minimum=1),
            warmup=_int("warmup", data.get("warmup", cls.warmup), minimum=0),
            sessions=_int("sessions", data.get("sessions", cls.sessions), minimum=1),
            isolation=_choice("isolation", data.get("isolation", cls.isolation), ISOLATIONS),
            instrument=instrument,
            engine=_choice("engine", data.get("engine", cls.engine), ENGINES),
            seed=int(seed),
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON/TOML values (budgets as the explicit list)."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in ((f.name, getattr(self, f.name)) for f in fields(self))
        }

    def differences(self, other: SweepSpec) -> list[str]:
        """Keys whose values differ between ``self`` and ``other``."""
        return [name for name in self.keys() if getattr(self, name) != getattr(other, name)]

    def cases(self) -> list[Case]:
        """The cross product of the grid, in spec order (the schedule shuffles it)."""
        return [
            Case(*values)
            for values in itertools.product(
                self.models,
                self.backends,
                self.dtypes,
                self.use_cache,
                self.prompt_tokens,
                self.budgets,
            )
        ]

    def trials_per_session(self) -> int:
        """Generations per session, warm-ups included."""
        return len(self.cases()) * (self.trials + self.warmup)

    def total_trials(self, *, include_warmup: bool = False) -> int:
        """Measured generations in the whole sweep (plus warm-ups if asked)."""
        per_case = self.trials + (self.warmup if include_warmup else 0)
        return len(self.cases()) * per_case * self.sessions
