"""The one feasibility checker: every policy's post-condition, and the tests' independent judge.

An allocation of a job on a snapshot is feasible when it places every instance of the job exactly
once (gang), respects each task's GPU-type constraint, gives each whole-GPU instance that many
distinct GPUs of its machine in full, puts each GPU-sharing instance on one GPU with its share and
GPU memory, and after adding it no GPU holds more than 1000 milli-GPUs or its memory and no machine
more than its CPU or memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from placement.model.demand import Job, Task
from placement.model.layout import Table
from placement.model.snapshot import MIB_PER_GIB, MILLI, Allocation, ClusterSnapshot, InstancePlacement, IntArray, up


@dataclass(frozen=True)
class Need:
    """One instance's demand in integer units. ``gpu_mem_mib`` < 0 means proportional to the GPU.
    ``gpu_types`` is the any-of GPU-type constraint; empty means any type (always empty for an
    instance without GPUs, which no GPU type can rule out)."""

    whole_gpus: int
    gpu_milli: int
    gpu_mem_mib: int
    cpu_milli: int
    mem_mib: int
    share_mem: float
    gpu_types: frozenset[str] = frozenset()

    def gpu_mem_on(self, cap_mib: int) -> int:
        """GPU memory needed on a GPU of ``cap_mib`` (per GPU used)."""
        if self.whole_gpus:
            return cap_mib
        if self.gpu_mem_mib >= 0:
            return self.gpu_mem_mib
        return proportional_mib(self.share_mem, cap_mib)


def proportional_mib(share: float, cap_mib: int) -> int:
    """GPU memory (MiB) of a share of a GPU whose memory is proportional: the share of the capacity, rounded
    down, so that shares that fit a GPU by their share fit it by memory too (rounded up, ten shares of 0.1
    would need 16,390 MiB of a 16,384 MiB GPU, and a GPU nine tenths shared would refuse the last tenth)."""
    return math.floor(share * cap_mib + 1e-9)


def need_of(task: Task) -> Need:
    """The integer demand of one instance of ``task``."""
    whole = task.whole_gpus
    milli = MILLI if whole else up(task.gpu, MILLI)
    explicit = not math.isnan(task.gpu_mem_gib)
    return Need(whole, milli, up(task.gpu_mem_gib, MIB_PER_GIB) if explicit else -1,
                up(task.cpu_cores, MILLI), up(task.mem_gib, MIB_PER_GIB), task.gpu if not whole else 1.0,
                task.gpu_types if task.gpu > 0 else frozenset())


_needs: dict[tuple[Task, ...], tuple[tuple[Need, int], ...]] = {}
_MOST_NEEDS = 1024
"""Tuples of tasks whose demands :func:`needs_of` keeps (the table is emptied when full)."""


def needs_of(job: Job) -> tuple[tuple[Need, int], ...]:
    """Each demand of the job's instances, with how many instances have it (remembered per tuple of tasks)."""
    found = _needs.get(job.tasks)
    if found is None:
        if len(_needs) >= _MOST_NEEDS:
            _needs.clear()
        counts: dict[Need, int] = {}
        for task in job.tasks:
            need = need_of(task)
            counts[need] = counts.get(need, 0) + task.instances
        found = _needs[job.tasks] = tuple(counts.items())
    return found


def violations(snapshot: ClusterSnapshot, job: Job, allocation: Allocation) -> list[str]:
    """Every way ``allocation`` breaks the rules on ``snapshot``; empty means feasible."""
    problems = _gang(job, allocation)
    if problems:
        return problems
    if job.job_id in snapshot.allocations:
        return [f"job {job.job_id} is already allocated"]
    problems = _instances(snapshot, job, allocation)
    if problems:
        return problems
    return _over_capacity(snapshot, allocation)


MANY_GPUS = 32
"""From this many GPUs held, an allocation is checked against the capacities in numpy; below, in Python integers."""


def _over_capacity(snapshot: ClusterSnapshot, allocation: Allocation) -> list[str]:
    """Capacity checks on the GPUs and machines the allocation touches (nothing else changes): O(what the
    allocation holds)."""
    instances = allocation.instances
    if len(instances) == 1 and _fits_alone(snapshot, instances[0]):
        return []
    if sum(len(p.gpus) for p in instances) >= MANY_GPUS:
        return _over_capacity_numpy(snapshot, allocation)
    return _capacity_problems(snapshot, *_held(allocation))


def _fits_alone(snapshot: ClusterSnapshot, p: InstancePlacement) -> bool:
    """Whether one instance, the allocation's only one, fits what its GPUs and machine have free: then what each
    gains is the instance's own amounts, with nothing to add up (most jobs are one instance). ``False`` also where
    that is not known so (a GPU listed twice, many GPUs): the general check decides."""
    gpus, m, layout = p.gpus, p.machine, snapshot.layout
    if len(gpus) >= MANY_GPUS or (len(gpus) > 1 and len(set(gpus)) != len(gpus)):
        return False
    if (snapshot.cpu_used.item(m) + p.cpu_milli > layout.cpu_cap.item(m)
            or snapshot.mem_used.item(m) + p.mem_mib > layout.mem_cap.item(m)):
        return False
    milli, mem, caps = snapshot.gpu_milli_used, snapshot.gpu_mem_used, layout.gpu_mem_cap
    return all(milli.item(g) + p.gpu_milli <= MILLI and mem.item(g) + p.gpu_mem_mib <= caps.item(g) for g in gpus)


def crowded_by(snapshot: ClusterSnapshot, allocation: Allocation, other: Allocation) -> bool:
    """Whether ``allocation`` (of a job not in ``snapshot``) goes over a capacity of ``snapshot`` once ``other``
    is placed there too: the capacity checks of :func:`violations` on ``snapshot`` with ``other`` applied, reading
    only the GPUs and machines ``allocation`` holds (no copy of the snapshot)."""
    gpu_add, machine_add = _held(allocation)
    for p in other.instances:
        for g in p.gpus:
            on_gpu = gpu_add.get(g)
            if on_gpu is not None:
                on_gpu[0] += p.gpu_milli
                on_gpu[1] += p.gpu_mem_mib
        on_machine = machine_add.get(p.machine)
        if on_machine is not None:
            on_machine[0] += p.cpu_milli
            on_machine[1] += p.mem_mib
    return bool(_capacity_problems(snapshot, gpu_add, machine_add))


def _held(allocation: Allocation) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """What ``allocation`` holds per GPU (share, GPU memory) and per machine (CPU, memory)."""
    gpu_add: dict[int, list[int]] = {}
    machine_add: dict[int, list[int]] = {}
    for p in allocation.instances:
        for g in p.gpus:
            added = gpu_add.get(g)
            if added is None:
                gpu_add[g] = [p.gpu_milli, p.gpu_mem_mib]
            else:
                added[0] += p.gpu_milli
                added[1] += p.gpu_mem_mib
        added = machine_add.get(p.machine)
        if added is None:
            machine_add[p.machine] = [p.cpu_milli, p.mem_mib]
        else:
            added[0] += p.cpu_milli
            added[1] += p.mem_mib
    return gpu_add, machine_add


def _capacity_problems(snapshot: ClusterSnapshot, gpu_add: dict[int, list[int]],
                       machine_add: dict[int, list[int]]) -> list[str]:
    """The first capacity each of GPU share, GPU memory, CPU and memory goes over with these amounts added.
    Checked in one pass, unsorted; only an allocation that goes over is looked at again, in index order, for
    the words (a policy's post-check passes millions of times and fails only on a bug)."""
    layout = snapshot.layout
    milli_used, mem_used, mem_cap = snapshot.gpu_milli_used.item, snapshot.gpu_mem_used.item, layout.gpu_mem_cap.item
    cpu_used, ram_used = snapshot.cpu_used.item, snapshot.mem_used.item
    cpu_cap, ram_cap = layout.cpu_cap.item, layout.mem_cap.item
    over = any(milli_used(g) + milli > MILLI or mem_used(g) + mem > mem_cap(g)
               for g, (milli, mem) in gpu_add.items()) or \
        any(cpu_used(m) + cpu > cpu_cap(m) or ram_used(m) + ram > ram_cap(m) for m, (cpu, ram) in machine_add.items())
    if not over:
        return []
    gpus, machines = sorted(gpu_add), sorted(machine_add)
    problems = []
    for name, index, used, adds, column, limit_of in (
            ("GPU share", gpus, milli_used, gpu_add, 0, None),
            ("GPU memory", gpus, mem_used, gpu_add, 1, mem_cap),
            ("CPU", machines, cpu_used, machine_add, 0, cpu_cap),
            ("memory", machines, ram_used, machine_add, 1, ram_cap)):
        for at in index:
            total, limit = used(at) + adds[at][column], MILLI if limit_of is None else limit_of(at)
            if total > limit:
                problems.append(f"{name} over capacity at index {at}: {total} > {limit}")
                break
    return problems


def _over_capacity_numpy(snapshot: ClusterSnapshot, allocation: Allocation) -> list[str]:
    """:func:`_over_capacity` for an allocation of many GPUs, in numpy, O(what it holds): the amounts of instances
    sharing a GPU or a machine are summed per GPU and machine (``_summed``), the usual allocation holding each once
    compared as it is; only an allocation that goes over is summed again, GPU by GPU and machine by machine, for the
    words."""
    layout, instances = snapshot.layout, allocation.instances
    held = [len(p.gpus) for p in instances]
    amounts = np.array([(p.gpu_milli, p.gpu_mem_mib, p.cpu_milli, p.mem_mib) for p in instances], dtype=np.int64)
    gpus, on_gpus = _summed([g for p in instances for g in p.gpus], np.repeat(amounts[:, :2], held, axis=0))
    machines, on_machines = _summed([p.machine for p in instances], amounts[:, 2:])
    if ((snapshot.gpu_milli_used[gpus] + on_gpus[:, 0] > MILLI).any()
            or (snapshot.gpu_mem_used[gpus] + on_gpus[:, 1] > layout.gpu_mem_cap[gpus]).any()
            or (snapshot.cpu_used[machines] + on_machines[:, 0] > layout.cpu_cap[machines]).any()
            or (snapshot.mem_used[machines] + on_machines[:, 1] > layout.mem_cap[machines]).any()):
        return _over_capacity_words(snapshot, allocation)
    return []


def _summed(places: list[int], amounts: IntArray) -> tuple[IntArray, IntArray]:
    """``places`` (GPUs or machines, one per row of ``amounts``) once each, with the rows of a place added up."""
    at = np.array(places, dtype=np.int64)
    if len(set(places)) == len(places):
        return at, amounts
    unique, inverse = np.unique(at, return_inverse=True)
    total = np.zeros((len(unique), amounts.shape[1]), dtype=np.int64)
    np.add.at(total, inverse.reshape(-1), amounts)
    return unique, total


def _over_capacity_words(snapshot: ClusterSnapshot, allocation: Allocation) -> list[str]:
    """What :func:`_over_capacity_numpy` found, in words: the first GPU or machine over each capacity."""
    layout, instances = snapshot.layout, allocation.instances
    held = [len(p.gpus) for p in instances]
    gpus, at_gpu = np.unique(np.fromiter((g for p in instances for g in p.gpus), dtype=np.int64, count=sum(held)),
                             return_inverse=True)
    machines, at_machine = np.unique(np.array([p.machine for p in instances], dtype=np.int64), return_inverse=True)

    def summed(values: list[int], at: IntArray, size: int, per: list[int] | None = None) -> IntArray:
        amounts = np.array(values, dtype=np.int64) if per is None else np.repeat(np.array(values, dtype=np.int64), per)
        total = np.zeros(size, dtype=np.int64)
        np.add.at(total, at.reshape(-1), amounts)
        return total

    problems = []
    for name, index, used, extra, limit in (
            ("GPU share", gpus, snapshot.gpu_milli_used, summed([p.gpu_milli for p in instances], at_gpu, len(gpus),
                                                                held), np.full(len(gpus), MILLI)),
            ("GPU memory", gpus, snapshot.gpu_mem_used, summed([p.gpu_mem_mib for p in instances], at_gpu, len(gpus),
                                                                held), layout.gpu_mem_cap[gpus]),
            ("CPU", machines, snapshot.cpu_used, summed([p.cpu_milli for p in instances], at_machine, len(machines)),
             layout.cpu_cap[machines]),
            ("memory", machines, snapshot.mem_used, summed([p.mem_mib for p in instances], at_machine, len(machines)),
             layout.mem_cap[machines])):
        total = used[index] + extra
        over = np.flatnonzero(total > limit)
        if len(over):
            k = int(over[0])
            problems.append(f"{name} over capacity at index {int(index[k])}: {int(total[k])} > {int(limit[k])}")
    return problems


def _gang(job: Job, allocation: Allocation) -> list[str]:
    if allocation.job_id != job.job_id:
        return [f"allocation is for job {allocation.job_id}, not {job.job_id}"]
    instances, tasks = allocation.instances, job.tasks
    if len(tasks) == 1 and len(instances) == tasks[0].instances and all(p.task == 0 for p in instances):
        return []  # the usual job, checked without counting per task
    counts: dict[int, int] = {}
    for p in instances:
        counts[p.task] = counts.get(p.task, 0) + 1
    wanted = {i: t.instances for i, t in enumerate(tasks)}
    if counts != wanted:
        return [f"gang broken: placed instances per task {counts}, job needs {wanted}"]
    return []


def _instances(snapshot: ClusterSnapshot, job: Job, allocation: Allocation) -> list[str]:
    """What each instance of ``allocation`` breaks on its own: its machine, GPU type, GPUs, share and amounts. One
    loop over the instances, what each task asks worked out once (a job of many instances is checked on every
    placement a policy makes)."""
    layout = snapshot.layout
    machines, types, gpu_type = len(layout.cpu_cap), layout.gpu_types, layout.gpu_type
    gpu_first, gpu_count, caps = layout.gpu_first, layout.gpu_count, layout.gpu_mem_cap
    asks = _asks.get(job.tasks, partial(_asks_of, job.tasks))
    problems: list[str] = []
    for i, p in enumerate(allocation.instances):
        ask, m, gpus = asks[p.task], p.machine, p.gpus
        if not 0 <= m < machines:
            problems.append(f"instance {i}: no machine {m}")
            continue
        if ask.types and types[gpu_type.item(m)] not in ask.types:
            problems.append(f"instance {i}: GPU type {types[gpu_type.item(m)]} not in {sorted(ask.types)}")
        first = gpu_first.item(m)  # a machine's GPUs are numbered one after the other (Layout)
        end = first + gpu_count.item(m)
        held = len(gpus)
        if held != ask.gpus or (held and (min(gpus) < first or max(gpus) >= end)) or (
                held > 1 and len(set(gpus)) != held):
            problems.append(f"instance {i}: needs {ask.gpus} distinct GPU(s) of machine {m}, got {gpus}")
            continue
        need = ask.need
        if gpus and (p.gpu_milli < need.gpu_milli or p.gpu_mem_mib < need.gpu_mem_on(caps.item(gpus[0]))):
            problems.append(f"instance {i}: holds less GPU share or memory than it needs")
        if p.cpu_milli < need.cpu_milli or p.mem_mib < need.mem_mib:
            problems.append(f"instance {i}: holds less CPU or memory than it needs")
    return problems


@dataclass(frozen=True)
class _Asks:
    """What the checker holds each instance of a task to."""

    need: Need
    gpus: int
    """GPUs it must hold: its whole GPUs, 1 for a share, 0 without GPUs."""
    types: frozenset[str]
    """The GPU types it accepts (empty: any)."""

    @staticmethod
    def of(task: Task) -> _Asks:
        need = need_of(task)
        return _Asks(need, need.whole_gpus or (1 if task.gpu > 0 else 0), task.gpu_types if task.gpu > 0 else
                     frozenset())


def _asks_of(tasks: tuple[Task, ...]) -> tuple[_Asks, ...]:
    return tuple(_Asks.of(task) for task in tasks)


_asks: Table[tuple[Task, ...], tuple[_Asks, ...]] = Table(_MOST_NEEDS)
"""Each job's tasks' asks (:meth:`_Asks.of`), worked out once: the checker runs after every placement."""
