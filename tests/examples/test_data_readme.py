"""Every figure of examples/data/README.md is recomputed from the committed runs.

Each section of the page (one run, or the four history runs) is checked two ways. Its
findings are written out here from the data, each as the exact phrase the page must
hold (a median, a range, an interval, a count). And every other number in the section,
outside code spans and model names, must be one the section's runs record: a value of
their ``meta.json`` (the spec, each command line, the environment of each start, the
batches), one of their start times, or a count of their rows. A figure typed by hand,
or one that drifts from the data or the code, fails here.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import regimes
from regimes.data.simulate import PUBLISHED_GPT2_MEDIUM

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
PAGE = (DATA / "README.md").read_text()

NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)*(?=x\b|[^\w.]|\.(?!\d)|$)")
"""A number as the page writes it (``1,024``, ``0.81``, ``3x``), not part of a name."""

UNCHECKED = re.compile(r"`[^`]*`|\b(?:Distil)?GPT-2\b|\bOPT-125m\b")
"""Code spans (paths, commands, commits: checked apart) and model names with digits."""


def numbers(text: str) -> list[str]:
    """Return the numbers of ``text`` outside code spans and names, signs dropped."""
    return NUMBER.findall(UNCHECKED.sub(" ", text).replace("..", " .. "))


def sections() -> dict[str, tuple[str, list[str]]]:
    """Each ``## `` section of the page: its body and the runs it describes."""
    runs = sorted(p.name for p in DATA.iterdir() if (p / "meta.json").exists())
    found = {}
    for part in re.split(r"^## ", PAGE, flags=re.M)[1:]:
        head = part.splitlines()[0]
        named = re.findall(r"`([a-z0-9-]+)(?:/|-\*/)`", head)
        found[head] = (
            part,
            [r for r in runs if any(r == n or r.startswith(n + "-") for n in named)],
        )
    return found


SECTIONS = sections()


def _meta(run: str) -> dict[str, Any]:
    return json.loads((DATA / run / "meta.json").read_text())


def _values(obj: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Each ``(key, value)`` of a nested ``meta.json``, lists flattened under their key."""
    if isinstance(obj, dict):
        for name, value in obj.items():
            yield from _values(value, name)
    elif isinstance(obj, list):
        for value in obj:
            yield from _values(value, key)
    else:
        yield key, obj


def _forms(key: str, value: Any) -> set[str]:
    """The ways the page may write one recorded value."""
    if isinstance(value, bool) or value is None:
        return set()
    if key == "cudnn" and isinstance(value, int):
        return {f"{value // 10000}.{value % 10000 // 100}", str(value)}
    if key == "total_memory_bytes":
        return {f"{value / 2**20:,.0f}"}  # MiB
    if key == "memory_bytes":
        return {f"{value / 2**30:.0f}"}  # GiB
    if key == "os_release":
        return {".".join(str(value).split(".")[:2])}  # Linux 6.18
    if key.endswith(("timestamp_utc", "created_utc")):
        start = datetime.fromisoformat(str(value))
        return {start.strftime(f) for f in ("%Y", "%m", "%d", "%H", "%M")}
    if isinstance(value, (int, float)):
        return {f"{value:g}", f"{value:,}", str(value)}
    return set(re.findall(r"\d+(?:\.\d+)*", str(value)))


def recorded(run: str) -> set[str]:
    """Every number a run records, as the page may write it."""
    meta = _meta(run)
    found: set[str] = set()
    for key, value in _values({k: v for k, v in meta.items() if k != "collect_env"}):
        found |= _forms(key, value)
    run_ = regimes.read_run(DATA / run)
    trials = run_.trials
    measured = trials.filter(~pl.col("warmup"))
    counts = [trials.height, measured.height, trials.height - measured.height]
    counts += [0 if run_.errors is None else run_.errors.height, len(meta.get("resumes", []))]
    counts += [0 if run_.steps is None else run_.steps.height]
    counts += measured.group_by("use_cache", "budget").len().get_column("len").unique().to_list()
    return found | {f"{c:,}" for c in counts} | {str(c) for c in counts}


# --- the findings, from the data --------------------------------------------------------


def _load(run: str) -> pl.DataFrame:
    return regimes.load(DATA / run)


def _measured(run: str) -> pl.DataFrame:
    return _load(run).filter(~pl.col("warmup"))


def _ms_per_token(run: str, use_cache: bool) -> str:
    trials = _measured(run).filter(pl.col("use_cache") == use_cache)
    return f"{1e3 * (trials['latency_s'] / trials['budget']).median():.3g} ms"


def _speedups(run: str) -> pl.DataFrame:
    """Per budget: the cache-off median latency over the cache-on one."""
    medians = _measured(run).group_by("budget", "use_cache").agg(pl.col("latency_s").median())
    on = medians.filter(pl.col("use_cache")).select("budget", on="latency_s")
    off = medians.filter(~pl.col("use_cache")).select("budget", off="latency_s")
    return (
        on.join(off, on="budget").with_columns(speedup=pl.col("off") / pl.col("on")).sort("budget")
    )


def _speedup_range(run: str) -> str:
    speedup = _speedups(run)["speedup"]
    return f"{speedup.min():.2f}-{speedup.max():.2f}"


def _counts(run: str) -> str:
    trials = _load(run)
    measured = trials.filter(~pl.col("warmup")).height
    return f"{measured} measured trials and {trials.height - measured} warm-ups"


def _found_nothing(run: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", regimes.RegimesWarning)
        rep = regimes.detect_regimes(_load(run))
    return rep.anomalies.height == 0 and not rep.change_points["significant"].any()


def gpt2() -> list[str]:
    run = "cuda-h200-gpt2"
    trials = _measured(run)
    first = trials.filter(pl.col("session") == 1).sort("order")["process_id"][0]
    kept = trials.filter((pl.col("session") == 1) & (pl.col("process_id") == first)).height
    assert _found_nothing(run)
    return [
        _counts(run),
        f"session 0 and {kept} measured trials of session 1",
        f"{_ms_per_token(run, True)} per generated token with the cache on and "
        f"{_ms_per_token(run, False)} with it off",
        f"cache-off over cache-on median latency ranges {_speedup_range(run)}",
    ]


def opt125m() -> list[str]:
    run = "cuda-h200-opt125m"
    assert _found_nothing(run)
    return [
        _counts(run),
        f"{_ms_per_token(run, True)} per token with the cache on and "
        f"{_ms_per_token(run, False)} with it off",
        f"cache-off over cache-on median latency {_speedup_range(run)}",
    ]


def instrumented() -> list[str]:
    run = "cuda-h200-instrumented"
    trials = _measured(run)
    assert (trials["prefill_s"] + trials["decode_s"] - trials["latency_s"]).abs().max() < 1e-9
    phase = trials.group_by("use_cache").agg(
        prefill=1e3 * pl.col("prefill_s").median(),
        decode=1e3 * (pl.col("decode_s") / (pl.col("budget") - 1)).median(),
    )
    on, off = (phase.filter(pl.col("use_cache") == c).row(0, named=True) for c in (True, False))
    cells = ["use_cache", "budget"]
    mine = trials.group_by(cells).agg(pl.col("latency_s").median().alias("mine"))
    plain = _measured("cuda-h200-gpt2").group_by(cells).agg(pl.col("latency_s").median())
    ratio = mine.join(plain, on=cells).select(pl.col("mine") / pl.col("latency_s"))["mine"]
    steps = regimes.read_run(DATA / run).steps
    assert _found_nothing(run)
    return [
        f"{_counts(run)} with their `steps` ({steps.height:,} rows",
        f"prefill {on['prefill']:.3g} ms (cache on) and {off['prefill']:.3g} ms (cache off), "
        f"decode {on['decode']:.3g} and {off['decode']:.3g} ms per step",
        f"median {ratio.median():.2f} (range {ratio.min():.2f}-{ratio.max():.2f} over the "
        f"{ratio.len()} cells",
    ]


def _faster(row: dict[str, Any]) -> str:
    return (
        f"{1 / row['shift']:.2f}x faster [{1 / row['shift_high']:.2f}, "
        f"{1 / row['shift_low']:.2f}] (q = {row['q_value']:.2g})"
    )


def rerun() -> list[str]:
    run = "cuda-h200-gpt2-rerun"
    result = regimes.compare_runs(DATA / "cuda-h200-gpt2", DATA / run)
    assert result.changes.height == 0 and not result.budgets["differs"].any()
    shift = {row["use_cache"]: row for row in result.shift.iter_rows(named=True)}
    return [
        _counts(run),
        f"the rerun is {_faster(shift[False])} with the cache off and "
        f"{_faster(shift[True])} with it on",
    ]


def inject() -> list[str]:
    run = "cuda-h200-inject"
    meta = _meta(run)
    trials = _load(run)
    on_grid = pl.col("budget").is_in(meta["spec"]["budgets"]) & (pl.col("session") == 0)
    grid, probes = trials.filter(on_grid), trials.filter(~on_grid)
    refined = regimes.analyze(DATA / run).refinement
    assert refined is not None
    rows = {r["kind"]: r for r in refined.boundaries.iter_rows(named=True)}
    spent = int(refined.boundaries["generations"].sum())

    def bracket(kind: str) -> str:
        r = rows[kind]
        return (
            f"{kind} **({r['low']}, {r['high']})** from grid ({r['grid_low']}, "
            f"{r['grid_high']}), {r['probes']} probes, {r['generations']} generations"
        )

    sessions = probes["session"].n_unique()
    return [
        f"grid complete ({grid.filter(~pl.col('warmup')).height} measured trials, "
        f"{grid.filter(pl.col('warmup')).height} warm-ups); {probes.height} probe generations "
        f"(warm-ups included) in {sessions} fresh sessions",
        bracket("onset"),
        bracket("recovery"),
        f"{spent} generations, {spent / refined.dense_generations:.1%} of the "
        f"{refined.dense_generations} a dense 1-token grid",
    ]


def fleet() -> list[str]:
    run = "cuda-h200-fleet"
    trials = _measured(run)
    cells = trials.group_by("budget", "session").agg(pl.col("latency_s").median())
    ends = [cells["budget"].min(), cells["budget"].max()]
    spans = [cells.filter(pl.col("budget") == b)["latency_s"] for b in ends]
    medians = trials.group_by("budget").agg(pl.col("latency_s").median()).sort("budget")
    slope = (medians["latency_s"][-1] - medians["latency_s"][0]) / (ends[1] - ends[0])
    assert _found_nothing(run) and trials["host"].unique().to_list() == ["vm"]
    return [
        _counts(run),
        f"{spans[0].min():.2f}-{spans[0].max():.2f} s at budget {ends[0]} up to "
        f"{spans[1].min():.2f}-{spans[1].max():.2f} s at {ends[1]}",
        f"{1e3 * slope:.2g} ms per token",
    ]


def _first_visit(name: str) -> dict[str, Any] | None:
    result = regimes.history_effect(_load(f"cuda-h200-history-{name}"))
    return result.effects.row(0, named=True) if result.effects.height else None


def _cost(row: dict[str, Any]) -> str:
    low, high = (f"{1e3 * row[k]:.2g}" for k in ("ci_low", "ci_high"))
    return f"{1e3 * row['first_visit_s']:.2g} ms [{low}, {high}], q = {row['q_value']:.2g}"


def history() -> list[str]:
    claims = []
    for name in ("nowarmup", "percase", "nocudnn", "float32"):
        trials = _load(f"cuda-h200-history-{name}")
        measured = trials.filter(~pl.col("warmup")).height
        planned = _meta(f"cuda-h200-history-{name}")["spec"]
        claims.append(f"| {measured} of {len(planned['budgets']) * planned['trials'] * 2} |")
    nowarmup = _first_visit("nowarmup")
    assert nowarmup is not None and _first_visit("percase") is None
    claims.append(
        f"a first visit costs **{1e3 * nowarmup['first_visit_s']:.3g} ms per new KV length "
        f"[{1e3 * nowarmup['ci_low']:.3g}, {1e3 * nowarmup['ci_high']:.3g}]**, "
        f"q = {nowarmup['q_value']:.2g}, {100 * nowarmup['latency_share']:.0f} % of the measured "
        f"latency ({nowarmup['n_first_visit_trials']} of {nowarmup['n_trials']} trials"
    )
    for name in ("nocudnn", "float32"):
        row = _first_visit(name)
        assert row is not None and not row["significant"]
        claims.append(f"`{name}`: {_cost(row)}")
    claims.append(f"{_load('cuda-h200-history-percase').filter(pl.col('warmup')).height} warm-ups")
    return claims


def distilgpt2() -> list[str]:
    run = "cpu-distilgpt2"
    speedups = _speedups(run)
    last = speedups.row(-1, named=True)
    top = speedups.sort("speedup").row(-1, named=True)
    first = speedups.row(0, named=True)
    assert _found_nothing(run)
    return [
        _counts(run),
        f"{_ms_per_token(run, True)} per token with the cache on, {_ms_per_token(run, False)} "
        "with it off",
        f"at budget {last['budget']}, {last['on']:.2g} s against {last['off']:.3g} s",
        f"{first['speedup']:.2g}x at budget {first['budget']} rising to {top['speedup']:.2g}x "
        f"at {top['budget']}",
    ]


def medium_window() -> list[str]:
    run = "cuda-h200-gpt2-medium-window"
    trials = _measured(run)
    medians = trials.group_by("budget").agg(pl.col("latency_s").median(), n=pl.len())
    slowest = medians.sort("latency_s").row(-1, named=True)
    cell = trials.filter(pl.col("budget") == slowest["budget"]).sort("latency_s")["latency_s"]
    published = PUBLISHED_GPT2_MEDIUM
    inside = [v for b, v in published.items() if 512 <= b <= 624]
    flank = (published[496] + published[640]) / 2
    assert _found_nothing(run)
    return [
        _counts(run),
        f"{_ms_per_token(run, True)} per token ({trials['latency_s'].min():.2g}-"
        f"{trials['latency_s'].max():.3g} s per generation)",
        f"the slowest cell, budget {slowest['budget']}, holds one {cell[-1]:.3g} s trial "
        f"among {cell.len() - 1} of {cell[0]:.2g}-{cell[-2]:.2g} s",
        f"{min(inside) / flank:.0f}-{max(inside) / flank:.0f}x the mean of their neighbours",
    ]


def served() -> list[str]:
    run = "cpu-transformers-serve"
    steps = regimes.read_run(DATA / run).steps.filter(~pl.col("warmup"))
    first = 1e3 * steps.filter(pl.col("step") == 0)["step_s"].median()
    between = 1e3 * steps.filter(pl.col("step") > 0)["step_s"]
    assert _found_nothing(run)
    return [
        _counts(run),
        f"`steps` ({regimes.read_run(DATA / run).steps.height:,} rows",
        f"a first token after {first:.2g} ms, then {between.median():.2g} ms per token (median "
        f"inter-token time; 90th percentile {between.quantile(0.9):.2g} ms, 99th "
        f"{between.quantile(0.99):.2g} ms)",
    ]


def slow_attention() -> list[str]:
    run = "cpu-slow-attention"
    rep = regimes.detect_regimes(_load(run))
    (anomaly,) = rep.anomalies.iter_rows(named=True)
    ops = regimes.load(DATA / run, table="ops")
    res = regimes.attribute_operators(ops, rep, unit="scope")
    (top,) = res.carriers().iter_rows(named=True)
    rest = res.operators.filter(~pl.col("flagged"))["ratio"].max()
    profiled = ops.group_by("budget", "session", "trial").agg(pl.col("latency_s").first())
    timed = _measured(run).group_by("budget").agg(pl.col("latency_s").median().alias("timed"))
    overhead = (
        profiled.group_by("budget").agg(pl.col("latency_s").median()).join(timed, on="budget")
    )
    ratio = (overhead["latency_s"] / overhead["timed"]).sort()
    return [
        _counts(run),
        f"{ops.height:,} rows, {profiled.height} profiled generations",
        f"budgets {anomaly['start']}..{anomaly['end']}, {anomaly['ratio']:.3g}x "
        f"[{anomaly['ratio_low']:.3g}, {anomaly['ratio_high']:.3g}] its trend",
        _carrier(top),
        f"every other operator within {rest:.3g}x",
        f"{ratio.median():.3g}x the timed median (from {ratio.min():.3g}x to {ratio.max():.3g}x)",
    ]


def profile_firstvisit() -> list[str]:
    run = "cuda-h200-profile-firstvisit"
    ops = regimes.load(DATA / run, table="ops")
    host = ops.filter(pl.col("device_type") == "cpu")
    cudnn = pl.col("operator") == "aten::_cudnn_attention_forward"
    kernels = ops.filter(pl.col("operator").str.starts_with("cudnn_generated_fort_native_sdpa"))

    def per(frame: pl.DataFrame, column: str, budget: int, trial: int) -> list[float]:
        kept = frame.filter(pl.col("budget") == budget, pl.col("trial") == trial)
        return kept.group_by("session").agg(pl.col(column).sum()).sort("session")[column].to_list()

    def rounds(frame: pl.DataFrame, column: str, budget: int) -> list[tuple[float, float]]:
        return list(zip(per(frame, column, budget, 0), per(frame, column, budget, 1), strict=True))

    total = [a - b for a, b in rounds(host, "self_host_s", 64)]
    mine = [a - b for a, b in rounds(host.filter(cudnn), "self_host_s", 64)]
    latency = ops.group_by("session", "trial", "budget").agg(pl.col("latency_s").first())
    late = latency.filter(pl.col("budget") == 64).sort("trial", "session")["latency_s"].to_list()
    device = [a / b for a, b in rounds(kernels, "self_device_s", 64)]
    cold = [t for pair in rounds(host.filter(cudnn), "self_host_s", 32) for t in pair]
    row = regimes.history_effect(_load(run)).effects.row(0, named=True)
    return [
        _counts(run),
        f"{ops.height:,} rows, {latency.height} profiled generations",
        f"{late[0]:.3g} s and {late[1]:.3g} s in round 0, "
        f"{late[2]:.3g} s and {late[3]:.3g} s in round 1",
        f"{total[0]:.3g} s and {total[1]:.3g} s more host self time",
        f"{mine[0]:.3g} s and {mine[1]:.3g} s ({100 * mine[0] / total[0]:.0f} % and "
        f"{100 * mine[1] / total[1]:.0f} %)",
        f"{min(device):.3f}x to {max(device):.3f}x",
        f"{1e3 * min(cold):.3g} to {1e3 * max(cold):.3g} ms",
        f"**{1e3 * row['first_visit_s']:.3g} ms per new KV length [{1e3 * row['ci_low']:.3g}, "
        f"{1e3 * row['ci_high']:.3g}]**, q = {row['q_value']:.2g}",
    ]


def _carrier(row: dict[str, Any]) -> str:
    return (
        f"`{row['operator']}`: {100 * row['share']:.0f} % [{100 * row['share_low']:.0f}, "
        f"{100 * row['share_high']:.0f}] of the excess, {row['ratio']:.3g}x "
        f"[{row['ratio_low']:.3g}, {row['ratio_high']:.3g}] its trend"
    )


def slow_attention_h200() -> list[str]:
    run = "cuda-h200-slow-attention"
    rep = regimes.detect_regimes(_load(run))
    (anomaly,) = rep.anomalies.iter_rows(named=True)
    ops = regimes.load(DATA / run, table="ops")
    chosen = _meta(run)["profile_auto"]["budgets"]
    kernels = ops.filter(pl.col("device_type") == "cuda")
    claims = [
        _counts(run),
        f"{ops.height:,} rows, {ops.select('session', 'trial', 'budget').unique().height} "
        "profiled generations",
        f"budgets {', '.join(map(str, chosen))}",
        f"budgets {anomaly['start']}..{anomaly['end']}, {anomaly['ratio']:.3g}x "
        f"[{anomaly['ratio_low']:.3g}, {anomaly['ratio_high']:.3g}] its trend",
        f"{kernels.height:,} kernel rows, "
        f"{kernels.filter(pl.col('scope').str.starts_with('aten::')).height:,} of them",
    ]
    for time in ("device", "host"):
        res = regimes.attribute_operators(ops, rep, time=time, unit="scope")
        (top,) = res.carriers().iter_rows(named=True)
        rest = res.operators.filter(~pl.col("flagged"))["ratio"].max()
        claims += [_carrier(top), f"every other scope within {rest:.3g}x"]
    kernels = regimes.attribute_operators(ops, rep, time="device").carriers()
    return [*claims, *map(_carrier, kernels.iter_rows(named=True))]


CLAIMS: dict[str, Callable[[], list[str]]] = {
    "cuda-h200-gpt2": gpt2,
    "cuda-h200-opt125m": opt125m,
    "cuda-h200-instrumented": instrumented,
    "cuda-h200-gpt2-rerun": rerun,
    "cuda-h200-inject": inject,
    "cuda-h200-fleet": fleet,
    "cuda-h200-history": history,
    "cpu-distilgpt2": distilgpt2,
    "cuda-h200-gpt2-medium-window": medium_window,
    "cpu-transformers-serve": served,
    "cpu-slow-attention": slow_attention,
    "cuda-h200-profile-firstvisit": profile_firstvisit,
    "cuda-h200-slow-attention": slow_attention_h200,
}
"""Per section (its first run's name, or the history runs' common prefix), its findings."""


def _section(key: str) -> tuple[str, str, list[str]]:
    for head, (body, runs) in SECTIONS.items():
        if head.startswith(f"`{key}/`") or head.startswith(f"`{key}-*/`"):
            return head, body, runs
    raise AssertionError(f"the page has no section for {key}")


@pytest.mark.parametrize("key", list(CLAIMS))
def test_each_finding_is_what_the_data_gives(key):
    _, body, _ = _section(key)
    flat = " ".join(body.split())
    missing = [claim for claim in CLAIMS[key]() if claim not in flat]
    assert not missing, f"the {key} section should say: {missing}"


@pytest.mark.parametrize("head", list(SECTIONS))
def test_every_other_number_is_recorded_by_the_runs(head):
    body, runs = SECTIONS[head]
    if not runs:  # a section on several runs names them in its text
        runs = [r for r in sorted(p.name for p in DATA.iterdir()) if f"`{r}`" in body]
    assert runs, f"the section {head!r} names no run"
    key = next((k for k in CLAIMS if k in runs), None) or next(
        (k for k in CLAIMS if all(r.startswith(k + "-") for r in runs)), None
    )
    allowed: set[str] = set()
    for run in runs:
        allowed |= recorded(run)
    claimed = " ".join(CLAIMS[key]()) if key else ""
    allowed |= set(numbers(claimed.replace("`", "")))
    unbacked = [n for n in numbers(body) if n not in allowed and n.replace(",", "") not in allowed]
    assert not unbacked, f"{head}: numbers no run records: {unbacked}"


def _runs() -> list[str]:
    return sorted(p.name for p in DATA.iterdir() if (p / "meta.json").exists())


def test_every_command_on_the_page_is_a_recorded_command():
    """Each ``regimes collect`` line is one that a run's ``meta.json`` records (its words in
    order, ``NAME`` standing for a run's name), and each variable set before it is one
    that an environment of that run records."""
    pattern = r"`((?:[A-Z_]+=\S+ )*(?:python3 -m )?regimes collect [^`]*)`"
    commands = re.findall(pattern, PAGE)
    assert len(commands) >= 8
    for command in commands:
        variables = dict(w.split("=", 1) for w in command.split() if re.match(r"[A-Z_]+=", w))
        words = command.split()[command.split().index("regimes") + 1 :]
        matching = [
            meta
            for meta in map(_meta, _runs())
            for argv in [meta["command"], *(r["command"] for r in meta.get("resumes", []))]
            if _subsequence(words, argv[1:])
        ]
        assert matching, command
        environments = [
            e["env"]
            for meta in matching
            for e in [meta["environment"], *(r["environment"] for r in meta.get("resumes", []))]
        ]
        for name, value in variables.items():
            assert any(env.get(name) == value for env in environments), (command, name)


def _subsequence(words: list[str], argv: list[str]) -> bool:
    """Whether ``words`` occur in ``argv`` in order (``NAME`` matching a run's name)."""
    remaining = iter(argv)

    def same(word: str, arg: str) -> bool:
        return re.fullmatch(re.escape(word).replace("NAME", "[a-z0-9]+"), arg) is not None

    return all(any(same(word, arg) for arg in remaining) for word in words)


def test_every_path_on_the_page_exists():
    paths = re.findall(r"`((?:examples|bench|tests|docs)/[^`*\s]+)`", PAGE)
    root = DATA.parents[1]
    assert paths and all((root / p).exists() for p in paths), [
        p for p in paths if not (root / p).exists()
    ]


def test_the_number_checks_see_names_codes_and_ranges():
    text = "GPT-2 (124M) ran `--max-seconds 420` at 0.81-1.55, 16..512, 3x, 1,024 and 6.18."
    assert numbers(text) == ["0.81", "1.55", "16", "512", "3", "1,024", "6.18"]
