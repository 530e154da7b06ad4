"""End-to-end demo: collect a small real sweep here, analyse it and the committed H200 run.

Run it with ``make demo`` (which sets up ``.venv`` first) or ``python examples/demo.py``.

1. Picks this machine's best backend (mps on an Apple-silicon Mac, cuda on a GPU box,
   else cpu) and collects a small sweep of the ``tiny-gpt2`` preset there, cache on and
   off, into ``demo/runs/<backend>-tiny-gpt2`` (rerunning resumes, so a second
   ``make demo`` reuses what is on disk).
2. Analyses that run and two committed real CUDA runs, ``examples/data/cuda-h200-gpt2``
   and ``examples/data/cuda-h200-instrumented`` (prefill and every decode step timed):
   regimes (change points, anomalies), the KV-cache speedup and, where the run has
   them, the phases.
3. Writes one offline HTML report per run under ``demo/`` plus PNG charts, and prints
   their paths and the headline findings.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITTED_RUNS = {
    "NVIDIA H200 (gpt2, committed)": "cuda-h200-gpt2",
    "NVIDIA H200 (gpt2, instrumented, committed)": "cuda-h200-instrumented",
}


def demo_spec(backend: str) -> dict:
    """A sweep that takes a minute or two on a 2-core CPU (less on an accelerator)."""
    return {
        "models": ["tiny-gpt2"],
        "backends": [backend],
        "dtypes": ["float32"],
        "use_cache": [True, False],
        "prompt_tokens": [16],
        "budgets": {"start": 8, "stop": 128, "step": 8},
        "trials": 3,
        "warmup": 1,
        "sessions": 2,
        "isolation": "none",
        "instrument": False,
        "engine": "generate",
        "seed": 0,
    }


def collect(out: Path) -> Path:
    from collectors.backends import available_backends
    from collectors.spec import SweepSpec
    from collectors.sweep import run_sweep

    available = available_backends()
    backend = next(name for name in ("mps", "cuda", "cpu") if name in available)
    run_dir = out / "runs" / f"{backend}-tiny-gpt2"
    print(f"[1/3] collecting a tiny-gpt2 sweep on {backend!r} into {run_dir}")
    spec = SweepSpec.from_dict(demo_spec(backend))
    result = run_sweep(spec, run_dir, command=[sys.executable, *sys.argv])
    print(result.summary())
    if result.status != "complete":
        raise SystemExit(f"the demo sweep did not complete ({result.status}); rerun to resume")
    return run_dir


def analyse(run_dir: Path, out: Path, name: str) -> list[str]:
    from regimes.viz.html import build_report

    started = time.perf_counter()
    report = build_report(run_dir, title=f"regimes: {name}")
    html = report.write(out / f"{name}.html")
    images = report.write_images(out / "png" / name, "png")
    print(f"      {name}: analysed in {time.perf_counter() - started:.1f} s")
    print(f"      report: {html}")
    for image in images:
        print(f"      chart:  {image}")
    return report.findings()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "demo", help="output folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    run_dir = collect(args.out)
    print("[2/3] analysing the fresh run and the committed H200 runs")
    findings = {"this machine (tiny-gpt2)": analyse(run_dir, args.out, "report")}
    for label, name in COMMITTED_RUNS.items():
        findings[label] = analyse(ROOT / "examples" / "data" / name, args.out, name)
    print("[3/3] headline findings")
    for name, lines in findings.items():
        print(f"  {name}:")
        for line in lines:
            print(f"    - {line}")
    print(f"\nopen {args.out / 'report.html'} in a browser (works offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
