"""Fixtures the collectors' tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[str]:
    """A Dask ``LocalCluster`` of one worker process on loopback; yields its address."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address
