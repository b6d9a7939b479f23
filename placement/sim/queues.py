"""Queue policies: in which order waiting jobs are offered to the placement policy.

* ``fifo`` - by arrival.
* ``sjf-oracle`` - shortest true duration first (an upper bound no real scheduler has).
* ``sjf-<name>`` - shortest *estimated* duration first, with the estimate ``name`` attached to each
  job (``sjf-user`` = the PAI paper's SJU, ``sjf-group`` = SJG, ``sjf-group-gpu`` = SJGG,
  ``sjf-model`` = the registered model). A job without that estimate sorts as the median of the
  estimates of the jobs that arrived before it (causal; 0 for the first).
* ``drf`` - dominant-resource fairness across users: the user whose dominant share (max over GPU and
  CPU of allocated / capacity) is smallest goes first; within a user, by arrival.

Ties break by arrival, then job id.

A policy makes a :class:`WaitingQueue` per replay, which keeps the waiting jobs in order as they come
and go (a sorted list with binary search), so a scheduling pass over a long queue does not sort it
again: with thousands waiting and thousands of completions, re-sorting per pass would dominate.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Protocol

import numpy as np
import numpy.typing as npt

from placement.scheduling.orders import CausalMedian, arrival_key
from placement.sim.jobs import SimJob

UserShares = Mapping[str, float]
BoolArray = npt.NDArray[np.bool_]
Keep = Callable[[npt.NDArray[np.int64]], BoolArray]
"""Given waiting jobs' indices, which of them to keep."""
Key = tuple[float, float, str]


class WaitingQueue(Protocol):
    """Waiting jobs (by index into the replay's job list) in a policy's order."""

    def add(self, i: int, job: SimJob) -> None: ...

    def remove(self, i: int) -> None: ...

    def __len__(self) -> int: ...

    def ordered(self, shares: UserShares) -> Iterator[int]:
        """Indices in offer order; ``shares`` are the users' dominant shares now (for ``drf``)."""
        ...

    def order_of(self, indices: list[int], shares: UserShares) -> list[int]:
        """Some of the waiting jobs, in offer order."""
        ...

    def among(self, keep: Keep, shares: UserShares) -> npt.NDArray[np.int64]:
        """The waiting jobs ``keep`` keeps, in offer order, as an array (it is given waiting jobs' indices, as an
        array, and says which of them to keep: a pass asks about the waiting jobs alone, not every job of the
        replay; the pass reads the offer in vector operations, so it is never turned into a list)."""
        ...


class _Sorted:
    """A list of (key, index) kept sorted, and its indices alone beside it in an array (``order``: to pick from in
    vector operations without turning a list of thousands into an array on every pass); removal by index through
    the key remembered at insertion."""

    def __init__(self) -> None:
        self.items: list[tuple[Key, int]] = []
        self.keys: dict[int, Key] = {}
        self._order = np.zeros(64, dtype=np.int64)

    @property
    def order(self) -> npt.NDArray[np.int64]:
        """The indices in order (a view: read it before the next change)."""
        return self._order[:len(self.items)]

    def add(self, i: int, key: Key) -> None:
        self.keys[i] = key
        at, size = bisect.bisect_left(self.items, (key, i)), len(self.items)
        self.items.insert(at, (key, i))
        if size == len(self._order):
            self._order = np.concatenate([self._order, np.zeros(size, dtype=np.int64)])
        self._order[at + 1:size + 1] = self._order[at:size]
        self._order[at] = i

    def remove(self, i: int) -> None:
        at = bisect.bisect_left(self.items, (self.keys.pop(i), i))
        del self.items[at]
        self._order[at:len(self.items)] = self._order[at + 1:len(self.items) + 1]

    def __len__(self) -> int:
        return len(self.items)


class _StaticQueue:
    """A queue whose order is fixed per job when it arrives (FIFO and every SJF)."""

    def __init__(self, key: Callable[[SimJob], Key]) -> None:
        self.key = key
        self.jobs = _Sorted()

    def add(self, i: int, job: SimJob) -> None:
        self.jobs.add(i, self.key(job))

    def remove(self, i: int) -> None:
        self.jobs.remove(i)

    def __len__(self) -> int:
        return len(self.jobs)

    def ordered(self, shares: UserShares) -> Iterator[int]:
        return iter(self.jobs.order.tolist())

    def order_of(self, indices: list[int], shares: UserShares) -> list[int]:
        return sorted(indices, key=self.jobs.keys.__getitem__)  # stable: equal keys keep the callers' order

    def among(self, keep: Keep, shares: UserShares) -> npt.NDArray[np.int64]:
        order = self.jobs.order
        picked: npt.NDArray[np.int64] = order[keep(order)]
        return picked


class _EstimateKey:
    """SJF key by a named estimate; a missing estimate takes the median of those seen so far (the
    scheduler's rule for ``sjf``: ``placement.scheduling.orders.CausalMedian``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fill = CausalMedian()

    def __call__(self, job: SimJob) -> Key:
        return (self.fill(job.estimate(self.name)), job.submit_s, job.job_id)


class _DrfQueue:
    """Per user a queue by arrival; a pass serves users by dominant share, smallest first, merging the
    queues of users with equal shares by arrival."""

    def __init__(self) -> None:
        self.users: dict[str, _Sorted] = {}
        self.user_of: dict[int, str] = {}

    def add(self, i: int, job: SimJob) -> None:
        self.users.setdefault(job.user, _Sorted()).add(i, (0.0, job.submit_s, job.job_id))
        self.user_of[i] = job.user

    def remove(self, i: int) -> None:
        user = self.user_of.pop(i)
        self.users[user].remove(i)
        if not self.users[user]:
            del self.users[user]

    def __len__(self) -> int:
        return len(self.user_of)

    def ordered(self, shares: UserShares) -> Iterator[int]:
        by_share = sorted(self.users, key=lambda u: shares.get(u, 0.0))
        snapshot = {u: list(self.users[u].items) for u in by_share}
        for _, group in groupby(by_share, key=lambda u: shares.get(u, 0.0)):
            for _, i in heapq.merge(*(snapshot[u] for u in group)):
                yield i

    def order_of(self, indices: list[int], shares: UserShares) -> list[int]:
        def key(i: int) -> tuple[float, Key, int]:
            user = self.user_of[i]
            return (shares.get(user, 0.0), self.users[user].keys[i], i)

        return sorted(indices, key=key)

    def among(self, keep: Keep, shares: UserShares) -> npt.NDArray[np.int64]:
        waiting = np.fromiter(self.user_of, dtype=np.int64, count=len(self.user_of))
        return np.array(self.order_of(waiting[keep(waiting)].tolist(), shares), dtype=np.int64)


@dataclass(frozen=True)
class QueuePolicy:
    """A named queue order; :meth:`new_queue` gives the empty queue of one replay."""

    name: str
    new_queue: Callable[[], WaitingQueue]
    uses_shares: bool = False
    """Whether the order depends on the users' shares (else the simulator need not compute them)."""


def _fifo_key(job: SimJob) -> Key:
    return arrival_key(job.submit_s, job.job_id)


def _oracle_key(job: SimJob) -> Key:
    return (job.duration_s, job.submit_s, job.job_id)


def queue_policy(name: str) -> QueuePolicy:
    """The queue policy called ``name`` (``fifo``, ``sjf-oracle``, ``sjf-<estimate>``, ``drf``)."""
    if name == "fifo":
        return QueuePolicy(name, lambda: _StaticQueue(_fifo_key))
    if name == "sjf-oracle":
        return QueuePolicy(name, lambda: _StaticQueue(_oracle_key))
    if name == "drf":
        return QueuePolicy(name, _DrfQueue, uses_shares=True)
    if name.startswith("sjf-") and len(name) > 4:
        estimate = name[4:]
        return QueuePolicy(name, lambda: _StaticQueue(_EstimateKey(estimate)))
    raise KeyError(f"unknown queue policy {name!r}; known: fifo, sjf-oracle, sjf-<estimate name>, drf")
