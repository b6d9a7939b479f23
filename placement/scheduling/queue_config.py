"""Checking a queue configuration given as plain data (a parsed YAML file or a request body) against a
cluster, and the inverse (:func:`queues_to_dict`), for a configuration API that shows what it stores.

The shape (``docs/scheduling.md`` has an example)::

    cohorts: [{name: research}, {name: vision, parent: research}]      # optional
    queues:
      - name: team-a
        cohort: vision                                                  # optional
        order: fifo                                                     # fifo | sjf | priority
        quota: {gpus: 8, gpus_by_type: {V100: 4}, cpu_cores: 64, mem_gib: 512}
        borrowing_limit: {gpus: 4}                                      # optional, needs a cohort

Every error is a ``QueueConfigError`` naming the source, the line (where the data came from a file), the
field (``queues[team-a].quota.gpus_by_type.V100``) and the value: an unknown key, a missing name, a name
given twice, a number that is not finite or is negative, a GPU type the cluster does not have, an order
that is not registered, a cohort that is not declared, a cycle of cohort parents, a borrowing limit
without a cohort or for a resource the quota does not name, and guarantees that add up to more than the
cluster has (of any resource: the guarantee could not be kept).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from placement.model.cluster import Cluster
from placement.scheduling.errors import QueueConfigError
from placement.scheduling.orders import ORDERS
from placement.scheduling.queues import Queue, QueueSet
from placement.scheduling.resources import CPU_CORES, EPSILON, GPUS, MEM_GIB, TYPE_PREFIX, capacity_of, gpu_type_key

_TOP = ("cohorts", "queues")
_COHORT = ("name", "parent")
_QUEUE = ("name", "cohort", "order", "quota", "borrowing_limit")
_AMOUNTS = (GPUS, "gpus_by_type", CPU_CORES, MEM_GIB)


@dataclass(frozen=True)
class _At:
    """Where a value is: its path by position (to find its line) and as shown (queues by name)."""

    raw: str
    shown: str

    def key(self, name: str) -> _At:
        return _At(f"{self.raw}.{name}" if self.raw else name, f"{self.shown}.{name}" if self.shown else name)

    def item(self, index: int, name: str | None = None) -> _At:
        return _At(f"{self.raw}[{index}]", f"{self.shown}[{name if name is not None else index}]")


@dataclass(frozen=True)
class _Checker:
    path: str
    lines: Mapping[str, int]

    def error(self, at: _At, problem: str, value: object = None) -> QueueConfigError:
        raw = at.raw
        while raw and raw not in self.lines:  # a missing key: the line of the mapping that lacks it
            raw = raw[:max(raw.rfind("."), raw.rfind("["), 0)]
        return QueueConfigError(self.path, problem, self.lines.get(raw), at.shown or None, value)

    def mapping(self, value: object, at: _At, keys: tuple[str, ...] | None) -> Mapping[str, Any]:
        """A mapping whose keys are among ``keys`` (any keys when ``None``)."""
        if not isinstance(value, Mapping):
            allowed = f" with keys {', '.join(keys)}" if keys is not None else ""
            raise self.error(at, f"must be a mapping{allowed}", _shown(value))
        for key in value:
            if keys is not None and key not in keys:
                raise self.error(at.key(str(key)), f"unknown key; allowed: {', '.join(keys)}", key)
        return value

    def name(self, value: object, at: _At, seen: set[str]) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(at, "must be a non-empty name", _shown(value))
        if value in seen:
            raise self.error(at, "is given twice", value)
        seen.add(value)
        return value

    def amount(self, value: object, at: _At) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(at, "must be a number", _shown(value))
        if not math.isfinite(value) or value < 0:
            raise self.error(at, "must be a finite number >= 0", value)
        return float(value)

    def amounts(self, value: object, at: _At, types: Mapping[str, float]) -> dict[str, float]:
        """Resource key -> amount, from ``{gpus, gpus_by_type: {TYPE: n}, cpu_cores, mem_gib}``."""
        given = self.mapping(value, at, _AMOUNTS)
        amounts = {key: self.amount(given[key], at.key(key)) for key in (GPUS, CPU_CORES, MEM_GIB) if key in given}
        if "gpus_by_type" in given:
            by_type = self.mapping(given["gpus_by_type"], at.key("gpus_by_type"), None)
            for gpu_type, n in by_type.items():
                here = at.key("gpus_by_type").key(str(gpu_type))
                if gpu_type not in types:
                    known = ", ".join(types) or "none"
                    raise self.error(here, f"the cluster has no GPUs of this type; it has: {known}", gpu_type)
                amounts[gpu_type_key(str(gpu_type))] = self.amount(n, here)
        return amounts


def _shown(value: object) -> object:
    return value if isinstance(value, str | int | float) else type(value).__name__


def queues_from_dict(data: object, cluster: Cluster, path: str = "queues",
                     lines: Mapping[str, int] | None = None) -> QueueSet:
    """The checked queues of ``data`` for ``cluster``; ``QueueConfigError`` naming ``path`` and the field.

    ``lines`` maps a field's path by position (``queues[0].quota.gpus``) to its line in the file.
    """
    check = _Checker(path, lines or {})
    top = check.mapping(data, _At("", ""), _TOP)
    parents = _cohorts(check, top.get("cohorts", []))
    raw_queues = top.get("queues")
    if not isinstance(raw_queues, list) or not raw_queues:
        raise check.error(_At("queues", "queues"), "must be a non-empty list of queues", _shown(raw_queues))
    capacity = capacity_of(cluster)
    seen: set[str] = set()
    queues = [_queue(check, raw, _At("queues", "queues"), i, seen, parents, capacity)
              for i, raw in enumerate(raw_queues)]
    _within_capacity(check, queues, capacity)
    return QueueSet(MappingProxyType({q.name: q for q in queues}), MappingProxyType(parents))


def _cohorts(check: _Checker, raw: object) -> dict[str, str | None]:
    at = _At("cohorts", "cohorts")
    if not isinstance(raw, list):
        raise check.error(at, "must be a list of cohorts", _shown(raw))
    parents: dict[str, str | None] = {}
    where: dict[str, _At] = {}
    for i, item in enumerate(raw):
        name_value = item.get("name") if isinstance(item, Mapping) else None
        here = at.item(i, name_value if isinstance(name_value, str) else None)
        cohort = check.mapping(item, here, _COHORT)
        name = check.name(cohort.get("name"), here.key("name"), set(parents))
        parent = cohort.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise check.error(here.key("parent"), "must be the name of a cohort", _shown(parent))
        parents[name], where[name] = parent, here
    for name, parent in parents.items():
        if parent is not None and parent not in parents:
            raise check.error(where[name].key("parent"), f"unknown cohort; declared: {', '.join(parents)}", parent)
    for name in parents:
        chain = [name]
        while (parent := parents[chain[-1]]) is not None:
            if parent in chain:
                cycle = " -> ".join([*chain[chain.index(parent):], parent])
                raise check.error(where[chain[-1]].key("parent"), f"cohorts form a cycle: {cycle}", parent)
            chain.append(parent)
    return parents


def _queue(check: _Checker, raw: object, at: _At, index: int, seen: set[str], parents: Mapping[str, str | None],
           capacity: Mapping[str, float]) -> Queue:
    name_value = raw.get("name") if isinstance(raw, Mapping) else None
    here = at.item(index, name_value if isinstance(name_value, str) else None)
    given = check.mapping(raw, here, _QUEUE)
    name = check.name(given.get("name"), here.key("name"), seen)
    cohort = given.get("cohort")
    if cohort is not None and cohort not in parents:
        declared = ", ".join(parents) or "none"
        raise check.error(here.key("cohort"), f"unknown cohort; declared: {declared}", _shown(cohort))
    order = given.get("order", "fifo")
    if order not in ORDERS:
        raise check.error(here.key("order"), f"unknown order; known: {', '.join(ORDERS)}", _shown(order))
    types = {k[len(TYPE_PREFIX):]: v for k, v in capacity.items() if k.startswith(TYPE_PREFIX)}
    if "quota" not in given:
        raise check.error(here, "has no 'quota'")
    guarantee = check.amounts(given["quota"], here.key("quota"), types)
    limit = check.amounts(given.get("borrowing_limit", {}), here.key("borrowing_limit"), types)
    if limit and cohort is None:
        raise check.error(here.key("borrowing_limit"), "a queue without a cohort has nobody to borrow from")
    for key in limit:
        if key not in guarantee:
            raise check.error(here.key("borrowing_limit").key(_field(key)),
                              "limits borrowing of a resource the quota does not name")
    return Queue(name, MappingProxyType(guarantee), MappingProxyType(limit), cohort, str(order))


def _field(key: str) -> str:
    return f"gpus_by_type.{key[len(TYPE_PREFIX):]}" if key.startswith(TYPE_PREFIX) else key


def _within_capacity(check: _Checker, queues: list[Queue], capacity: Mapping[str, float]) -> None:
    """Guarantees add up to at most the cluster, per resource: the first queue that goes over is named."""
    total: dict[str, float] = {}
    for i, queue in enumerate(queues):
        for key, amount in queue.guarantee.items():
            total[key] = total.get(key, 0.0) + amount
            if total[key] > capacity.get(key, 0.0) + EPSILON:
                at = _At("queues", "queues").item(i, queue.name).key("quota").key(_field(key))
                whole = f"the cluster has {capacity.get(key, 0.0):g}"
                problem = (f"is above the cluster's capacity ({whole})" if total[key] == amount else
                           f"brings the queues' guarantees to {total[key]:g}, above the cluster's capacity ({whole})")
                raise check.error(at, problem, amount)


def queues_to_dict(queues: QueueSet) -> dict[str, Any]:
    """``queues`` in the shape :func:`queues_from_dict` reads (it reads this back to an equal ``QueueSet``)."""
    def amounts(values: Mapping[str, float]) -> dict[str, Any]:
        plain: dict[str, Any] = {k: v for k, v in values.items() if not k.startswith(TYPE_PREFIX)}
        by_type = {k[len(TYPE_PREFIX):]: v for k, v in values.items() if k.startswith(TYPE_PREFIX)}
        return {**plain, "gpus_by_type": by_type} if by_type else plain

    cohorts = [{"name": c, **({"parent": p} if p is not None else {})} for c, p in queues.cohort_parents.items()]
    listed = []
    for q in queues.queues.values():
        item: dict[str, Any] = {"name": q.name, "order": q.order, "quota": amounts(q.guarantee)}
        if q.cohort is not None:
            item["cohort"] = q.cohort
        if q.borrowing_limit:
            item["borrowing_limit"] = amounts(q.borrowing_limit)
        listed.append(item)
    return {"cohorts": cohorts, "queues": listed}
