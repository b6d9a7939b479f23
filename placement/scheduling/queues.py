"""Queues and cohorts, as checked configuration (``placement.scheduling.queue_config`` builds them).

A queue has a guaranteed quota per resource (``placement.scheduling.resources``: ``gpus``, ``gpus:<TYPE>``,
``cpu_cores``, ``mem_gib``) and may belong to a cohort. Within its guarantee a queue's jobs always have
room, by preemption if need be. Beyond it, a queue in a cohort borrows the idle guarantee of the other
queues of its cohort's tree (cohorts may nest: a cohort's ``parent``), up to its borrowing limit, as
Kueue's ClusterQueues borrow within a cohort and YARN's capacity-scheduler queues grow to their
maximum capacity. A resource a queue's quota does not name is not limited by its quota; a borrowing
limit it does not name is unlimited (Kueue's default); a queue without a cohort never borrows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType


@dataclass(frozen=True)
class Queue:
    name: str
    guarantee: Mapping[str, float]
    """Guaranteed amount per resource key (Kueue's nominal quota, YARN's capacity)."""
    borrowing_limit: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """How much beyond its guarantee it may borrow, per resource key; absent = as much as is idle."""
    cohort: str | None = None
    order: str = "fifo"

    def governs(self, key: str) -> bool:
        return key in self.guarantee

    def limit(self, key: str) -> float:
        """The most it may use of ``key``: guarantee + borrowing limit (infinite where not governed)."""
        if key not in self.guarantee:
            return math.inf
        if self.cohort is None:
            return self.guarantee[key]
        return self.guarantee[key] + self.borrowing_limit.get(key, math.inf)


@dataclass(frozen=True)
class QueueSet:
    """Queues by name and each cohort's parent (``None`` for a root cohort)."""

    queues: Mapping[str, Queue]
    cohort_parents: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))

    def __contains__(self, name: object) -> bool:
        return name in self.queues

    def __getitem__(self, name: str) -> Queue:
        return self.queues[name]

    def root(self, cohort: str) -> str:
        """The top of ``cohort``'s tree (the configuration has no cycles)."""
        while (parent := self.cohort_parents.get(cohort)) is not None:
            cohort = parent
        return cohort

    @cached_property
    def _trees(self) -> Mapping[str, tuple[str, ...]]:
        members: dict[str, list[str]] = {}
        for queue in self.queues.values():
            if queue.cohort is not None:
                members.setdefault(self.root(queue.cohort), []).append(queue.name)
        return MappingProxyType({root: tuple(sorted(names)) for root, names in members.items()})

    def tree_of(self, name: str) -> str | None:
        """The root cohort of queue ``name``'s tree; ``None`` for a queue without a cohort."""
        cohort = self.queues[name].cohort
        return None if cohort is None else self.root(cohort)

    def members(self, name: str) -> tuple[str, ...]:
        """The queues that share their idle guarantee with queue ``name`` (itself included)."""
        tree = self.tree_of(name)
        return (name,) if tree is None else self._trees[tree]
