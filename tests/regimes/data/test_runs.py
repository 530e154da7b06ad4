"""Several runs as one trial table: lazily read, tagged with run and environment."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.data.io import RunWriter
from regimes.data.runs.scan import ENV_COLUMNS, run_environment, scan_runs

ROOT = Path(__file__).resolve().parents[3]
GPT2 = ROOT / "examples" / "data" / "cuda-h200-gpt2"
OPT = ROOT / "examples" / "data" / "cuda-h200-opt125m"


def _row(budget: int, trial: int, order: int, **kw: object) -> dict[str, object]:
    row: dict[str, object] = dict(
        session=0,
        backend="cpu",
        model="tiny-gpt2",
        use_cache=True,
        budget=budget,
        trial=trial,
        order=order,
        warmup=False,
        latency_s=0.01 * budget,
    )
    row.update(kw)
    return row


def _environment(torch: str, host: str) -> dict[str, object]:
    return {
        "os": "Linux",
        "os_release": "6.1",
        "python": "3.11.9",
        "torch": torch,
        "transformers": "5.0.0",
        "hostname": host,
        "backends": {"cpu": {"available": True, "device": "x86-64 (synthetic)"}},
    }


def test_two_committed_runs_are_tagged_with_their_run_and_environment():
    both = regimes.load([GPT2, OPT])
    one, other = regimes.load(GPT2), regimes.load(OPT)
    assert both.height == one.height + other.height
    assert both.group_by("run_id", maintain_order=True).len().rows() == [
        (one["run_id"][0], one.height),
        (other["run_id"][0], other.height),
    ]
    meta = json.loads((GPT2 / "meta.json").read_text())["environment"]
    first = both.filter(pl.col("run_id") == one["run_id"][0])
    assert first.select(ENV_COLUMNS).unique().rows() == [
        (
            meta["torch"],
            meta["transformers"],
            f"{meta['os']} {meta['os_release']}",
            meta["python"],
            meta["hostname"],
        )
    ]
    # the trials themselves are the single-run load's, in its order; the committed runs
    # predate the trials' own host column, which the environment fills
    assert first.select(one.columns).drop("host").equals(one.drop("host"))
    assert one["host"].is_null().all()


def test_a_single_path_loads_as_before():
    assert regimes.load(GPT2).columns == list(regimes.TRIAL_SCHEMA)
    added = [c for c in ENV_COLUMNS if c not in regimes.TRIAL_SCHEMA]
    assert regimes.load([GPT2]).columns == [*regimes.TRIAL_SCHEMA, *added]


def test_a_glob_pattern_loads_every_matching_run_in_sorted_order():
    runs = regimes.load(str(ROOT / "examples" / "data" / "cuda-h200-gpt2*"))
    ids = runs.get_column("run_id").unique(maintain_order=True).to_list()
    expected = [
        regimes.load(p)["run_id"][0]
        for p in sorted((ROOT / "examples" / "data").glob("cuda-h200-gpt2*"))
    ]
    assert ids == expected and len(ids) >= 2


def test_scan_is_lazy_and_a_filter_reads_only_what_it_keeps():
    frame = scan_runs([GPT2, OPT])
    assert isinstance(frame, pl.LazyFrame)
    opt = frame.filter(pl.col("model") == "opt-125m").select("budget", "latency_s").collect()
    assert opt.height == regimes.load(OPT).height


def test_public_scan_reads_parts_lazily_with_parquet_scans():
    frame = regimes.scan([GPT2, OPT], verify=False)
    plan = frame.filter(pl.col("model") == "opt-125m").select("budget").explain()
    assert "parquet" in plan.lower()
    assert (
        frame.collect()
        .sort(["run_id", "order"])
        .equals(regimes.load([GPT2, OPT]).sort(["run_id", "order"]))
    )


def test_scan_refuses_a_damaged_part_by_name_or_reads_the_original_rows(tmp_path):
    writer = RunWriter(tmp_path / "run", {"environment": _environment("2.5.0", "box-a")})
    writer.write_trials([_row(b, t, 2 * b + t) for b in (8, 16, 24) for t in (0, 1)])
    part = next((tmp_path / "run" / "trials").glob("*.parquet"))
    original = part.read_bytes()
    expected = regimes.load([tmp_path / "run"])
    refused = 0
    for offset in range(0, len(original), max(1, len(original) // 60)):
        damaged = bytearray(original)
        damaged[offset] ^= 0xFF
        part.write_bytes(bytes(damaged))
        try:
            frame = regimes.scan([tmp_path / "run"]).collect()
        except RegimesInputError as exc:
            assert part.name in str(exc)
            refused += 1
            continue
        assert frame.equals(expected), offset
    assert refused > 0
    part.write_bytes(original)
    assert regimes.scan([tmp_path / "run"], verify=False).collect().equals(expected)


def test_run_id_and_device_come_from_meta_when_trials_lack_them(tmp_path):
    writer = RunWriter(tmp_path / "run", {"environment": _environment("2.5.0", "box-a")})
    writer.write_trials([_row(8, 0, 1), _row(8, 1, 0)])
    frame = regimes.load([tmp_path / "run"])
    assert frame["run_id"].to_list() == [writer.run_id] * 2
    assert frame["device"].to_list() == ["x86-64 (synthetic)"] * 2
    assert frame["host"].to_list() == ["box-a"] * 2
    assert frame["order"].to_list() == [0, 1]


def test_a_trial_keeps_its_own_host_and_device(tmp_path):
    writer = RunWriter(tmp_path / "run", {"environment": _environment("2.5.0", "box-a")})
    writer.write_trials([_row(8, 0, 0, host="box-b", device="gpu-7")])
    frame = regimes.load([tmp_path / "run"])
    assert frame.select("host", "device").row(0) == ("box-b", "gpu-7")


def test_a_resume_under_another_environment_lists_both_values():
    meta = {
        "environment": _environment("2.5.0", "box-a"),
        "resumes": [{"environment": _environment("2.6.0", "box-a")}],
    }
    env = run_environment(meta)
    assert env["torch_version"] == "2.5.0 | 2.6.0"
    assert env["host"] == "box-a"
    assert run_environment({})["torch_version"] is None


def test_files_mix_with_directories(tmp_path):
    writer = RunWriter(tmp_path / "run", {})
    writer.write_trials([_row(8, 0, 0), _row(16, 0, 1)])
    single = regimes.save(
        regimes.load(tmp_path / "run").with_columns(pl.lit("other").alias("run_id")),
        tmp_path / "other.parquet",
    )
    csv = tmp_path / "third.csv"
    regimes.load(tmp_path / "run").drop("run_id").write_csv(csv)
    frame = regimes.load([tmp_path / "run", single, csv])
    assert frame.group_by("run_id", maintain_order=True).len().rows() == [
        (writer.run_id, 2),
        ("other", 2),
        ("third", 2),
    ]


def test_exact_duplicate_rows_are_read_once(tmp_path):
    writer = RunWriter(tmp_path / "run", {})
    writer.write_trials([_row(8, 0, 0)])
    writer.write_trials([_row(8, 0, 0)])
    assert regimes.load([tmp_path / "run"]).height == 1


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (lambda tmp: [tmp / "missing"], "does not exist"),
        (lambda tmp: [str(tmp / "nothing-*")], "no run matches"),
        (lambda tmp: [], "no run given"),
        (lambda tmp: [GPT2, GPT2], "same run"),
        (lambda tmp: [tmp], "not a run directory"),
    ],
)
def test_bad_runs_raise_one_clear_error(tmp_path, paths, message):
    with pytest.raises(RegimesInputError, match=message):
        regimes.load(paths(tmp_path))


def test_an_unknown_column_in_a_part_is_named(tmp_path):
    (tmp_path / "run" / "trials").mkdir(parents=True)
    pl.DataFrame({"budget": [8], "latency_s": [0.1], "colour": ["red"]}).write_parquet(
        tmp_path / "run" / "trials" / "part-x.parquet"
    )
    with pytest.raises(RegimesInputError, match="colour"):
        regimes.load([tmp_path / "run"])
