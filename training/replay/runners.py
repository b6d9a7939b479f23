"""Where the replays of a sweep run: one after another in this process, or as tasks on a Dask cluster's workers.

A runner shares the values every replay reads (the cluster, a trace's jobs), submits calls and gives their
results back in submission order. In this process a call runs when its result is asked for. On Dask it is a task
(``distributed.Client.submit``); an argument that was shared or submitted before is a future, so the jobs of a
trace are built once, on a worker, and every replay of that trace reads them there instead of from this process.

Replays are deterministic (seeded policies, ties broken by arrival and job id), so a sweep gives the same numbers
on either runner; the one exception is a batch solver stopped by its time limit, which differs between any two
runs (``placement.sim.engine``).
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

Done = Callable[[int], None]
"""Told the position (in submission order) of each call as it finishes."""


class Runner(Protocol):
    def share(self, value: Any, name: str) -> Any:
        """``value``, or a handle a submitted call can take in its place."""
        ...

    def submit(self, function: Callable[..., Any], *args: Any, name: str) -> Any:
        """``function(*args)`` to run, ``name`` saying what it is; a handle of its result."""
        ...

    def results(self, handles: Sequence[Any], done: Done | None = None) -> list[Any]:
        """The results of ``handles``, in their order, waiting for them."""
        ...


class InProcess:
    """Everything runs here, one call after another, when its result is asked for (so that progress is told as
    each ends); a call another one reads runs once, before it."""

    def share(self, value: Any, name: str) -> Any:
        return value

    def submit(self, function: Callable[..., Any], *args: Any, name: str) -> Any:
        return _Call(function, args)

    def results(self, handles: Sequence[Any], done: Done | None = None) -> list[Any]:
        found = []
        for position, handle in enumerate(handles):
            found.append(handle.value() if isinstance(handle, _Call) else handle)
            if done is not None:
                done(position)
        return found


class _Call:
    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function, self.args = function, args
        self.done = False
        self.result: Any = None

    def value(self) -> Any:
        if not self.done:
            self.result = self.function(*(a.value() if isinstance(a, _Call) else a for a in self.args))
            self.done, self.args = True, ()
        return self.result


class OnDask:
    """Every call is a task of the cluster ``client`` is connected to (``training.dask_cluster.connect``)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.sweep = uuid.uuid4().hex[:8]
        """Part of every task's key: two sweeps on one cluster never share a result by name."""

    def share(self, value: Any, name: str) -> Any:
        # sent to every worker once, rather than with each task that reads it; wrapped, since scatter would send
        # the items of a list (a trace's jobs) one by one
        return self.client.scatter([value], broadcast=True, hash=False)[0]

    def submit(self, function: Callable[..., Any], *args: Any, name: str) -> Any:
        return self.client.submit(function, *args, key=f"{name}-{self.sweep}", pure=False)

    def results(self, handles: Sequence[Any], done: Done | None = None) -> list[Any]:
        distributed: Any = importlib.import_module("distributed")  # as_completed carries no annotations
        position = {handle.key: i for i, handle in enumerate(handles)}
        for finished in distributed.as_completed(list(handles)):
            if done is not None:
                done(position[finished.key])
        return list(self.client.gather(list(handles)))
