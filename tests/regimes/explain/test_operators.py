"""attribute_operators: which operators carry an anomaly's excess (synthetic profiles).

Every table here is synthetic (model ``synthetic-ops``): profiled generations whose
operators take known self times, one of them slowed by a known factor inside 28..36.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import regimes
from regimes._stats.interval_tests import IntervalTests
from regimes.explain import operators
from regimes.explain.operators import OTHER

REPO = Path(__file__).resolve().parents[3]
BUDGETS = list(range(8, 60, 4))
OPERATORS = {"aten::attention": 0.2e-3, "aten::mm": 0.3e-3, "aten::add": 0.05e-3}
TINY = {"aten::view": 1e-7}


def _ops(seed: int = 0, factor: float = 4.0, run_id: str = "synthetic-ops") -> pl.DataFrame:
    """Two sessions x three profiled generations per budget; attention slowed in 28..36."""
    rng = np.random.default_rng(seed)
    rows = []
    for budget in BUDGETS:
        for session in (0, 1):
            offset = rng.lognormal(0, 0.03)
            for trial in range(3):
                for name, per_token in {**OPERATORS, **TINY}.items():
                    slow = factor if name == "aten::attention" and 28 <= budget <= 36 else 1.0
                    time = per_token * budget * slow * offset * rng.lognormal(0, 0.05)
                    rows.append(
                        {
                            "run_id": run_id,
                            "model": "synthetic-ops",
                            "budget": budget,
                            "session": session,
                            "trial": trial,
                            "scope": name,
                            "operator": name,
                            "self_host_s": time,
                            "self_device_s": None,
                            "calls": budget,
                        }
                    )
    return pl.DataFrame(rows)


def _report(start: int = 28, end: int = 36) -> SimpleNamespace:
    anomalies = pl.DataFrame({"model": ["synthetic-ops"], "start": [start], "end": [end]})
    return SimpleNamespace(anomalies=anomalies, group_columns=["model"], x="budget", y="latency_s")


def test_the_slowed_operator_carries_the_excess_and_no_other_is_flagged():
    res = regimes.attribute_operators(_ops(), _report(), n_boot=400)
    rows = {r["operator"]: r for r in res.operators.iter_rows(named=True)}
    attention = rows["aten::attention"]
    assert attention["flagged"]
    assert attention["ratio_low"] < 4.0 < attention["ratio_high"]
    assert attention["share_low"] > 0.9
    assert not any(r["flagged"] for name, r in rows.items() if name != "aten::attention")
    assert "aten::view" not in rows and OTHER in rows  # pooled below min_share
    assert res.carriers().get_column("operator").to_list() == ["aten::attention"]
    text = res.summary()
    assert "aten::attention: 9" in text and "every other operator within" in text


def test_false_flags_of_unslowed_operators_stay_at_or_under_alpha():
    flags = [
        regimes.attribute_operators(_ops(seed, factor=1.0), _report(), n_boot=200)
        .operators.get_column("flagged")
        .any()
        for seed in range(20)
    ]
    assert sum(flags) <= 3  # alpha 0.05 of 20 designs is 1; 3 is its binomial 0.98 bound


def test_the_result_follows_the_protocol():
    res = regimes.attribute_operators(_ops(), _report(), n_boot=200)
    assert res.status == "tested"
    assert "OperatorResult" in repr(res)
    payload = json.loads(res.to_json())
    assert payload["params"]["unit"] == "operator"
    assert set(res.profiles.columns) >= {"operator", "budget", "time_s", "share", "n"}
    again = regimes.attribute_operators(_ops(), _report(), n_boot=200)
    assert again.operators.equals(res.operators)


def test_an_anomaly_without_flank_support_is_untested_not_silent():
    res = regimes.attribute_operators(_ops(), _report(8, 52), n_boot=200)
    assert res.operators.height == 0
    assert "trend" in res.untested.get_column("reason")[0]


@pytest.mark.parametrize(
    ("ops", "report", "message"),
    [
        (_ops().drop("operator"), _report(), "lacks column"),
        (_ops().head(0), _report(), "empty"),
        (_ops().filter(~pl.col("budget").is_between(28, 36)), _report(), "no profiled budget"),
    ],
)
def test_bad_input_gets_one_clear_line(ops, report, message):
    with pytest.raises(regimes.RegimesInputError, match=message) as info:
        regimes.attribute_operators(ops, report, n_boot=200)
    assert "\n" not in str(info.value)


def test_device_times_asked_of_a_host_only_profile_are_refused():
    ops = _ops().with_columns(backend=pl.lit("cpu"))
    with pytest.raises(regimes.RegimesInputError, match="no device times.*time='host'"):
        regimes.attribute_operators(ops, _report(), time="device", n_boot=200)


def test_profiles_of_another_run_are_refused():
    report = _report()
    report.source = pl.DataFrame({"run_id": ["synthetic-timed"], "budget": [8]})
    with pytest.raises(regimes.RegimesInputError, match="another|same run"):
        regimes.attribute_operators(_ops(), report, n_boot=200)


def test_the_committed_cpu_run_names_the_attention_as_its_carrier():
    run = REPO / "examples" / "data" / "cpu-slow-attention"
    rep = regimes.detect_regimes(regimes.load(run))
    assert rep.anomalies.select("start", "end").rows() == [(28, 36)]
    res = regimes.attribute_operators(regimes.load(run, table="ops"), rep, unit="scope")
    assert res.carriers().get_column("operator").to_list() == ["aten::scaled_dot_product_attention"]


def test_the_chart_draws_each_operators_share_and_analyze_names_the_carriers():
    res = regimes.attribute_operators(_ops(), _report(), n_boot=200)
    spec = res.chart().to_dict()
    assert "aten::attention" in spec["title"]["subtitle"]
    run = REPO / "examples" / "data" / "cpu-slow-attention"
    analysis = regimes.analyze(run, n_boot=200)
    (item,) = [e for e in analysis.explanations if e.key == "operators"]
    assert item.result.carriers().height >= 1
    assert any("scaled_dot_product" in line for line in analysis.findings())


def test_the_operator_table_names_its_case_once_not_in_every_row():
    from regimes.viz._tables import result_tables

    report = _report()
    report.anomalies = report.anomalies.with_columns(
        pl.lit("cpu").alias("backend"), pl.lit(True).alias("use_cache")
    )
    report.group_columns = ["backend", "model", "use_cache"]
    ops = _ops().with_columns(pl.lit("cpu").alias("backend"), pl.lit(True).alias("use_cache"))
    res = regimes.attribute_operators(ops, report, n_boot=200)
    assert res.operators.height > 1
    view = res._repr_html_()
    lead = view[view.index("<h5>operators</h5>") : view.index("</table>")]
    page = result_tables(res)
    table = page[page.index("<h4>operators</h4>") : page.index("</table>")]
    for html in (lead, table):
        assert "<caption>cpu · synthetic-ops · cache on</caption>" in html
        for column in ("backend", "model", "use_cache"):
            assert f">{column}</th>" not in html
        assert ">operator</th>" in html and ">share</th>" in html


def test_a_ratio_interval_beyond_floating_point_is_infinite_not_an_error(monkeypatch):
    # a t interval on a fraction of a degree of freedom: its upper end passes 1e308 (seen
    # on few profiled budgets of one generation's noise, as an OverflowError from math.exp)
    def wide(*args, **kwargs):
        one = np.ones(1)
        return IntervalTests(estimate=one, se=500.0 * one, df=0.2 * one, p_value=0.5 * one)

    monkeypatch.setattr(operators, "fixed_interval_test", wide)
    res = regimes.attribute_operators(_ops(), _report(), n_boot=200)
    high = res.operators.get_column("ratio_high").to_numpy()
    assert np.isinf(high).all() and (res.operators.get_column("ratio_low") >= 0).all()
