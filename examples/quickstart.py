"""Quickstart: load a run, find its regimes, chart them, explain and compare.

    python examples/quickstart.py            # writes quickstart-*.html in the cwd

Two data sets: the committed real H200 run (GPT-2, cache on and off), and synthetic
trials around the published gpt2-medium MPS means (arXiv 2605.08913, tabled in
docs/data.md), where latency jumps about 10x between budgets 512 and 624 and recovers
at 640. examples/quickstart.ipynb walks through the same steps with the charts inline.
"""

from pathlib import Path

import regimes

DATA = Path(__file__).resolve().parent / "data"

# 1. A real run: regimes.load reads a run directory (or one parquet/CSV trial table).
df = regimes.load(DATA / "cuda-h200-gpt2")
report = regimes.detect_regimes(df)  # groups by backend, model, dtype, cache, ...
print(report.summary())
print(regimes.cache_speedup(df).summary())

# 2. Synthetic data labelled as such: the published MPS spike, 5 trials per budget at 10% CV.
published = regimes.simulate.published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
spike = regimes.detect_regimes(published)
print(spike.summary())
print(
    spike.anomalies.select(
        "start", "end", "ratio", "ratio_low", "ratio_high", "q_value", "recovered"
    )
)

# 3. Compare: the same grid measured on an H200 is smooth where MPS spikes.
window = regimes.load(DATA / "cuda-h200-gpt2-medium-window")
runs = regimes.compare_runs(window, published, by=["model", "use_cache", "prompt_tokens"])
print(runs.changes.select("start", "end", "status", "ratio_of_ratios", "q_value"))

# 4. Every result draws its own chart (an Altair chart): display it in a notebook, or
# save it offline; the report draws everything analysed of a run (regimes.analyze,
# each analysis computed once) into one HTML file.
regimes.plot.save(report.chart(), "quickstart-cuda.html")
regimes.plot.save(spike.chart(), "quickstart-published.html")
regimes.plot.save(runs.chart(), "quickstart-compare.html")
page = regimes.report.build_report(
    regimes.analyze(published), title="published MPS case (synthetic)"
)
page.write("quickstart-report.html")
print("\n".join(page.findings()))
print(
    "wrote quickstart-cuda.html, quickstart-published.html, quickstart-compare.html "
    "and quickstart-report.html"
)
