"""Where gpuplace's Dask work runs: a running cluster's scheduler, or worker processes started on this machine.

An address is anything ``distributed.Client`` accepts (``tcp://host:8786``, ``tls://...``) and joins a running
cluster; ``local:N`` starts a ``LocalCluster`` of N worker processes with one thread each for the length of the
work (processes, not threads: distributed LightGBM runs one network per process, and replays hold the GIL). The
command line reads the address from ``--dask-scheduler`` or the environment variable ``GPUPLACE_DASK_SCHEDULER``.

Dask is imported here only when a connection is made, so that commands that do not use it start without it.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client

ENV_VAR = "GPUPLACE_DASK_SCHEDULER"
CONNECT_TIMEOUT = "10s"
"""How long a scheduler may take to answer before the work is refused (distributed's default is 30 s)."""
_LOCAL = re.compile(r"local:(\d+)")


class SchedulerUnreachable(ConnectionError):
    """No Dask scheduler answered at the address given."""


def local_workers(address: str) -> int | None:
    """N for ``local:N``; ``None`` for a scheduler's address; ``ValueError`` naming what is wrong with either."""
    if not address.startswith("local:"):
        if ":" not in address:
            raise ValueError(f"Dask scheduler {address!r}: expected an address such as tcp://host:8786, or local:N")
        return None
    found = _LOCAL.fullmatch(address)
    if found is None or int(found.group(1)) < 1:
        raise ValueError(f"Dask scheduler {address!r}: local workers are written local:N with N >= 1, e.g. local:2")
    return int(found.group(1))


@contextmanager
def connect(address: str) -> Iterator[Client]:
    """A client of the cluster at ``address`` (see the module's docstring), the default client while open."""
    distributed: Any = importlib.import_module("distributed")  # its constructors carry no annotations
    workers = local_workers(address)
    if workers is None:
        try:
            client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise SchedulerUnreachable(f"Dask scheduler {address}: no answer within {CONNECT_TIMEOUT} ({exc})") from exc
        with client:
            yield client
        return
    # A task that fails (bad input in a trace, say) reaches the caller as the error it raised; the workers' own
    # log of it, with the task's traceback, would print it again on this terminal.
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=logging.CRITICAL) as cluster, distributed.Client(cluster) as client:
        yield client


def connected(address: str | None) -> AbstractContextManager[Client | None]:
    """:func:`connect` to ``address``; where it is ``None`` or empty, nothing: the work stays in this process."""
    return connect(address) if address else nullcontext()
