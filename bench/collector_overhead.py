"""Measure how much the collector adds to what it measures, and whether injection hits its factor.

Four paired comparisons on the same model and prompt, each run interleaved (the two
arms alternate, and the arm that goes first alternates from pair to pair, so drift and
warm-up trends hit both equally):

* ``overhead``: ``run_generation(engine="generate")`` uninstrumented, its reported
  ``latency_s``, against a bare ``model.generate`` timed by hand between two device
  synchronisations with the same arguments. A ratio of 1 means the collector reports
  what a user timing ``generate`` by hand would see.
* ``instrumented``: per-step synchronised timing against uninstrumented timing, for each
  engine: the cost of the phase split.
* ``loop/generate``: the explicit greedy loop against ``generate`` (both uninstrumented).
* ``inject x3``: fault injection (``slowdown=3``, the spec's ``inject``) against none, for
  each engine: the ratio should be close to 3 (the injected delay is proportional to
  each step's own time; what it cannot stretch is the call's return path).

For each budget the table shows the median latency of each arm and the median of the
per-pair ratios with its interquartile range. The figures go to ``--out`` (default
``bench/results/collector_overhead-BACKEND.json``, see ``bench/record.py``). Run::

    python bench/collector_overhead.py                      # tiny-gpt2 on the CPU
    python bench/collector_overhead.py --backend cuda --model gpt2 --budgets 32 128 512
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import torch
from record import Record

from collectors.backends import get_backend
from collectors.engines import run_generation
from collectors.models import load_model, make_prompt


def _bare_generate(loaded, backend, input_ids, budget: int, use_cache: bool) -> Callable[[], float]:
    mask = torch.ones_like(input_ids)

    def run() -> float:
        with torch.inference_mode():
            backend.synchronize()
            start = perf_counter()
            loaded.model.generate(
                input_ids,
                attention_mask=mask,
                max_new_tokens=budget,
                min_new_tokens=budget,
                do_sample=False,
                use_cache=use_cache,
            )
            backend.synchronize()
            return perf_counter() - start

    return run


def _collector(
    loaded, backend, input_ids, budget, use_cache, engine, instrument, slowdown=1.0
) -> Callable[[], float]:
    def run() -> float:
        return run_generation(
            loaded,
            backend,
            input_ids,
            budget=budget,
            use_cache=use_cache,
            engine=engine,
            instrument=instrument,
            slowdown=slowdown,
        ).latency_s

    return run


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def paired(arm_a: Callable[[], float], arm_b: Callable[[], float], pairs: int, warmup: int) -> dict:
    """Median latencies of both arms and quartiles of the per-pair ratio a / b."""
    for _ in range(warmup):
        arm_a()
        arm_b()
    a_times, b_times = [], []
    for index in range(pairs):
        if index % 2 == 0:
            a, b = arm_a(), arm_b()
        else:
            b, a = arm_b(), arm_a()
        a_times.append(a)
        b_times.append(b)
    ratios = [a / b for a, b in zip(a_times, b_times, strict=True)]
    q1, median, q3 = _quantiles(ratios)
    return {
        "a_ms": 1e3 * statistics.median(a_times),
        "b_ms": 1e3 * statistics.median(b_times),
        "ratio": median,
        "q1": q1,
        "q3": q3,
    }


def name_the_device(record: Record, backend) -> None:
    """Name in ``record`` the device and the torch that measured it."""
    record.options["device"] = backend.device_name()
    record.options["torch"] = torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompt", type=int, default=65, help="prompt tokens")
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-cache", action="store_true", help="measure with the KV cache off")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads for the run"
    )
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    record = Record(f"collector_overhead-{args.backend}", vars(args))

    if args.threads:
        torch.set_num_threads(args.threads)
    backend = get_backend(args.backend)
    if not backend.is_available():
        print(
            f"backend {args.backend} unavailable: {backend.unavailable_reason()}", file=sys.stderr
        )
        return 2
    loaded = load_model(args.model, dtype=args.dtype, device=backend)
    input_ids = make_prompt(args.prompt, loaded.vocab_size).to(backend.torch_device)
    use_cache = not args.no_cache

    print(
        f"# {loaded.label} {args.dtype} on {backend.name} ({backend.device_name()}), "
        f"prompt {args.prompt}, cache {'on' if use_cache else 'off'}, "
        f"{args.pairs} interleaved pairs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    header = f"{'comparison':<24}{'budget':>7}{'A ms':>11}{'B ms':>11}{'A/B median':>12}{'IQR':>18}"
    print(header)
    print("-" * len(header))
    for budget in args.budgets:

        def arm(
            engine: str, instrument: bool, slowdown: float = 1.0, budget: int = budget
        ) -> Callable[[], float]:
            return _collector(
                loaded, backend, input_ids, budget, use_cache, engine, instrument, slowdown
            )

        comparisons = {
            "overhead (A=collector)": (
                arm("generate", False),
                _bare_generate(loaded, backend, input_ids, budget, use_cache),
            ),
            "instrumented generate": (arm("generate", True), arm("generate", False)),
            "instrumented loop": (arm("loop", True), arm("loop", False)),
            "loop / generate": (arm("loop", False), arm("generate", False)),
            "inject x3 generate": (arm("generate", False, 3.0), arm("generate", False)),
            "inject x3 loop": (arm("loop", False, 3.0), arm("loop", False)),
        }
        for label, (arm_a, arm_b) in comparisons.items():
            result = paired(arm_a, arm_b, args.pairs, args.warmup)
            section = f"{label}, budget {budget}"
            record.value(section, "A median", result["a_ms"], unit="ms", n=args.pairs)
            record.value(section, "B median", result["b_ms"], unit="ms", n=args.pairs)
            record.value(
                section,
                "A/B median ratio (interquartile range)",
                result["ratio"],
                unit="x",
                low=result["q1"],
                high=result["q3"],
                n=args.pairs,
            )
            iqr = f"[{result['q1']:.4f}, {result['q3']:.4f}]"
            print(
                f"{label:<24}{budget:>7}{result['a_ms']:>11.2f}{result['b_ms']:>11.2f}"
                f"{result['ratio']:>12.4f}{iqr:>18}"
            )
    name_the_device(record, backend)
    record.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
