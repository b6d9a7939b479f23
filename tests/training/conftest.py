"""Fixtures shared by the training tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """A Dask cluster of two workers in this process (threads: starting processes would cost the suite seconds
    per module), the default client while a module's tests run."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as connected:
        yield connected
