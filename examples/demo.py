"""End-to-end demo: measure a sweep here with a known slowdown, find it, explain it.

Run it with ``make demo`` (which sets up ``.venv`` first) or ``python examples/demo.py``.

1. Looks at how quiet this machine is (load, other busy processes, the CPU governor,
   other processes on the GPU) and prints every warning before measuring anything.
2. Collects a small real sweep of the ``tiny-gpt2`` preset (random weights, no
   download) on this machine's best backend (mps on an Apple-silicon Mac, cuda on a GPU
   box, else cpu), cache on and off, with prefill and every decode step timed
   (``examples/sweeps/demo-injected.toml``), with one CPU thread unless
   ``OMP_NUM_THREADS`` says otherwise (:data:`THREAD_VARIABLES`). The collector slows
   one interval of budgets down by a known factor (the spec's ``inject`` key), so the
   run holds a regime whose truth is known; ``meta.json`` marks it synthetic. The sweep
   stops after :data:`MAX_SECONDS` of measuring, on a busy machine too, and a rerun
   resumes it.
3. Finds the regime and explains it: where it starts and ends, its ratio over the
   smooth trend with a CI, the phase that carries it, whether memory explains it; beside
   it, two committed real NVIDIA H200 runs (``examples/data/``), where nothing departs
   from the trend.
4. Writes one offline HTML report per run under ``demo/`` plus PNG charts, and prints
   where everything went.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from regimes.errors import RegimesInputError

ROOT = Path(__file__).resolve().parent.parent
COMMITTED_RUNS = {
    "NVIDIA H200 (gpt2, committed)": "cuda-h200-gpt2",
    "NVIDIA H200 (gpt2, instrumented, committed)": "cuda-h200-instrumented",
}
MINE = "this machine (tiny-gpt2, injected slowdown)"
SPEC = ROOT / "examples" / "sweeps" / "demo-injected.toml"
"""The sweep: 12 budgets x cache on/off x 3 trials x 2 sessions, 144 measured trials."""
MAX_SECONDS = 120.0
"""The longest the sweep measures; well under a minute on a quiet 2-core CPU."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Set to 1 unless already set: with several threads every step waits for the slowest,
and a thread that other work takes the core from stalls the whole step, so a busy
machine spreads each cell over tens of times its latency."""


def pin_threads() -> str:
    """Time with one CPU thread unless the caller chose otherwise; return the setting.

    Must run before torch is imported (``collect`` imports it).
    """
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    return os.environ[THREAD_VARIABLES[0]]


def demo_spec(backend: str) -> dict:
    """The demo's sweep (:data:`SPEC`) on ``backend``, as a spec dict."""
    from collectors.spec import SweepSpec

    spec = SweepSpec.from_toml(SPEC, check_available=False).to_dict()
    return {**spec, "backends": [backend]}


def injected(spec: dict) -> tuple[int, int, float]:
    """The known slowdown of ``spec``: its first and last budget, and its factor."""
    inject = spec["inject"]
    return inject["start"], inject["stop"], inject["factor"]


def print_hygiene(warnings: list[str], when: str) -> None:
    """Print each hygiene warning, or that the machine looked quiet."""
    if not warnings:
        print(f"      {when}: the machine looked quiet")
    for warning in warnings:
        print(f"      warning ({when}): {warning}")


def collect(out: Path) -> Path:
    """Look at the machine, print its warnings, and collect the demo sweep."""
    from collectors.backends import available_backends
    from collectors.hygiene import machine_state
    from collectors.spec import SweepSpec
    from collectors.sweep import run_sweep

    available = available_backends()
    backend = next(name for name in ("mps", "cuda", "cpu") if name in available)
    run_dir = out / "runs" / f"{backend}-tiny-gpt2-injected"
    threads = pin_threads()
    print(f"[1/4] how quiet is this machine? (timing with OMP_NUM_THREADS={threads})")
    state = machine_state()
    print_hygiene(state["warnings"], "before the sweep")
    raw = demo_spec(backend)
    spec = SweepSpec.from_dict(raw)
    start, stop, factor = injected(raw)
    print(
        f"[2/4] collecting tiny-gpt2 on {backend!r} into {run_dir}\n"
        f"      with a {factor:g}x slowdown injected at budgets {start}..{stop} "
        f"(the run is marked synthetic); at most {MAX_SECONDS:.0f} s"
    )
    result = run_sweep(
        spec,
        run_dir,
        max_seconds=MAX_SECONDS,
        command=[sys.executable, *sys.argv],
        hygiene=state,
    )
    print(result.summary())
    if result.status not in ("complete", "incomplete"):
        raise SystemExit(f"the demo sweep stopped ({result.status}); rerun to resume")
    if result.status == "incomplete":
        print(f"      the sweep ran out of its {MAX_SECONDS:.0f} s; analysing what is on disk")
    return run_dir


def stored_warnings(run_dir: Path) -> list[str]:
    """The hygiene warnings ``meta.json`` recorded when the run was collected."""
    import regimes

    hygiene: dict[str, Any] = regimes.read_run(run_dir).meta.get("hygiene") or {}
    return [str(warning) for warning in hygiene.get("warnings") or []]


def analyse(run_dir: Path, out: Path, name: str) -> tuple[Path, list[str]]:
    """Write the run's report and its PNG charts; return the report's path and findings."""
    from regimes.analysis import analyze
    from regimes.viz.html import build_report

    started = time.perf_counter()
    report = build_report(analyze(run_dir), title=f"regimes: {name}")
    html = report.write(out / f"{name}.html")
    report.write_images(out / "png" / name, "png")
    print(f"      {name}: analysed in {time.perf_counter() - started:.1f} s")
    return html, report.findings()


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "demo", help="output folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    run_dir = collect(args.out)
    print("[3/4] analysing the fresh run and the committed H200 runs")
    reports: dict[str, tuple[Path, list[str]]] = {}
    try:
        reports[MINE] = analyse(run_dir, args.out, "report")
    except RegimesInputError as error:  # a busy machine measured too little in time
        print(f"      report: not yet: {error}")
    for label, name in COMMITTED_RUNS.items():
        reports[label] = analyse(ROOT / "examples" / "data" / name, args.out, name)

    print("[4/4] findings")
    start, stop, factor = injected(demo_spec("cpu"))
    print(f"  the truth on this machine: {factor:g}x injected at budgets {start}..{stop}")
    if MINE not in reports:
        print(
            f"  {MINE}: too few trials measured in {MAX_SECONDS:.0f} s to analyse (the "
            "machine is busy: see the warnings); run the demo again and it measures the rest"
        )
    for label, (_, lines) in reports.items():
        print(f"  {label}:")
        for line in lines:
            print(f"    - {line}")
    print("  recorded in the run's meta.json when it was collected:")
    print_hygiene(stored_warnings(run_dir), "in meta.json")

    print(f"\nresults (after {time.perf_counter() - began:.0f} s):")
    print(f"  the run (trial table, steps, meta.json): {run_dir}")
    for label, (html, _) in reports.items():
        print(f"  report, {label}: {html}")
    print(f"  PNG charts: {args.out / 'png'}")
    first = next(iter(reports.values()), None)
    if first is not None:
        print(f"open {first[0]} in a browser (it works offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
