"""Profiled generations: per-operator self times under :func:`torch.profiler.profile`.

A profiled generation (spec key ``profile``) runs exactly as a timed one, inside the
PyTorch profiler. Its events give one row per operator (``aten::mm``,
``aten::_scaled_dot_product_flash_attention_for_cpu``, ...) and *scope*, the outermost
operator it ran inside (``aten::transpose`` inside ``aten::scaled_dot_product_attention``
is scoped to the attention; called from the model's own code, to itself):
``self_host_s``, the time spent in the operator itself and not in the operators it
called, on the host; ``self_device_s``, the same on the device for backends whose
profiler reports device activity (CUDA, through Kineto: its kernels are rows of their
own, ``device_type`` ``"cuda"``, scoped to the operator that launched them, and each
kernel's time is on its own row only), null elsewhere (the CPU; Apple's MPS, whose operators
the generic profiler sees on the host only); ``calls``. The profiler's own cost makes
these generations slower than timed ones, which is why they are trials of their own.

``slow_attention`` (:func:`slowed_attention`) computes every call of
:func:`torch.nn.functional.scaled_dot_product_attention` ``factor`` times: a real,
operator-specific slowdown for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["DEVICE_ACTIVITY", "kineto_links", "operator_rows", "profiled", "slowed_attention"]

T = TypeVar("T")

DEVICE_ACTIVITY: dict[str, ProfilerActivity] = {"cuda": ProfilerActivity.CUDA}
"""Backends whose profiler reports device times, and the activity that records them."""


def profiled(run: Callable[[], T], backend: str) -> tuple[T, list[dict[str, Any]]]:
    """Run ``run()`` under the profiler; return its result and one row per operator.

    Parameters
    ----------
    run : callable
        The generation (it synchronises the device itself).
    backend : str
        ``"cpu"``, ``"cuda"`` or ``"mps"``: device times are recorded for those in
        :data:`DEVICE_ACTIVITY` only.

    Returns
    -------
    tuple
        ``run()``'s result and rows of ``scope``, ``operator``, ``device_type``,
        ``self_host_s``, ``self_device_s`` (None without device times) and ``calls``.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(8, 8)
    >>> out, rows = profiled(lambda: x @ x, "cpu")
    >>> any(r["operator"] == "aten::mm" and r["calls"] == 1 for r in rows)
    True
    """
    activities = [ProfilerActivity.CPU]
    device = DEVICE_ACTIVITY.get(backend)
    if device is not None:
        activities.append(device)
    with profile(activities=activities) as prof:
        out = run()
    links = kineto_links(prof.profiler.kineto_results.events()) if device is not None else None
    return out, operator_rows(prof.events(), device_times=device is not None, links=links)


def kineto_links(events: Iterable[Any]) -> dict[tuple[int, str], int]:
    """Map each linked Kineto event to the correlation id of the operator it belongs to.

    Kineto gives a CUDA kernel and the runtime call that launched it
    (``cudaLaunchKernel``) one correlation id of their own, and links both to the
    correlation id of the operator that was running when the call was made. Before torch
    2.12 the profiler's function events do not carry that link: only its Kineto events do.

    Parameters
    ----------
    events : iterable
        Kineto events (``prof.profiler.kineto_results.events()``).

    Returns
    -------
    dict
        ``(correlation id, name)`` of each event with a link, to its operator's
        correlation id (the ``id`` of the operator's function event).
    """
    return {
        (event.correlation_id(), event.name()): event.linked_correlation_id()
        for event in events
        if event.linked_correlation_id() > 0
    }


PROFILER_OWN_EVENTS = frozenset({"Activity Buffer Request"})
"""Host events the profiler records of its own work, never an operator's scope: on a real
H200 profile a CUPTI buffer request that overlapped the model's operators became the
parent of 41 of them, and the root of their kernels."""


def _root(event: Any) -> Any:
    """Return the outermost operator enclosing ``event`` (itself where none does)."""
    root = event
    while (parent := getattr(event, "cpu_parent", None)) is not None:
        event = parent
        if event.name not in PROFILER_OWN_EVENTS:
            root = event
    return root


def _linked(event: Any, links: dict[tuple[int, str], int] | None) -> int:
    """Return the correlation id of the operator ``event`` belongs to (0: none, an operator)."""
    linked = getattr(event, "linked_correlation_id", None)
    if linked is None and links is not None:
        linked = links.get((event.id, event.name))
    return int(linked or 0)


def _device_scopes(events: list[Any], kinds: list[str], linked: list[int]) -> list[str]:
    """Return each event's scope; for a device event, that of the call that launched it.

    On real CUDA profiles (torch 2.11, an H200) a kernel shares its correlation id with
    the runtime call that launched it (``cudaLaunchKernel``, ``cuLaunchKernelEx``), and
    both are linked to the operator's; the runtime call is a host event inside that
    operator, so its scope is the kernel's. That holds where the operator itself is not
    among the events: the profiler merges an operator into a parent of the same name
    (``aten::sum`` inside ``aten::sum``), and a kernel linked to it would find none. The
    operator the link names is the fallback; a device event linked to neither keeps its
    own name. Correlation ids of runtime calls are counted apart from the operators' and
    can equal one of theirs, so the two are looked up in maps of their own.
    """
    runtime: dict[tuple[int, int], str] = {}
    operators: dict[int, str] = {}
    for event, kind, link in zip(events, kinds, linked, strict=True):
        if kind == "cpu" and link:
            runtime[(event.id, link)] = _root(event).name
        elif kind == "cpu" and getattr(event, "id", None) is not None:
            operators.setdefault(event.id, _root(event).name)
    scopes = []
    for event, kind, link in zip(events, kinds, linked, strict=True):
        if kind == "cpu":
            scopes.append(_root(event).name)
        elif link:
            scopes.append(runtime.get((event.id, link)) or operators.get(link, event.name))
        else:
            scopes.append(event.name)
    return scopes


def operator_rows(
    events: Iterable[Any],
    *,
    device_times: bool,
    links: dict[tuple[int, str], int] | None = None,
) -> list[dict[str, Any]]:
    """Sum a profile's events into one row per (scope, operator, device type).

    A host event's scope is its outermost enclosing operator. A device event (a CUDA
    kernel, a memcpy) has no host parent of its own: its scope is that of the runtime
    call that launched it, found through the profiler's correlation ids (its own name
    where none is linked; see :func:`_device_scopes`). With device times recorded, a
    kernel's time is counted once, on the kernel's row: the host operators' rows carry
    the device time of no kernel (their ``self_device_s`` is 0), so that sums over
    rows are not counted twice.

    Parameters
    ----------
    events : iterable
        :class:`torch.autograd.profiler_util.FunctionEvent` objects (``prof.events()``).
    device_times : bool
        Whether the backend's profiler recorded device activity.
    links : dict, optional
        :func:`kineto_links` of the same profile, for events that carry no
        ``linked_correlation_id`` of their own (torch before 2.12).

    Returns
    -------
    list of dict
        ``scope``, ``operator``, ``device_type``, ``self_host_s``, ``self_device_s``
        (None without device times) and ``calls``.
    """
    events = list(events)
    kinds = [str(event.device_type).rsplit(".", 1)[-1].lower() for event in events]
    scopes = _device_scopes(events, kinds, [_linked(event, links) for event in events])
    totals: dict[tuple[str, str, str], list[float]] = {}
    for event, kind, scope in zip(events, kinds, scopes, strict=True):
        entry = totals.setdefault((scope, event.name, kind), [0.0, 0.0, 0])
        entry[0] += event.self_cpu_time_total if kind == "cpu" else 0.0
        entry[1] += 0.0 if kind == "cpu" else event.self_device_time_total
        entry[2] += 1
    return [
        {
            "scope": scope,
            "operator": operator,
            "device_type": kind,
            "self_host_s": host / 1e6,
            "self_device_s": on_device / 1e6 if device_times else None,
            "calls": int(calls),
        }
        for (scope, operator, kind), (host, on_device, calls) in totals.items()
    ]


@contextlib.contextmanager
def slowed_attention(factor: int) -> Iterator[None]:
    """Compute every scaled-dot-product attention call ``factor`` times inside the block.

    The call's result is that of its last computation, so the tokens are unchanged.

    Examples
    --------
    >>> import torch
    >>> q = torch.ones(1, 1, 4, 8)
    >>> with slowed_attention(3):
    ...     out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    >>> tuple(out.shape)
    (1, 1, 4, 8)
    """
    if factor == 1:
        yield
        return
    original = torch.nn.functional.scaled_dot_product_attention

    def repeated(*args: Any, **kwargs: Any) -> torch.Tensor:
        for _ in range(factor - 1):
            original(*args, **kwargs)
        return original(*args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = repeated
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
