"""``regimes collect`` end to end: real processes, real signals, resumes.

The subprocess tests start the command as a user would (``python -m regimes``),
interrupt it with SIGINT, kill it with SIGKILL, and rerun it; the final run must hold
every (case, session, trial) exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

import regimes
from collectors.spec import SweepSpec
from regimes.cli import main
from regimes.data.io import TRIAL_KEY

ROOT = Path(__file__).resolve().parents[2]
TINY_CPU = ROOT / "examples" / "sweeps" / "tiny-cpu.toml"

# Long enough (48 measured generations of ~50 ms) that the signals below land mid-sweep.
INTERRUPTIBLE = textwrap.dedent(
    """
    models = ["tiny-gpt2"]
    backends = ["cpu"]
    use_cache = [true, false]
    prompt_tokens = [4]
    budgets = [2, 4, 6, 8]
    trials = 3
    warmup = 1
    sessions = 2
    """
)


def collect(spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "regimes", "collect", str(spec), "-o", str(out), "-q", *extra]


def run(command: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start_and_wait_for_parts(command: list[str], out: Path, parts: int) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    give_up = time.monotonic() + 90
    while len(list((out / "trials").glob("*.parquet"))) < parts:
        assert child.poll() is None, f"collect ended early: {child.communicate()}"
        assert time.monotonic() < give_up, "no trials were written"
        time.sleep(0.02)
    return child


def assert_every_trial_once(spec: SweepSpec, out: Path) -> pl.DataFrame:
    df = regimes.load(out)
    assert df.schema == pl.Schema(regimes.TRIAL_SCHEMA)
    rows = df.filter(~pl.col("warmup"))
    assert rows.select(TRIAL_KEY).is_duplicated().sum() == 0
    got = rows.group_by(["budget", "use_cache", "session"]).agg(pl.col("trial").sort())
    assert got.height == len(spec.cases()) * spec.sessions
    assert all(trials == list(range(spec.trials)) for trials in got["trial"].to_list())
    assert (df["new_tokens"] == df["budget"]).all()
    return df


def warmed_but_unmeasured(df: pl.DataFrame) -> list[int]:
    """Per process and session, how many cases got warm-ups but no measured trial."""
    by = ["process_id", "session", *TRIAL_KEY[: TRIAL_KEY.index("session")]]
    cases = df.group_by(by).agg(
        pl.col("warmup").any().alias("warmed"), (~pl.col("warmup")).any().alias("measured")
    )
    stray = cases.group_by("process_id", "session").agg(
        (pl.col("warmed") & ~pl.col("measured")).sum()
    )
    return stray["warmed"].to_list()


def test_collect_tiny_cpu_spec_end_to_end(tmp_path):
    out = tmp_path / "tiny"
    done = run(collect(TINY_CPU, out))
    assert done.returncode == 0, done.stderr
    assert "sweep complete" in done.stdout and f"regimes.load({str(out)!r})" in done.stdout
    assert "Traceback" not in done.stderr
    spec = SweepSpec.from_toml(TINY_CPU)
    df = assert_every_trial_once(spec, out)
    assert df.filter(pl.col("warmup")).height == len(spec.cases()) * spec.warmup * spec.sessions
    assert set(warmed_but_unmeasured(df)) == {0}
    assert [len(list((out / t).glob("*.parquet"))) for t in ("trials", "steps", "errors")] == [
        1,
        0,
        0,
    ]


def test_sigint_then_sigkill_then_resume_loses_and_repeats_nothing(tmp_path):
    spec_path = tmp_path / "sweep.toml"
    spec_path.write_text(INTERRUPTIBLE)
    spec = SweepSpec.from_toml(spec_path)
    out = tmp_path / "run"

    child = start_and_wait_for_parts(collect(spec_path, out), out, 4)
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, stderr
    assert "sweep interrupted" in stdout and "resume with: regimes collect" in stdout
    assert "Traceback" not in stderr
    assert not list(out.glob("*/.*.tmp"))  # the signal waited for the part being written
    after_sigint = regimes.load(out).height
    assert 4 <= after_sigint < spec.total_trials(include_warmup=True)

    child = start_and_wait_for_parts(collect(spec_path, out), out, after_sigint + 6)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    after_kill = regimes.load(out)
    assert after_kill.filter(~pl.col("warmup")).height < spec.total_trials()

    final = run(collect(spec_path, out))
    assert final.returncode == 0, final.stderr
    df = assert_every_trial_once(spec, out)
    assert df["process_id"].n_unique() == 3
    # warm-ups are lazy: a stopped process warmed at most the case it was stopped in
    assert max(warmed_but_unmeasured(df)) <= 1
    assert df["order"].n_unique() == df.height
    assert not list(out.glob("*/.*.tmp"))


def test_spec_errors_print_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('models = ["tiny-gpt2"]\nbackends = ["cpu"]\nbudget = [2, 4]\n')
    assert main(["collect", str(bad), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "regimes collect: error: unknown key 'budget' (did you mean 'budgets'?); valid keys are "
        + str(list(SweepSpec.keys()))
    )
    assert not (tmp_path / "out").exists()  # failed before any work
    assert main(["collect", str(TINY_CPU), "-o", str(tmp_path / "out"), "--max-seconds", "0"]) == 2
    assert "--max-seconds must be positive" in capsys.readouterr().err


def test_max_seconds_stops_with_status_3_and_rerun_finishes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["collect", str(TINY_CPU), "-o", str(out), "-q", "--max-seconds", "1e-9"]) == 3
    printed = capsys.readouterr().out
    assert "sweep incomplete" in printed
    assert f"resume with: regimes collect {TINY_CPU} -o {out} --max-seconds 1e-09" in printed
    assert main(["collect", str(TINY_CPU), "-o", str(out), "-q"]) == 0
    assert_every_trial_once(SweepSpec.from_toml(TINY_CPU), out)
    changed = tmp_path / "changed.toml"
    changed.write_text(TINY_CPU.read_text().replace("trials        = 2", "trials        = 3"))
    assert main(["collect", str(changed), "-o", str(out), "-q"]) == 2
    assert "different spec (trials: 2 there, 3 now)" in capsys.readouterr().err


def test_cli_registration_does_not_import_torch():
    code = (
        "import sys, regimes.cli._main as c\n"
        "p = c._build_parser()\n"
        "assert p.parse_args(['collect', 'x.toml']).handler.__name__ == 'run_collect'\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("flag", ["--help"])
def test_collect_help_lists_the_options(flag, capsys):
    with pytest.raises(SystemExit) as info:
        main(["collect", flag])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--max-seconds", "-o RUN_DIR", "--no-compact", "--quiet"):
        assert option in text


# -- failures are visible to scripts; hygiene is recorded and warned about -------------

ONE_FAILING = textwrap.dedent(
    """
    models = ["tiny-gpt2"]
    backends = ["cpu"]
    use_cache = [true]
    prompt_tokens = [4]
    budgets = [2, 3]
    trials = 1
    warmup = 0
    sessions = 2
    """
)


def test_collect_exits_non_zero_with_a_count_when_a_case_failed(tmp_path, capsys, monkeypatch):
    from collectors import engines

    real = engines.run_generation

    def failing(loaded, backend, input_ids, *, budget, **kwargs):
        if budget == 3:
            raise RuntimeError("synthetic failure injected by the test")
        return real(loaded, backend, input_ids, budget=budget, **kwargs)

    monkeypatch.setattr(engines, "run_generation", failing)
    spec_path = tmp_path / "sweep.toml"
    spec_path.write_text(ONE_FAILING)
    out = tmp_path / "run"
    assert main(["collect", str(spec_path), "-o", str(out), "-q"]) == 4
    captured = capsys.readouterr()
    assert "sweep complete" in captured.out
    assert "2 failed case(s) in 2 session(s)" in captured.err
    assert regimes.read_run(out).errors.height == 2  # the errors table stays the record
    assert main(["collect", str(spec_path), "-o", str(out), "-q"]) == 4  # and a rerun says so


RUN_THE_CLI = "from regimes.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def test_collect_without_torch_says_to_install_the_collect_extra(tmp_path, without_torch):
    script = without_torch + RUN_THE_CLI
    done = subprocess.run(
        [sys.executable, "-c", script, "collect", str(TINY_CPU), "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "torch" in lines[0] and "pip install 'regimes[collect]'" in lines[0]
    assert not (tmp_path / "r").exists()


def test_collect_warns_when_the_machine_is_not_quiet_and_records_it(tmp_path, capsys, monkeypatch):
    from collectors import hygiene

    monkeypatch.setattr(hygiene, "_load_average", lambda: (50.0, 40.0, 30.0))
    out = tmp_path / "run"
    assert main(["collect", str(TINY_CPU), "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert "collect: warning: the machine is not quiet" in err and "load average 50.0" in err
    meta = regimes.read_run(out).meta
    assert meta["hygiene"]["load_average"] == [50.0, 40.0, 30.0]
    assert any("load average" in w for w in meta["hygiene"]["warnings"])
    assert "PyTorch version" in meta["collect_env"]
