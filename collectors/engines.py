r"""Engines: generate exactly ``budget`` greedy tokens and time it.

Two engines produce the same tokens by different code paths:

``generate``
    Hugging Face ``model.generate`` with ``min_new_tokens = max_new_tokens = budget``
    and ``do_sample=False``. ``min_new_tokens`` makes transformers mask the
    end-of-sequence logit to ``-inf`` until the budget is reached, so generation can
    neither stop early nor emit EOS.
``loop``
    A minimal explicit greedy loop: one forward pass over the prompt (the prefill), then
    one token per step. With the KV cache the step feeds only the newest token plus the
    cache; without it the step feeds the whole sequence so far. The EOS logit is masked
    to ``-inf`` as ``generate`` does, so for greedy decoding both engines yield identical
    tokens. Like ``generate`` it asks the model for the last position's logits only
    (``logits_to_keep=1`` where the model accepts it), so the two engines do the same
    arithmetic and differ only in the code around it.

Timing. Uninstrumented: synchronise the device, start ``perf_counter``, generate,
synchronise, stop; nothing else runs in the timed region. Instrumented: additionally,
after every step (the forward pass, the token choice, the append) the device is
synchronised and a timestamp taken, which splits the latency into steps

.. math::

    s_0 = t_0' - t_0, \qquad s_k = t_k' - t_{k-1}' \; (1 \le k < n-1), \qquad
    s_{n-1} = t_{\text{end}} - t_{n-2}'

where :math:`t_k'` is the end of step :math:`k` and the last step also carries the
return path of the call, so that :math:`\sum_k s_k` equals the latency. Step 0 is the
prefill (it produces the first token); ``decode_s`` is the sum of the rest. In
``generate`` the per-step hook is a :class:`~transformers.StoppingCriteria`, which
transformers calls synchronously once per step after the new token is appended (a
streamer would not do: on MPS transformers defers its stop check and streams one step
late). The per-step synchronisation removes the overlap of host and device work, so
instrumented latencies are slightly higher; the sweep records which trials were
instrumented.

Fault injection (``slowdown`` > 1, the spec's ``inject``). The same per-step hook (a
``StoppingCriteria`` in ``generate``, a callback in the loop) synchronises the device
after every step, measures the time since the previous hook returned (for step 0: since
the clock started, so the prefill is included) and then waits ``slowdown - 1`` times
that long, sleeping and spinning the last millisecond for precision. Each step, and so
the whole generation, then takes about ``slowdown`` times its own duration, whatever
the engine, the backend or the budget; the delay is real wall time inside the timed
region, as a slow kernel would be. Uninjected generations run no hook at all.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any, cast

import torch
from transformers import GenerationMixin, StoppingCriteria, StoppingCriteriaList

from .backends import Backend
from .models import LoadedModel, positions_used

__all__ = ["ENGINES", "BudgetMismatch", "TrialTiming", "run_generation"]

ENGINES: tuple[str, ...] = ("generate", "loop")


@dataclass
class TrialTiming:
    """One timed generation.

    ``latency_s`` is end-to-end and device-synchronised. The phase split
    (``prefill_s``, ``decode_s``) and the per-step times ``step_s`` (``step_s[0]`` the
    prefill, then one entry per decode step; ``len(step_s) == new_tokens``) are present
    only for instrumented trials, with ``prefill_s + decode_s == latency_s`` up to
    floating-point rounding.
    """

    latency_s: float
    prefill_s: float | None
    decode_s: float | None
    step_s: list[float] | None
    new_tokens: int
    tokens: torch.Tensor


class BudgetMismatch(RuntimeError):
    """A generation produced a number of new tokens other than the requested budget."""

    def __init__(self, budget: int, new_tokens: int, engine: str):
        self.budget = budget
        self.new_tokens = new_tokens
        self.engine = engine
        super().__init__(
            f"engine {engine!r} generated {new_tokens} new token(s) for a budget of {budget}; "
            "a latency for the wrong number of tokens would be silently mislabelled"
        )


def _wait_until(deadline: float) -> None:
    # sleep() can overshoot by a scheduler tick, so sleep most of the way and spin
    # the last millisecond: the injected factor stays close to the one asked for.
    remaining = deadline - perf_counter()
    if remaining > 2e-3:
        time.sleep(remaining - 1e-3)
    while perf_counter() < deadline:
        pass


class _StepHook(StoppingCriteria):
    """What runs after every step: the injected delay, then the step clock.

    After each step the device is synchronised. With ``slowdown`` > 1 the host then
    waits ``slowdown - 1`` times as long as the step took since the previous hook
    (or since the clock started), so every step, and the whole generation, takes
    about ``slowdown`` times as long. When instrumented, the end of the step (its
    delay included) is time-stamped. It never asks ``generate`` to stop: the all-False
    flags it returns are allocated once, so the hook adds no allocation per step.
    """

    def __init__(
        self,
        synchronize: Callable[[], None],
        device: torch.device,
        *,
        instrument: bool,
        slowdown: float,
    ):
        self._synchronize = synchronize
        self._never = torch.zeros(1, dtype=torch.bool, device=device)
        self.instrument = instrument
        self.slowdown = slowdown
        self.stamps: list[float] = []
        self._step_start = 0.0

    @property
    def needed(self) -> bool:
        """Whether anything must run after each step."""
        return self.instrument or self.slowdown != 1.0

    def begin(self) -> float:
        """Synchronise the device and start the clock; return the start time."""
        self._synchronize()
        self._step_start = perf_counter()
        return self._step_start

    def __call__(self, input_ids: Any = None, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        self._synchronize()
        if self.slowdown != 1.0:
            now = perf_counter()
            _wait_until(now + (self.slowdown - 1.0) * (now - self._step_start))
        self._step_start = perf_counter()
        if self.instrument:
            self.stamps.append(self._step_start)
        return self._never


def _step_times(start: float, stamps: list[float], end: float) -> list[float]:
    # Step boundaries partition [start, end]: the last step runs to the final
    # synchronisation, so the steps add up to the latency exactly (see module docs).
    bounds = [start, *stamps[:-1], end]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@dataclass(frozen=True)
class _LoopPlan:
    """What the loop needs from the model, worked out before the clock starts."""

    cache_name: str
    forward_extra: dict[str, Any]
    eos: torch.Tensor | None

    @classmethod
    def for_model(cls, loaded: LoadedModel, device: torch.device) -> _LoopPlan:
        parameters = inspect.signature(loaded.model.forward).parameters
        # transformers renamed the forward argument `past_key_values` to `cache` within
        # 5.x; the output attribute carries the same name.
        cache_name = "cache" if "cache" in parameters else "past_key_values"
        extra: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
        eos = (
            torch.tensor(loaded.eos_token_ids, dtype=torch.long, device=device)
            if loaded.eos_token_ids
            else None
        )
        return cls(cache_name, extra, eos)


def _greedy_loop(
    model: torch.nn.Module,
    plan: _LoopPlan,
    input_ids: torch.Tensor,
    budget: int,
    use_cache: bool,
    on_step: Callable[[], Any] | None,
) -> torch.Tensor:
    generated: list[torch.Tensor] = []
    sequence = input_ids
    outputs = model(input_ids=input_ids, use_cache=use_cache, **plan.forward_extra)
    for step in range(budget):
        # float32 before the argmax, as generate does, so ties resolve identically.
        logits = outputs.logits[:, -1, :].to(dtype=torch.float32, copy=True)
        if plan.eos is not None:
            logits.index_fill_(1, plan.eos, -math.inf)
        token = logits.argmax(dim=-1, keepdim=True)
        generated.append(token)
        if not use_cache:
            sequence = torch.cat([sequence, token], dim=1)
        if on_step is not None:
            on_step()
        if step + 1 == budget:
            break
        if use_cache:
            past = {plan.cache_name: getattr(outputs, plan.cache_name)}
            outputs = model(input_ids=token, use_cache=True, **past, **plan.forward_extra)
        else:
            outputs = model(input_ids=sequence, use_cache=False, **plan.forward_extra)
    return torch.cat(generated, dim=1)


def _check_inputs(
    loaded: LoadedModel, backend: Backend, input_ids: Any, budget: int, use_cache: bool, engine: str
) -> torch.Tensor:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")
    if not isinstance(use_cache, bool):
        raise ValueError(f"use_cache must be True or False, got {use_cache!r}")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        shape = (
            tuple(input_ids.shape)
            if isinstance(input_ids, torch.Tensor)
            else type(input_ids).__name__
        )
        raise ValueError(f"input_ids must be a tensor of shape (1, prompt_tokens), got {shape}")
    if input_ids.shape[1] < 1 or input_ids.dtype != torch.long:
        raise ValueError(
            "input_ids must hold at least one token as torch.long, "
            f"got {tuple(input_ids.shape)} {input_ids.dtype}"
        )
    used = positions_used(input_ids.shape[1], budget)
    if loaded.max_positions is not None and used > loaded.max_positions:
        raise ValueError(
            f"prompt ({input_ids.shape[1]}) + budget ({budget}) - 1 = {used} positions "
            f"(the last token is never fed back) exceeds {loaded.label}'s "
            f"{loaded.max_positions} positions; lower the budget to "
            f"{loaded.max_positions - input_ids.shape[1] + 1} or less"
        )
    device = backend.torch_device
    if loaded.device.type != device.type:
        raise ValueError(
            f"model {loaded.label!r} is on {loaded.device} but the backend is {backend.name!r}; "
            "load it with device=backend"
        )
    return input_ids.to(device)


def run_generation(
    loaded: LoadedModel,
    backend: Backend,
    input_ids: torch.Tensor,
    *,
    budget: int,
    use_cache: bool,
    engine: str = "generate",
    instrument: bool = False,
    slowdown: float = 1.0,
) -> TrialTiming:
    """Generate exactly ``budget`` greedy tokens after ``input_ids`` and time it.

    The device is synchronised before the clock starts and before it stops (see the
    module docstring for what the instrumented step times mean).

    Parameters
    ----------
    loaded : LoadedModel
        The model, already on ``backend``'s device.
    backend : Backend
        Where to run and how to synchronise.
    input_ids : torch.Tensor
        The prompt, shape ``(1, P)``, ``torch.long``; moved to the device before the
        clock starts.
    budget : int
        Tokens to generate (``max_new_tokens``); end-of-sequence is suppressed.
    use_cache : bool
        Decode with the KV cache, or recompute the whole sequence at every step.
    engine : str, default "generate"
        ``"generate"`` (Hugging Face ``generate``) or ``"loop"`` (an explicit greedy
        loop).
    instrument : bool, default False
        Synchronise after every step and return per-step times.
    slowdown : float, default 1.0
        Fault injection: after every step, synchronise and wait ``slowdown - 1`` times
        as long as the step took, so the generation takes about ``slowdown`` times as
        long. At 1.0 nothing runs between steps.

    Returns
    -------
    TrialTiming
        The latency, the phase split and step times when instrumented, and the tokens.

    Raises
    ------
    BudgetMismatch
        The engine produced another number of tokens.
    ValueError
        An unknown engine, a non-positive budget, a malformed prompt, a sequence
        longer than the model's positions, a model on another device, or a slowdown
        below 1.

    See Also
    --------
    load_model : build or load the model.

    Examples
    --------
    >>> from collectors.backends import get_backend
    >>> from collectors.models import load_model, make_prompt
    >>> loaded, cpu = load_model("tiny-gpt2"), get_backend("cpu")
    >>> timing = run_generation(loaded, cpu, make_prompt(4, loaded.vocab_size), budget=8,
    ...                         use_cache=True, engine="loop", instrument=True)
    >>> timing.new_tokens, len(timing.step_s), timing.latency_s > 0
    (8, 8, True)
    """
    input_ids = _check_inputs(loaded, backend, input_ids, budget, use_cache, engine)
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)):
        raise ValueError(f"slowdown must be a number >= 1, got {slowdown!r}")
    if not (slowdown >= 1 and math.isfinite(slowdown)):
        raise ValueError(f"slowdown must be a number >= 1, got {slowdown!r}")
    hook = _StepHook(
        backend.synchronize, input_ids.device, instrument=instrument, slowdown=float(slowdown)
    )
    with torch.inference_mode():
        if engine == "generate":
            call, offset = _generate_call(loaded, input_ids, budget, use_cache, hook)
        else:
            call, offset = _loop_call(loaded, input_ids, budget, use_cache, hook)
        start = hook.begin()
        output = call()
        backend.synchronize()
        end = perf_counter()
    return _timing(output[:, offset:], start, end, hook, budget, engine)


def _generate_call(
    loaded: LoadedModel, input_ids: torch.Tensor, budget: int, use_cache: bool, hook: _StepHook
) -> tuple[Callable[[], torch.Tensor], int]:
    """Prepare the ``generate`` call to time; say where its new tokens start."""
    kwargs: dict[str, Any] = {
        "attention_mask": torch.ones_like(input_ids),
        "max_new_tokens": budget,
        "min_new_tokens": budget,
        "do_sample": False,
        "use_cache": use_cache,
    }
    if hook.needed:
        kwargs["stopping_criteria"] = StoppingCriteriaList([hook])
    model = cast(GenerationMixin, loaded.model)
    return partial(model.generate, input_ids, **kwargs), input_ids.shape[1]


def _loop_call(
    loaded: LoadedModel, input_ids: torch.Tensor, budget: int, use_cache: bool, hook: _StepHook
) -> tuple[Callable[[], torch.Tensor], int]:
    """Prepare the explicit loop to time (its output holds only the new tokens)."""
    plan = _LoopPlan.for_model(loaded, input_ids.device)
    on_step = hook if hook.needed else None
    return partial(_greedy_loop, loaded.model, plan, input_ids, budget, use_cache, on_step), 0


def _timing(
    tokens: torch.Tensor, start: float, end: float, hook: _StepHook, budget: int, engine: str
) -> TrialTiming:
    """Check the token count and split the latency into steps when instrumented."""
    new_tokens = int(tokens.shape[1])
    if new_tokens != budget:
        raise BudgetMismatch(budget, new_tokens, engine)
    latency = end - start
    if not hook.instrument:
        return TrialTiming(latency, None, None, None, new_tokens, tokens)
    if len(hook.stamps) != new_tokens:
        raise RuntimeError(
            f"instrumentation recorded {len(hook.stamps)} step(s) for {new_tokens} token(s) "
            f"with engine {engine!r}; per-step times would be misaligned"
        )
    steps = _step_times(start, hook.stamps, end)
    return TrialTiming(latency, steps[0], sum(steps[1:]), steps, new_tokens, tokens)
