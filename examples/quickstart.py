"""Quickstart: load a run, find its regimes, chart them.

    python examples/quickstart.py            # writes quickstart-*.html next to the cwd

Two data sets: the committed real H200 run (GPT-2, cache on and off), and a synthetic
sweep built from the published gpt2-medium MPS means (DESIGN.md), where latency jumps
about 10x between budgets 512 and 624 and recovers at 640.
"""

import regimes

# 1. A real run: regimes.load reads a run directory (or one parquet/CSV trial table).
df = regimes.load("examples/data/cuda-h200-gpt2")
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

# 3. Charts are Altair objects: display them in a notebook, or save offline.
regimes.plot.save(regimes.plot.latency_chart(report, df), "quickstart-cuda.html")
regimes.plot.save(
    regimes.plot.latency_chart(spike, published, log_y=True), "quickstart-published.html"
)
print("wrote quickstart-cuda.html and quickstart-published.html")
