"""``regimes report``: a run set against a base run, and a refined run's refinement.

``cuda-h200-inject`` is real hardware with a synthetic 3x slowdown injected on budgets
105..201, refined on the GPU; the simulated run is synthetic (``SimulatedProbe``).
"""

import subprocess
import sys
from pathlib import Path

import regimes
from regimes.analysis import analyze
from regimes.cli import main
from regimes.data.io import RunWriter
from regimes.refine import SimulatedProbe, refine_boundaries
from regimes.viz.html import build_report

DATA = Path(__file__).resolve().parents[3] / "examples" / "data"
GRID = list(range(480, 657, 16))


def test_report_against_a_baseline_states_the_shift(tmp_path, capsys):
    out = tmp_path / "report.html"
    status = main(
        [
            "report",
            str(DATA / "cuda-h200-gpt2-rerun"),
            "--baseline",
            str(DATA / "cuda-h200-gpt2"),
            "-o",
            str(out),
        ]
    )
    assert status == 0
    text = out.read_text()
    assert "faster" in text  # the rerun's uniform shift is a finding of the report


def test_a_missing_baseline_is_one_line_and_exit_2(tmp_path, capsys):
    status = main(
        [
            "report",
            str(DATA / "cuda-h200-gpt2"),
            "--baseline",
            str(tmp_path / "nowhere"),
            "-o",
            str(tmp_path / "r.html"),
        ]
    )
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere" in err[0]


def test_report_of_a_refined_run_has_the_refinement_section(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(DATA / "cuda-h200-inject"), "-o", str(out), "--n-boot", "200"]) == 0
    text = out.read_text()
    assert "<section id='refinement'><h2>Boundary refinement</h2>" in text
    assert "id='chart-refine'" in text and '"chart-refine"' in text
    assert "onset 104|105" in text and "recovery 201|202" in text  # the chart's labels
    assert "latency onset lies between budgets 104 and 105" in text  # a finding
    assert "refinement probe" in text  # the latency chart marks the probe budgets


def test_report_of_a_run_without_probes_has_no_refinement_section(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(DATA / "cuda-h200-gpt2"), "-o", str(out), "--n-boot", "200"]) == 0
    text = out.read_text()
    assert "Boundary refinement" not in text
    assert "chart-refine" not in text and "refinement probe" not in text


def test_report_of_a_simulated_refined_run(tmp_path):
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=11)  # synthetic
    coarse = oracle.sweep(GRID, trials=3)
    refined = refine_boundaries(coarse, probe=oracle)
    writer = RunWriter(tmp_path / "run", {"spec": {"budgets": GRID}, "source": "synthetic"})
    keep = [c for c in regimes.TRIAL_SCHEMA if c in coarse.columns]
    writer.write_trials(coarse.select(keep))
    assert build_report(analyze(tmp_path / "run", n_boot=200)).refinement is None  # grid only
    writer.write_trials(refined.collected.select(keep))
    report = build_report(analyze(tmp_path / "run", n_boot=200))
    assert report.refinement is not None
    read_back = report.refinement.result
    assert read_back.boundaries.select("kind", "low", "high").rows() == [
        ("onset", 504, 505),
        ("recovery", 633, 634),
    ]
    assert read_back.generations == 0  # read back, nothing measured
    assert ("refine", report.refinement.chart) in report.figures()
    assert "onset 504|505" in report.to_html()


def test_the_report_never_loads_the_collectors():
    code = (
        "import sys\n"
        "from regimes.analysis import analyze\n"
        "from regimes.viz.html import build_report\n"
        f"report = build_report(analyze({str(DATA / 'cuda-h200-inject')!r}, n_boot=200))\n"
        "assert report.refinement is not None\n"
        "loaded = [m for m in ('torch', 'collectors', 'transformers') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
