"""The checks of a sweep spec's values, one per kind of value; :mod:`collectors.spec` uses them.

A check takes the key, the raw value (or the field's default) and what the keys before
it in :data:`collectors.spec._PARAMETER_CONSTRAINTS` validated to (plus
``check_available``), and returns the normalised value or raises a :class:`SpecError`
naming the key. The public names (:class:`SpecError`, the allowed values, the limits)
are re-exported by :mod:`collectors.spec`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from regimes.data.schema import RegimesInputError

from .backends import BACKEND_NAMES, get_backend
from .models import PRESETS, positions_used

__all__ = ["ATTN_IMPLEMENTATIONS", "MAX_BUDGETS", "MAX_SEED", "SDPA_BACKENDS", "SpecError"]

# A hub id is "name" or "org/name" made of letters, digits, '-', '_' and '.'.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class SpecError(RegimesInputError):
    """A sweep specification that cannot be run; the message names the problem."""

    # Raised here, imported from collectors.spec: tracebacks and pickles name that home.
    __module__ = "collectors.spec"


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


def type_name(value: Any) -> str:
    return type(value).__name__


def _is_int(value: Any) -> bool:
    # bool is a subclass of int in Python, but `trials = true` is a mistake, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def int_value(key: str, value: Any, *, minimum: int | None, maximum: int | None = None) -> int:
    if not _is_int(value):
        raise SpecError(f"{key!r} must be an integer, got {value!r} ({type_name(value)})")
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
            f"unknown {key} {value!r}{suggest(value, allowed)}; expected one of {list(allowed)}"
        )
    return value


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{key!r} must be a list, got {value!r} ({type_name(value)})")
    if not value:
        raise SpecError(f"{key!r} is empty; give at least one value")
    return list(value)


def _no_repeats(key: str, values: Sequence[Any]) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
    if repeated:
        raise SpecError(f"{key!r} lists {repeated} more than once")


def suggest(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


Check = Callable[[str, Any, Mapping[str, Any]], Any]


def table_value(key: str, value: Any, allowed: Sequence[str], hint: str = "") -> Mapping[str, Any]:
    """Check that ``value`` is a table holding exactly the keys ``allowed``."""
    keys = "{" + ", ".join(allowed) + "}"
    if not isinstance(value, Mapping):
        raise SpecError(f"{key!r} must be a table {keys}, got {value!r} ({type_name(value)})")
    for name in value:
        if name not in allowed:
            raise SpecError(f"unknown key {name!r} in {key!r}{suggest(str(name), allowed)}")
    missing = [name for name in allowed if name not in value]
    if missing:
        raise SpecError(f"{key!r} lacks {missing}; give {keys}{hint}")
    return value


def integer(minimum: int | None, maximum: int | None = None) -> Check:
    def check(key: str, value: Any, known: Mapping[str, Any]) -> int:
        return int_value(key, value, minimum=minimum, maximum=maximum)

    return check


MAX_SEED = 2**63 - 1
"""Largest seed: numpy's generators take any whole number >= 0, torch's up to 2**64 - 1."""


MAX_BUDGETS = 100_000
"""Most budgets a spec may list. Each is a case measured in every session; a range
longer than any model's positions is a typo (a stop with three zeros too many), and it
is refused before it is built."""


def one_of(allowed: Sequence[str], name: str | None = None) -> Check:
    def check(key: str, value: Any, known: Mapping[str, Any]) -> str:
        return _choice(name or key, value, allowed)

    return check


def flag(key: str, value: Any, known: Mapping[str, Any]) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must be true or false, got {value!r}")
    return value


def unique_list(item: Check) -> Check:
    """Make a check for a non-empty list without repeats whose items pass ``item``."""

    def check(key: str, value: Any, known: Mapping[str, Any]) -> tuple[Any, ...]:
        values = tuple(item(key, v, known) for v in _list(key, value))
        _no_repeats(key, values)
        return values

    return check


def bool_item(key: str, value: Any, known: Mapping[str, Any]) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must hold true/false, got {value!r}")
    return value


def model_item(key: str, name: Any, known: Mapping[str, Any]) -> str:
    weights = known["weights"]
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"'models' must hold non-empty strings, got {name!r}")
    if name in PRESETS:
        return name
    if weights == "random":
        raise SpecError(
            f"unknown model preset {name!r}{suggest(name, list(PRESETS))}; presets are "
            f'{list(PRESETS)} (for a hub id or a local directory set weights = "pretrained")'
        )
    if os.path.isdir(name) or _HUB_ID.match(name):
        return name
    raise SpecError(
        f"model {name!r} is neither a preset, an existing directory nor a hub id (org/name)"
    )


def backend_item(key: str, name: Any, known: Mapping[str, Any]) -> str:
    if not isinstance(name, str):
        raise SpecError(f"'backends' must hold strings, got {name!r}")
    if name not in BACKEND_NAMES:
        # "cuda:1" is refused too: the trial table names the backend, not the index,
        # so a GPU is picked with CUDA_VISIBLE_DEVICES instead.
        raise SpecError(
            f"unknown backend {name!r}{suggest(name, BACKEND_NAMES)}; expected one of "
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
                f"unknown key {name!r} in 'budgets'{suggest(name, allowed)}; "
                "a budget range is {start, stop, step} with stop inclusive"
            )
    missing = [name for name in ("start", "stop") if name not in value]
    if missing:
        raise SpecError(f"'budgets' range lacks {missing}; give {{start, stop, step}}")
    start = int_value("budgets.start", value["start"], minimum=1)
    stop = int_value("budgets.stop", value["stop"], minimum=1)
    step = int_value("budgets.step", value.get("step", 1), minimum=1)
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
        raise SpecError(f"'budgets' must hold integers, got {item!r} ({type_name(item)})")
    if item < 1:
        raise SpecError(f"'budgets' must be positive (max_new_tokens >= 1), got {item}")
    return int(item)


def budgets(key: str, value: Any, known: Mapping[str, Any]) -> tuple[int, ...]:
    if isinstance(value, Mapping):
        return _budget_range(value)
    if isinstance(value, (list, tuple)) and len(value) > MAX_BUDGETS:
        raise SpecError(f"'budgets' lists {len(value)} budgets, more than {MAX_BUDGETS}")
    return unique_list(_budget_item)(key, value, known)


def _attn_item(key: str, value: Any, known: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"{key!r} must hold non-empty strings, got {value!r}")
    if value in ATTN_IMPLEMENTATIONS or "/" in value:  # "org/kernel": a hub kernel
        return value
    raise SpecError(
        f"unknown attn_implementation {value!r}{suggest(value, ATTN_IMPLEMENTATIONS)}; "
        f"expected one of {list(ATTN_IMPLEMENTATIONS)} (or a hub kernel 'org/name')"
    )


def attn_implementation(key: str, value: Any, known: Mapping[str, Any]) -> tuple[Any, ...]:
    if value is None or value == [None] or value == (None,):
        return (None,)  # the model's default, as stored by to_dict
    if isinstance(value, str):
        return (_attn_item(key, value, known),)
    return unique_list(_attn_item)(key, value, known)


def _sdpa_item(key: str, value: Any, known: Mapping[str, Any]) -> str:
    return _choice(key, value, SDPA_BACKENDS)


def sdpa_backends(key: str, value: Any, known: Mapping[str, Any]) -> tuple[str, ...] | None:
    if value is None:
        return None
    chosen = unique_list(_sdpa_item)(key, value, known)
    return tuple(name for name in SDPA_BACKENDS if name in chosen)  # one canonical order


def warmup(key: str, value: Any, known: Mapping[str, Any]) -> int:
    count = int_value(key, value, minimum=0)
    policy = known["warmup_policy"]
    if policy == "none" and count:
        raise SpecError(
            f"'warmup' is {count} but warmup_policy = \"none\" runs no warm-up; "
            "drop 'warmup' or choose another warmup_policy"
        )
    if policy == "max-first" and not count:
        raise SpecError("'warmup' must be >= 1 with warmup_policy = \"max-first\"")
    return count


def fits_positions(values: Mapping[str, Any]) -> None:
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
