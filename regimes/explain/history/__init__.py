"""Does a process's history explain its latency?  The cost of a KV length's first visit.

Some attention backends build an execution plan per tensor shape the first time a
process meets it, then cache it: cuDNN's scaled-dot-product attention on CUDA (about
33 ms per new KV length on an H200, against 4 ms for a decode step), and MPSGraph, which
compiles per shape on Apple GPUs. Decode latency then depends on what the process ran
before, not on the budget alone, and a sweep without warm-ups (or with its budgets in
another order) shows budget "regimes" that are first-visit costs.

History. Every trial, warm-ups included, is replayed in its process in ``order``. A
generation with a prompt of ``p`` tokens and a budget of ``b`` makes ``b`` forward
passes; pass ``k`` (``k = 0`` is the prefill) attends over ``p + k`` positions, so the
trial visits the KV lengths ``p .. p + b - 1``. Length ``p + b`` is never visited: the
token chosen after the last pass is returned, not fed back. A trial's ``n_new_lengths``
is how many of its lengths no earlier trial of the same process and shape family
visited. The process is identified by ``run_id``, ``session`` and ``process_id``
(those present); the shape family by the columns that change the attention's shape or
kernel (:data:`SHAPE_COLUMNS`, those present: model, dtype, cache on or off,
attention implementation and backends, device). The prefill's query spans the whole
prompt while a decode step's spans one token, so when one process runs several prompt
lengths a prefill can be counted as a revisit of a length a decode step met first: at
most one length per trial, and none with one prompt length per process.

Model. Per curve (one group of ``by`` columns), on the measured trials only::

    y_i = c_{x(i)} + pi_{P(i)} + g F_i + theta n_i + e_i

``c_x`` is a free level for every ``x`` value (the budget's own latency, whatever its
shape: a smooth trend, a spike or a plateau), ``pi_P`` a level for the process,
``F_i`` marks the first trial of its shape family in its process (process start-up:
lazy library loading, handle creation) and ``n_i`` is ``n_new_lengths``. So ``theta``,
``first_visit_s``, the cost in seconds of one newly visited length, is identified only
by trials of the same budget (and process) whose histories differ: no budget regime,
however sharp, can pass for a history effect, and where ``n`` is a function of the
budget (every trial alone in a fresh process, where ``n = b``; the same fixed order in
every process) the curve is reported untested. The fit is ordinary least squares
(statsmodels), on seconds because the cost adds to the latency.

Errors. The trials that visit new lengths are few (in a shuffled sweep without warm-ups,
the first trial of a process and the few that exceed every budget run before it) and
carry most of the information about ``theta``: they have high leverage and, since noise
scales with latency, the largest variance. The standard error is HC3 (MacKinnon and
White 1985), which corrects each residual for its leverage, and the t reference
distribution takes the Bell-McCaffrey degrees of freedom (Bell and McCaffrey 2002;
Imbens and Kolesar 2016): about the number of influential trials, not ``N - k``
(derived for HC2, whose error HC3's exceeds, so the test errs on the safe side).
On synthetic sweeps that mimic the H200 (4 ms a step, 33 ms a first visit, 3 % noise,
4 fresh processes of 3 shuffled rounds over 15 budgets), 95 % intervals cover the true
cost in 97 % of 400 draws (in 90 % with HC3 on ``N - k`` df and a smooth trend), and
with no cost the test rejects in 1 %; with 10 % noise, or 2 processes of 2 rounds, the
figures hold (97 % and 1-1.5 %). p-values are two-sided; q-values are
Benjamini-Hochberg across the tested curves of the call.

A curve is not tested (``untested``, with the reason) when no measured trial visits a
new length (warm-ups visited them all: its latencies carry no first-visit cost), when
fewer than :data:`MIN_FIRST_VISIT_TRIALS` do, or when ``n`` is a linear function of the
budget, process and first-trial terms: the two costs cannot be told apart.

References
----------
.. [1] J. G. MacKinnon and H. White, "Some heteroskedasticity-consistent covariance
   matrix estimators with improved finite sample properties", Journal of Econometrics
   29(3), 305-325, 1985.
.. [2] R. M. Bell and D. F. McCaffrey, "Bias reduction in standard errors for linear
   regression with multi-stage samples", Survey Methodology 28(2), 169-181, 2002.
.. [3] G. W. Imbens and M. Kolesar, "Robust standard errors in small samples: some
   practical advice", Review of Economics and Statistics 98(4), 701-712, 2016.
.. [4] Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate: a practical
   and powerful approach to multiple testing", Journal of the Royal Statistical
   Society B 57(1), 289-300, 1995.

Modules, each importing only those above it: ``replay`` (the history of every trial),
``fit`` (one curve's model and its errors), ``effect`` (:func:`history_effect` and its
result), ``verdicts`` (:func:`history_anomalies`, the sentences of
:func:`history_note` and :func:`detection_note`).
"""

from __future__ import annotations

from regimes.explain.history.effect import HistoryResult, history_effect
from regimes.explain.history.fit import MIN_FIRST_VISIT_TRIALS, NO_FIRST_VISITS
from regimes.explain.history.replay import PROCESS_COLUMNS, SHAPE_COLUMNS, first_visits
from regimes.explain.history.verdicts import detection_note, history_anomalies, history_note

__all__ = [
    "MIN_FIRST_VISIT_TRIALS",
    "NO_FIRST_VISITS",
    "PROCESS_COLUMNS",
    "SHAPE_COLUMNS",
    "HistoryResult",
    "detection_note",
    "first_visits",
    "history_anomalies",
    "history_effect",
    "history_note",
]
