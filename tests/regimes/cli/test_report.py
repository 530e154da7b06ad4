"""``regimes report --baseline``: the report of a run set against a base run."""

from pathlib import Path

from regimes.cli import main

DATA = Path(__file__).resolve().parents[3] / "examples" / "data"


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
