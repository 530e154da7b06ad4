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

Endpoints. ``endpoint = { url = "http://127.0.0.1:8000/v1", model = "NAME" }`` measures
an OpenAI-compatible server instead of a model in this process (:mod:`collectors.
endpoint`): it replaces ``backends`` and ``models``, and the keys only the server decides
(dtypes, cache, attention, engine) may not be given.

Every mistake a spec can hold (an unknown key, with the closest valid one suggested; an
unknown model, dtype or engine; empty or non-positive budgets; a sequence longer than
the model's positions; a backend this machine lacks; a value of the wrong type) raises
a :class:`SpecError` naming it, so a sweep never dies an hour in on a typo.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from . import _spec_checks as checks
from ._spec_checks import ATTN_IMPLEMENTATIONS, MAX_SEED, SDPA_BACKENDS, SpecError
from ._spec_profile import (
    AutoProfile,
    Profile,
    SlowAttention,
    check_profile,
    check_slow_attention,
    profile_in_grid,
)
from .endpoint._config import BACKEND as ENDPOINT_BACKEND
from .endpoint._config import Endpoint, check_endpoint
from .engines import ENGINES
from .models import DTYPES, WEIGHTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "AutoProfile",
    "Case",
    "FLEET_SESSIONS",
    "ISOLATIONS",
    "Injection",
    "Profile",
    "SDPA_BACKENDS",
    "SlowAttention",
    "SpecError",
    "SweepSpec",
    "WARMUP_POLICIES",
]

ISOLATIONS: tuple[str, ...] = ("none", "process")

WARMUP_POLICIES: tuple[str, ...] = ("per-case", "none", "max-first")
"""How a session warms up: each case before its first measured trial in a process,
not at all, or once per loaded model at the session's largest budget."""


FLEET_SESSIONS: tuple[str, ...] = ("shared", "every-host")
"""How a fleet sweep (``regimes collect --cluster``) spreads sessions over the hosts that
can run them: each session once on one host, or every session on every host."""


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


# -- declared constraints: one check per key -----------------------------------------
#
# A check takes the key, the raw value (or the field's default) and what the keys
# before it in _PARAMETER_CONSTRAINTS validated to (plus ``check_available``), and
# returns the normalised value or raises a SpecError naming the key.


def _inject(key: str, value: Any, known: Mapping[str, Any]) -> Injection | None:
    if value is None or isinstance(value, Injection):
        return value
    value = checks.table_value(key, value, ("start", "stop", "factor"), " (stop inclusive)")
    start = checks.int_value("inject.start", value["start"], minimum=1)
    stop = checks.int_value("inject.stop", value["stop"], minimum=start)
    factor = value["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        raise SpecError(f"'inject.factor' must be a number >= 1 (a slowdown), got {factor!r}")
    if not math.isfinite(factor):
        raise SpecError(f"'inject.factor' must be finite, got {factor!r}")
    return Injection(start, stop, float(factor))


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (Injection, Endpoint, Profile, SlowAttention)):
        return value.to_dict()
    return value


def _endpoint_fixed(endpoint: Endpoint) -> dict[str, tuple[Any, str]]:
    """List the keys an endpoint spec does not choose: their value, and why."""
    server = "the server decides it"
    return {
        "weights": ("served", server),
        "models": ((endpoint.model,), "endpoint.model names the model"),
        "backends": ((ENDPOINT_BACKEND,), "'endpoint' replaces 'backends'"),
        "dtypes": (("auto",), server),
        "use_cache": ((True,), "a server always decodes with its KV cache"),
        "isolation": ("none", "a session is a span of one server process, not of the client"),
        "instrument": (True, "every streamed token's arrival is recorded"),
        "engine": (endpoint.api, "endpoint.api names the API"),
        "inject": (None, "fault injection slows in-process generations only"),
        "attn_implementation": ((None,), server),
        "sdpa_backends": (None, server),
        "profile": (None, "a server's operators cannot be profiled from the client"),
        "slow_attention": (None, "fault injection slows in-process generations only"),
    }


def _fixed_value(key: str, given: Any, fixed: Any, why: str) -> Any:
    """Accept a key an endpoint spec fixes only at its fixed value (as stored)."""
    if _plain(given) != _plain(fixed):
        raise SpecError(
            f"{key!r} does not apply to an endpoint spec ({why}); remove it, got {given!r}"
        )
    return fixed


_PARAMETER_CONSTRAINTS: dict[str, checks.Check] = {
    "endpoint": check_endpoint,
    "weights": checks.one_of(WEIGHTS),
    "models": checks.unique_list(checks.model_item),
    "backends": checks.unique_list(checks.backend_item),
    "dtypes": checks.unique_list(checks.one_of(DTYPES, "dtype")),
    "use_cache": checks.unique_list(checks.bool_item),
    "prompt_tokens": checks.unique_list(checks.integer(1)),
    "budgets": checks.budgets,
    "trials": checks.integer(1),
    "warmup_policy": checks.one_of(WARMUP_POLICIES),
    "warmup": checks.warmup,
    "sessions": checks.integer(1),
    "isolation": checks.one_of(ISOLATIONS),
    "instrument": checks.flag,
    "engine": checks.one_of(ENGINES),
    "seed": checks.integer(0, MAX_SEED),
    "fleet_sessions": checks.one_of(FLEET_SESSIONS),
    "inject": _inject,
    "attn_implementation": checks.attn_implementation,
    "sdpa_backends": checks.sdpa_backends,
    "profile": check_profile,
    "slow_attention": check_slow_attention,
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


_CROSS_CHECKS: tuple[Callable[[Mapping[str, Any]], None], ...] = (checks.fits_positions,)
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
        raise SpecError(f"a sweep spec must be a table of keys, got {checks.type_name(data)}")
    for key in data:
        if key not in known:
            raise SpecError(
                f"unknown key {key!r}{checks.suggest(str(key), known)}; valid keys are "
                f"{list(known)}"
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
    endpoint : Endpoint or None
        An OpenAI-compatible server to measure instead of a model in this process
        (:mod:`collectors.endpoint`); it fixes the keys that only the server decides.
    profile : Profile or None
        Profiled generations in trials of their own, written to the ``ops`` table
        (:mod:`collectors._spec_profile`); an :class:`AutoProfile` (``"auto"``) has
        the timed trials choose its budgets (:mod:`collectors._profile_auto`).
    slow_attention : SlowAttention or None
        Attention computed ``factor`` times inside a budget interval (synthetic).

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
    endpoint: Endpoint | None = None
    profile: Profile | None = None
    slow_attention: SlowAttention | None = None

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
            of the budgets, profiled budgets outside the grid, or any mistake
            :meth:`from_dict` finds.
        """
        spec = cls.from_dict(_read_toml(Path(path)), check_available=check_available)
        _inject_in_grid(spec)
        profile_in_grid(spec.profile, spec.budgets)
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
        if isinstance(data, Mapping) and data.get("endpoint") is not None:
            required = ["budgets"]
        _check_keys(data, cls.keys(), required)
        known: dict[str, Any] = {"check_available": check_available}
        fixed: dict[str, tuple[Any, str]] = {}
        for key, check in _PARAMETER_CONSTRAINTS.items():
            if key in fixed:
                value, why = fixed[key]
                known[key] = _fixed_value(key, data[key], value, why) if key in data else value
                continue
            value = data[key] if key in data else _default(key, defaults[key], known)
            known[key] = check(key, value, known)
            if key == "endpoint" and known[key] is not None:
                fixed = _endpoint_fixed(known[key])
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
