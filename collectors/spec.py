r"""Sweep specifications: what to measure, read from TOML and checked before any work.

A sweep is the cross product

.. math::

    \text{models} \times \text{backends} \times \text{dtypes} \times \text{use\_cache}
    \times \text{prompt\_tokens} \times \text{budgets}

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

Fault injection. ``inject = { start = 505, stop = 633, factor = 3.0 }`` (stop inclusive)
slows every real generation whose budget lies in ``start..stop`` by ``factor``: after
each step the device is synchronised and the host waits ``factor - 1`` times the time
that step took, so the whole generation takes about ``factor`` times as long (see
:mod:`collectors.engines`). Such a run is a known answer for tests and benchmarks, and
it is always marked synthetic: ``meta.json`` holds ``inject`` and ``synthetic: true``,
and every trial its ``injected_factor`` (1.0 outside the interval).

Attention and warm-ups. ``attn_implementation`` (one name or a list: ``"eager"``,
``"sdpa"``, ...) is passed to the model's constructor and is a grid dimension;
``sdpa_backends`` (``["cudnn", "flash", "efficient", "math"]``, any subset) is the set
of scaled-dot-product-attention kernels allowed around every generation
(:func:`torch.nn.attention.sdpa_kernel`); ``warmup_policy`` is ``"per-case"`` (the
default: a case's warm-ups just before its first measured trial in a process),
``"none"`` or ``"max-first"`` (warm-ups at the largest budget of each loaded model
before anything is measured with it). Both attention settings are recorded per trial.

Every mistake a spec can hold (an unknown key, with the closest valid one suggested; an
unknown model, dtype or engine; empty or non-positive budgets; a sequence longer than
the model's positions; a backend this machine lacks; a value of the wrong type) raises
a :class:`SpecError` naming it, so a sweep never dies an hour in on a typo.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from regimes.data.schema import RegimesInputError

from .backends import BACKEND_NAMES, get_backend
from .engines import ENGINES
from .models import DTYPES, PRESETS, WEIGHTS, positions_used

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "Case",
    "FLEET_SESSIONS",
    "ISOLATIONS",
    "Injection",
    "SDPA_BACKENDS",
    "SpecError",
    "SweepSpec",
    "WARMUP_POLICIES",
]

ISOLATIONS: tuple[str, ...] = ("none", "process")

WARMUP_POLICIES: tuple[str, ...] = ("per-case", "none", "max-first")
"""How a session warms up: each case before its first measured trial in a process,
not at all, or once per loaded model at the session's largest budget."""

ATTN_IMPLEMENTATIONS: tuple[str, ...] = (
    "eager",
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flex_attention",
)
"""Attention implementations transformers knows by name (hub kernels ``org/name`` too)."""

SDPA_BACKENDS: tuple[str, ...] = ("cudnn", "flash", "efficient", "math")
"""Kernels of :func:`torch.nn.functional.scaled_dot_product_attention`, by short name."""

FLEET_SESSIONS: tuple[str, ...] = ("shared", "every-host")
"""How a fleet sweep (``regimes collect --cluster``) spreads sessions over the hosts that
can run them: each session once on one host, or every session on every host."""

# A hub id is "name" or "org/name" made of letters, digits, '-', '_' and '.'.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class SpecError(RegimesInputError):
    """A sweep specification that cannot be run; the message names the problem."""


@dataclass(frozen=True)
class Injection:
    """A known slowdown: generations with a budget in ``start..stop`` take ``factor`` x.

    Parameters
    ----------
    start, stop : int
        The budget interval, both ends included.
    factor : float
        How many times longer each step (and so the whole generation) takes; >= 1.

    Examples
    --------
    >>> inject = Injection(505, 633, 3.0)
    >>> inject.factor_for(504), inject.factor_for(505), inject.factor_for(633)
    (1.0, 3.0, 3.0)
    """

    start: int
    stop: int
    factor: float

    def factor_for(self, budget: int) -> float:
        """Return the slowdown of a generation of ``budget`` tokens (1.0 outside)."""
        return self.factor if self.start <= budget <= self.stop else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Return the injection as the TOML table that specifies it."""
        return {"start": self.start, "stop": self.stop, "factor": self.factor}


@dataclass(frozen=True, order=True)
class Case:
    """One measured condition: a generation of ``budget`` tokens after a prompt."""

    model: str
    backend: str
    dtype: str
    use_cache: bool
    prompt_tokens: int
    budget: int
    attn_implementation: str | None = None
    """The attention implementation asked for (``None``: the model's default)."""

    @property
    def load_key(self) -> tuple[str, str, str, str | None]:
        """The (model, backend, dtype, attention) that must be loaded to run this case."""
        return (self.model, self.backend, self.dtype, self.attn_implementation)

    @property
    def base(self) -> Case:
        """The case without its attention implementation, as the errors table names it."""
        return replace(self, attn_implementation=None)

    def label(self) -> str:
        """Name the case in one readable path-like string."""
        cache = "cache" if self.use_cache else "no-cache"
        attn = f"/{self.attn_implementation}" if self.attn_implementation else ""
        return (
            f"{self.model}/{self.backend}/{self.dtype}{attn}/{cache}/"
            f"prompt={self.prompt_tokens}/budget={self.budget}"
        )


def _type_name(value: Any) -> str:
    return type(value).__name__


def _is_int(value: Any) -> bool:
    # bool is a subclass of int in Python, but `trials = true` is a mistake, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _int(key: str, value: Any, *, minimum: int | None, maximum: int | None = None) -> int:
    if not _is_int(value):
        raise SpecError(f"{key!r} must be an integer, got {value!r} ({_type_name(value)})")
    if minimum is not None and value < minimum:
        raise SpecError(f"{key!r} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{key!r} must be <= {maximum}, got {value}")
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
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{key!r} must be a list, got {value!r} ({_type_name(value)})")
    if not value:
        raise SpecError(f"{key!r} is empty; give at least one value")
    return list(value)


def _no_repeats(key: str, values: Sequence[Any]) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
    if repeated:
        raise SpecError(f"{key!r} lists {repeated} more than once")


def _suggest(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- declared constraints: one check per key -----------------------------------------
#
# A check takes the key, the raw value (or the field's default) and what the keys
# before it in _PARAMETER_CONSTRAINTS validated to (plus ``check_available``), and
# returns the normalised value or raises a SpecError naming the key.

_Check = Callable[[str, Any, Mapping[str, Any]], Any]


def _integer(minimum: int | None, maximum: int | None = None) -> _Check:
    def check(key: str, value: Any, known: Mapping[str, Any]) -> int:
        return _int(key, value, minimum=minimum, maximum=maximum)

    return check


MAX_SEED = 2**63 - 1
"""Largest seed: numpy's generators take any whole number >= 0, torch's up to 2**64 - 1."""

MAX_BUDGETS = 100_000
"""Most budgets a spec may list. Each is a case measured in every session; a range
longer than any model's positions is a typo (a stop with three zeros too many), and it
is refused before it is built."""


def _one_of(allowed: Sequence[str], name: str | None = None) -> _Check:
    def check(key: str, value: Any, known: Mapping[str, Any]) -> str:
        return _choice(name or key, value, allowed)

    return check


def _flag(key: str, value: Any, known: Mapping[str, Any]) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must be true or false, got {value!r}")
    return value


def _unique_list(item: _Check) -> _Check:
    """Make a check for a non-empty list without repeats whose items pass ``item``."""

    def check(key: str, value: Any, known: Mapping[str, Any]) -> tuple[Any, ...]:
        values = tuple(item(key, v, known) for v in _list(key, value))
        _no_repeats(key, values)
        return values

    return check


def _bool_item(key: str, value: Any, known: Mapping[str, Any]) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must hold true/false, got {value!r}")
    return value


def _model_item(key: str, name: Any, known: Mapping[str, Any]) -> str:
    weights = known["weights"]
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


def _backend_item(key: str, name: Any, known: Mapping[str, Any]) -> str:
    if not isinstance(name, str):
        raise SpecError(f"'backends' must hold strings, got {name!r}")
    if name not in BACKEND_NAMES:
        # "cuda:1" is refused too: the trial table names the backend, not the index,
        # so a GPU is picked with CUDA_VISIBLE_DEVICES instead.
        raise SpecError(
            f"unknown backend {name!r}{_suggest(name, BACKEND_NAMES)}; expected one of "
            f"{list(BACKEND_NAMES)} (pick a CUDA GPU with CUDA_VISIBLE_DEVICES)"
        )
    backend = get_backend(name)
    if known["check_available"] and not backend.is_available():
        raise SpecError(
            f"backend {name!r} is not available on this machine: {backend.unavailable_reason()}"
        )
    return name


def _budget_range(value: Mapping[str, Any]) -> tuple[int, ...]:
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
    budgets = range(start, stop + 1, step)
    if len(budgets) > MAX_BUDGETS:  # counted, not built: a range can be any length
        raise SpecError(
            f"'budgets' range {start}..{stop} step {step} holds {len(budgets)} budgets, more "
            f"than the {MAX_BUDGETS} a sweep may measure; check stop and step"
        )
    return tuple(budgets)


def _budget_item(key: str, item: Any, known: Mapping[str, Any]) -> int:
    if not _is_int(item):
        raise SpecError(f"'budgets' must hold integers, got {item!r} ({_type_name(item)})")
    if item < 1:
        raise SpecError(f"'budgets' must be positive (max_new_tokens >= 1), got {item}")
    return int(item)


def _budgets(key: str, value: Any, known: Mapping[str, Any]) -> tuple[int, ...]:
    if isinstance(value, Mapping):
        return _budget_range(value)
    if isinstance(value, (list, tuple)) and len(value) > MAX_BUDGETS:
        raise SpecError(f"'budgets' lists {len(value)} budgets, more than {MAX_BUDGETS}")
    return _unique_list(_budget_item)(key, value, known)


def _inject(key: str, value: Any, known: Mapping[str, Any]) -> Injection | None:
    if value is None or isinstance(value, Injection):
        return value
    if not isinstance(value, Mapping):
        raise SpecError(
            f"'inject' must be a table {{start, stop, factor}}, got {value!r} ({_type_name(value)})"
        )
    allowed = ("start", "stop", "factor")
    for name in value:
        if name not in allowed:
            raise SpecError(f"unknown key {name!r} in 'inject'{_suggest(name, allowed)}")
    missing = [name for name in allowed if name not in value]
    if missing:
        raise SpecError(f"'inject' lacks {missing}; give {{start, stop, factor}} (stop inclusive)")
    start = _int("inject.start", value["start"], minimum=1)
    stop = _int("inject.stop", value["stop"], minimum=start)
    factor = value["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        raise SpecError(f"'inject.factor' must be a number >= 1 (a slowdown), got {factor!r}")
    if not math.isfinite(factor):
        raise SpecError(f"'inject.factor' must be finite, got {factor!r}")
    return Injection(start, stop, float(factor))


def _attn_item(key: str, value: Any, known: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"{key!r} must hold non-empty strings, got {value!r}")
    if value in ATTN_IMPLEMENTATIONS or "/" in value:  # "org/kernel": a hub kernel
        return value
    raise SpecError(
        f"unknown attn_implementation {value!r}{_suggest(value, ATTN_IMPLEMENTATIONS)}; "
        f"expected one of {list(ATTN_IMPLEMENTATIONS)} (or a hub kernel 'org/name')"
    )


def _attn_implementation(key: str, value: Any, known: Mapping[str, Any]) -> tuple[Any, ...]:
    if value is None or value == [None] or value == (None,):
        return (None,)  # the model's default, as stored by to_dict
    if isinstance(value, str):
        return (_attn_item(key, value, known),)
    return _unique_list(_attn_item)(key, value, known)


def _sdpa_item(key: str, value: Any, known: Mapping[str, Any]) -> str:
    return _choice(key, value, SDPA_BACKENDS)


def _sdpa_backends(key: str, value: Any, known: Mapping[str, Any]) -> tuple[str, ...] | None:
    if value is None:
        return None
    chosen = _unique_list(_sdpa_item)(key, value, known)
    return tuple(name for name in SDPA_BACKENDS if name in chosen)  # one canonical order


def _warmup(key: str, value: Any, known: Mapping[str, Any]) -> int:
    count = _int(key, value, minimum=0)
    policy = known["warmup_policy"]
    if policy == "none" and count:
        raise SpecError(
            f"'warmup' is {count} but warmup_policy = \"none\" runs no warm-up; "
            "drop 'warmup' or choose another warmup_policy"
        )
    if policy == "max-first" and not count:
        raise SpecError("'warmup' must be >= 1 with warmup_policy = \"max-first\"")
    return count


def _fits_positions(values: Mapping[str, Any]) -> None:
    """Every model's position table holds the longest generation's positions."""
    prompts, budgets = values["prompt_tokens"], values["budgets"]
    longest = positions_used(max(prompts), max(budgets))
    for model in values["models"]:
        preset = PRESETS.get(model)
        # A checkpoint's limit is known once loaded; the engine checks it then.
        limit = preset.max_positions if preset and values["weights"] == "random" else None
        if limit is not None and longest > limit:
            raise SpecError(
                f"prompt_tokens ({max(prompts)}) + budget ({max(budgets)}) - 1 = {longest} "
                f"positions (the last token is never fed back) exceeds {model}'s {limit} "
                f"positions; lower the largest budget to {limit - max(prompts) + 1} or less"
            )


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Injection):
        return value.to_dict()
    return value


_PARAMETER_CONSTRAINTS: dict[str, _Check] = {
    "weights": _one_of(WEIGHTS),
    "models": _unique_list(_model_item),
    "backends": _unique_list(_backend_item),
    "dtypes": _unique_list(_one_of(DTYPES, "dtype")),
    "use_cache": _unique_list(_bool_item),
    "prompt_tokens": _unique_list(_integer(1)),
    "budgets": _budgets,
    "trials": _integer(1),
    "warmup_policy": _one_of(WARMUP_POLICIES),
    "warmup": _warmup,
    "sessions": _integer(1),
    "isolation": _one_of(ISOLATIONS),
    "instrument": _flag,
    "engine": _one_of(ENGINES),
    "seed": _integer(0, MAX_SEED),
    "fleet_sessions": _one_of(FLEET_SESSIONS),
    "inject": _inject,
    "attn_implementation": _attn_implementation,
    "sdpa_backends": _sdpa_backends,
}
"""Each spec key's check, in the order they run (a check may read the keys before it)."""


def _inject_in_grid(spec: SweepSpec) -> None:
    """Refuse an injected slowdown that touches no budget of the grid (it slows nothing).

    Checked on a spec file only: the batches a run adds (:func:`collectors.sweep.
    collect_budgets`) probe a few budgets, often outside its injected interval.
    """
    inject, budgets = spec.inject, spec.budgets
    if inject is not None and not any(inject.start <= b <= inject.stop for b in budgets):
        raise SpecError(
            f"'inject' covers budgets {inject.start}..{inject.stop}, which hold none of the "
            f"spec's budgets ({min(budgets)}..{max(budgets)}): it would slow nothing down"
        )


_CROSS_CHECKS: tuple[Callable[[Mapping[str, Any]], None], ...] = (_fits_positions,)
"""Constraints between keys, run once every key is valid."""


def _default(key: str, default: Any, known: Mapping[str, Any]) -> Any:
    """Return the value of a key the spec leaves out (one depends on another key)."""
    if key == "warmup" and known["warmup_policy"] == "none":
        return 0
    return default


def _read_toml(p: Path) -> dict[str, Any]:
    """Parse a spec file; every failure names the file. A leading BOM is not an error."""
    if not p.exists():
        raise SpecError(f"no sweep spec at {str(p)!r}")
    if not p.is_file():  # a FIFO would block the read forever
        raise SpecError(f"the sweep spec {str(p)!r} is not a regular file")
    try:
        # Editors on Windows write a byte-order mark, which TOML itself does not allow.
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{str(p)!r} is not UTF-8 text (byte {exc.start}); save the spec as UTF-8"
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot read the sweep spec {str(p)!r}: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{str(p)!r} is not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{str(p)!r} is nested too deeply to be a sweep spec") from None


def _check_keys(data: Any, known: Sequence[str], required: Sequence[str]) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(f"a sweep spec must be a table of keys, got {_type_name(data)}")
    for key in data:
        if key not in known:
            raise SpecError(
                f"unknown key {key!r}{_suggest(str(key), known)}; valid keys are {list(known)}"
            )
    for key in required:
        if key not in data:
            raise SpecError(f"the spec lacks the required key {key!r}")


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep specification (see the module docstring for the TOML form).

    Build it with :meth:`from_toml` or :meth:`from_dict`; both validate. Lists are
    stored as tuples and budgets as the explicit list, so two specs compare equal
    exactly when they ask for the same measurements.

    Attributes
    ----------
    models, backends, dtypes : tuple of str
        The grid's models (presets, or hub ids and directories), backends and dtypes.
    budgets, prompt_tokens : tuple of int
        Decoding budgets (``max_new_tokens``) and prompt lengths.
    use_cache : tuple of bool
        KV cache settings.
    weights : str
        ``"random"`` (presets) or ``"pretrained"``.
    trials, warmup, sessions : int
        Measured trials and warm-ups per case and session; sessions.
    isolation : str
        ``"process"`` (a fresh Python process per session) or ``"none"``.
    instrument : bool
        Synchronise after every step and record per-step times.
    engine : str
        ``"generate"`` or ``"loop"``.
    seed : int
        Seed of the schedule's shuffles, the prompts and the random weights.
    fleet_sessions : str
        On a fleet (``--cluster``): ``"shared"`` runs each session on one host that
        has its backend, ``"every-host"`` runs every session on every such host.
    inject : Injection or None
        A known slowdown over a budget interval (fault injection; the data are then
        synthetic).
    attn_implementation : tuple of str or None
        Attention implementations to measure (``eager``, ``sdpa``, ...), a grid
        dimension; ``(None,)`` takes the model's default.
    sdpa_backends : tuple of str or None
        The scaled-dot-product-attention kernels allowed during generation
        (``cudnn``, ``flash``, ``efficient``, ``math``); ``None`` leaves torch's
        settings as they are.
    warmup_policy : str
        ``"per-case"`` (each case's ``warmup`` warm-ups just before its first measured
        trial in a process), ``"none"`` or ``"max-first"`` (``warmup`` warm-ups at the
        largest budget of each loaded model before anything is measured with it).

    See Also
    --------
    collectors.sweep.run_sweep : run a spec into a run directory.

    Examples
    --------
    >>> spec = SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"],
    ...                             "use_cache": [True, False], "budgets": [8, 16]})
    >>> len(spec.cases()), spec.total_trials()
    (4, 20)
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
    fleet_sessions: str = "shared"
    inject: Injection | None = None
    attn_implementation: tuple[str | None, ...] = (None,)
    sdpa_backends: tuple[str, ...] | None = None
    warmup_policy: str = "per-case"

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """List the keys a spec may hold."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], *, check_available: bool = True) -> SweepSpec:
        """Read and validate a TOML spec file.

        Parameters
        ----------
        path : str or os.PathLike
            The spec file.
        check_available : bool, default True
            Whether to check that each backend exists on this machine.

        Returns
        -------
        SweepSpec
            The validated spec.

        Raises
        ------
        SpecError
            A missing file or one that is not a regular file, text that is not UTF-8,
            invalid TOML (each naming the file), an ``inject`` interval that holds none
            of the budgets, or any mistake :meth:`from_dict` finds.
        """
        spec = cls.from_dict(_read_toml(Path(path)), check_available=check_available)
        _inject_in_grid(spec)
        return spec

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, check_available: bool = True) -> SweepSpec:
        """Validate a spec given as a mapping (the parsed TOML).

        Each key is checked by its entry in the declared constraints (one check per
        key, then the checks between keys), so every mistake fails before any work
        with a :class:`SpecError` naming the key.

        Parameters
        ----------
        data : Mapping
            Spec keys to values; lists may also be tuples.
        check_available : bool, default True
            Whether to ask if each backend exists on this machine (``False`` checks a
            spec written for another machine).

        Returns
        -------
        SweepSpec
            The validated spec.

        Raises
        ------
        SpecError
            An unknown or missing key, or a value that breaks its key's constraint.

        Examples
        --------
        >>> spec = SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"],
        ...                             "budgets": {"start": 8, "stop": 32, "step": 8}})
        >>> spec.budgets, len(spec.cases())
        ((8, 16, 24, 32), 4)
        >>> SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"], "budget": [8]})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        collectors.spec.SpecError: unknown key 'budget' (did you mean 'budgets'?); ...
        """
        defaults = {f.name: f.default for f in fields(cls)}
        required = [name for name, default in defaults.items() if default is MISSING]
        _check_keys(data, cls.keys(), required)
        known: dict[str, Any] = {"check_available": check_available}
        for key, check in _PARAMETER_CONSTRAINTS.items():
            value = data[key] if key in data else _default(key, defaults[key], known)
            known[key] = check(key, value, known)
        del known["check_available"]
        for cross in _CROSS_CHECKS:
            cross(known)
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as plain JSON/TOML values (budgets as the explicit list)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def differences(self, other: SweepSpec) -> list[str]:
        """Keys whose values differ between ``self`` and ``other``."""
        return [name for name in self.keys() if getattr(self, name) != getattr(other, name)]

    def cases(self) -> list[Case]:
        """List the cross product of the grid, in spec order (the schedule shuffles it).

        What is loaded together (model, backend, dtype, attention) varies slowest, so
        each load's cases are contiguous.
        """
        grid = itertools.product(
            self.models,
            self.backends,
            self.dtypes,
            self.attn_implementation,
            self.use_cache,
            self.prompt_tokens,
            self.budgets,
        )
        return [Case(m, b, d, u, p, n, a) for m, b, d, a, u, p, n in grid]

    def warmups_per_session(self) -> int:
        """Count the warm-up generations a fresh session runs under the warm-up policy."""
        if self.warmup_policy == "per-case":
            return len(self.cases()) * self.warmup
        if self.warmup_policy == "max-first":
            return len({case.load_key for case in self.cases()}) * self.warmup
        return 0

    def trials_per_session(self) -> int:
        """Count the generations per session, warm-ups included."""
        return len(self.cases()) * self.trials + self.warmups_per_session()

    def total_trials(self, *, include_warmup: bool = False) -> int:
        """Count the measured generations of the whole sweep (plus warm-ups if asked)."""
        warmups = self.warmups_per_session() if include_warmup else 0
        return (len(self.cases()) * self.trials + warmups) * self.sessions
