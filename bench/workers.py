"""Worker pools for the benchmarks: spawned processes of one thread each.

Spawned, not forked: polars' thread pool does not survive a fork. One thread each:
every worker analyses its own curves, and a worker whose numpy and polars each start a
thread per core oversubscribes a many-core host (16 workers of 16 threads each ran the
accuracy benchmark about ten times slower than 16 workers of one thread). A variable the
caller has set is left as it is.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

__all__ = ["THREAD_VARIABLES", "process_pool"]

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "POLARS_MAX_THREADS",
)
"""What sets the size of numpy's and polars' thread pools."""


def process_pool(workers: int) -> ProcessPoolExecutor:
    """Return a pool of ``workers`` spawned processes, each running on one thread."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
