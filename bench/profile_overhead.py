"""Measure what the operator profiler costs a generation: profiled against timed ones.

The spec key ``profile`` runs generations under :func:`collectors.profiling.profiled`.
Here the same case (model, prompt, budget) runs timed and profiled in interleaved pairs
(the arm that goes first alternates from pair to pair, so drift and warm-up trends hit
both equally). Three figures per budget:

* ``timed``: the generation's ``latency_s`` as a timed trial records it;
* ``profiled``: its ``latency_s`` with the profiler on, as the ``ops`` rows record it;
* ``profiled with its processing``: the wall-clock of the whole profiled generation,
  the profiler's start and stop and the summing of its events into operator rows
  included (what a profiled generation adds to a sweep's duration).

Each ratio is the median of the per-pair ratios over the timed generation, with its
interquartile range. The figures go to ``--out`` (default
``bench/results/profile_overhead-BACKEND.json``, see ``bench/record.py``). Run::

    python bench/profile_overhead.py --backend cuda --model gpt2 --dtype float16
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from time import perf_counter

import torch
from collector_overhead import _quantiles, name_the_device
from record import Record

from collectors.backends import get_backend
from collectors.engines import run_generation
from collectors.models import load_model, make_prompt
from collectors.profiling import profiled

ARMS = ("timed", "profiled", "profiled with its processing")


def _arms(
    generate: Callable[[], float], backend: str
) -> tuple[Callable[[], dict[str, float]], Callable[[], dict[str, float]]]:
    """Return the timed arm and the profiled arm, each giving the seconds it measured."""

    def timed() -> dict[str, float]:
        return {"timed": generate()}

    def profiled_arm() -> dict[str, float]:
        start = perf_counter()
        latency, _ = profiled(generate, backend)
        return {"profiled": latency, "profiled with its processing": perf_counter() - start}

    return timed, profiled_arm


def pairs_of(
    timed: Callable[[], dict[str, float]],
    profiled_arm: Callable[[], dict[str, float]],
    pairs: int,
    warmup: int,
) -> dict[str, list[float]]:
    """Run interleaved pairs after ``warmup`` of each; return each arm's seconds."""
    for _ in range(warmup):
        timed()
        profiled_arm()
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for index in range(pairs):
        first, second = (timed, profiled_arm) if index % 2 == 0 else (profiled_arm, timed)
        for measured in (first(), second()):
            for arm, value in measured.items():
                seconds[arm].append(value)
    return seconds


def _report(record: Record, budget: int, seconds: dict[str, list[float]], n: int) -> None:
    """Record and print one budget's medians and ratios over the timed generation."""
    section = f"profiled / timed, budget {budget}"
    line = [f"{budget:>7}"]
    for arm in ARMS:
        median = 1e3 * statistics.median(seconds[arm])
        record.value(section, f"{arm} median", median, unit="ms", n=n)
        line.append(f"{median:>11.1f}")
    for arm in ARMS[1:]:
        ratios = [a / b for a, b in zip(seconds[arm], seconds["timed"], strict=True)]
        q1, median, q3 = _quantiles(ratios)
        metric = f"{arm} / timed median ratio (interquartile range)"
        record.value(section, metric, median, unit="x", low=q1, high=q3, n=n)
        line.append(f"{median:>9.2f} [{q1:.2f}, {q3:.2f}]")
    print("".join(line))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--attn", default="sdpa", help="attn_implementation")
    parser.add_argument("--prompt", type=int, default=65, help="prompt tokens")
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--engine", default="generate")
    parser.add_argument("--out", default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    record = Record(f"profile_overhead-{args.backend}", vars(args))
    backend = get_backend(args.backend)
    if not backend.is_available():
        print(
            f"backend {args.backend} unavailable: {backend.unavailable_reason()}", file=sys.stderr
        )
        return 2
    loaded = load_model(args.model, dtype=args.dtype, device=backend, attn_implementation=args.attn)
    input_ids = make_prompt(args.prompt, loaded.vocab_size).to(backend.torch_device)
    print(
        f"# {loaded.label} {args.dtype} {args.attn} on {backend.name} "
        f"({backend.device_name()}), prompt {args.prompt}, engine {args.engine}, "
        f"{args.pairs} interleaved pairs, torch {torch.__version__}"
    )
    print(
        f"{'budget':>7}{'timed ms':>11}{'prof. ms':>11}{'+proc. ms':>11}"
        f"{'prof./timed [IQR]':>24}{'+proc./timed [IQR]':>24}"
    )
    for budget in args.budgets:

        def generate(budget: int = budget) -> float:
            timing = run_generation(
                loaded, backend, input_ids, budget=budget, use_cache=True, engine=args.engine
            )
            return float(timing.latency_s)

        seconds = pairs_of(*_arms(generate, args.backend), args.pairs, args.warmup)
        _report(record, budget, seconds, args.pairs)
    name_the_device(record, backend)
    record.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
