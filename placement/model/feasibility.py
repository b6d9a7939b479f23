"""The one feasibility checker: every policy's post-condition, and the tests' independent judge.

An allocation of a job on a snapshot is feasible when it places every instance of the job exactly
once (gang), respects each task's GPU-type constraint, gives each whole-GPU instance that many
distinct GPUs of its machine in full, puts each GPU-sharing instance on one GPU with its share and
GPU memory, and after adding it no GPU holds more than 1000 milli-GPUs or its memory and no machine
more than its CPU or memory.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from placement.model.demand import Job, Task
from placement.model.snapshot import MIB_PER_GIB, MILLI, Allocation, ClusterSnapshot, InstancePlacement, up


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
        return math.ceil(self.share_mem * cap_mib - 1e-9)


def need_of(task: Task) -> Need:
    """The integer demand of one instance of ``task``."""
    whole = task.whole_gpus
    milli = MILLI if whole else up(task.gpu, MILLI)
    explicit = not math.isnan(task.gpu_mem_gib)
    return Need(whole, milli, up(task.gpu_mem_gib, MIB_PER_GIB) if explicit else -1,
                up(task.cpu_cores, MILLI), up(task.mem_gib, MIB_PER_GIB), task.gpu if not whole else 1.0,
                task.gpu_types if task.gpu > 0 else frozenset())


def violations(snapshot: ClusterSnapshot, job: Job, allocation: Allocation) -> list[str]:
    """Every way ``allocation`` breaks the rules on ``snapshot``; empty means feasible."""
    problems = _gang(job, allocation)
    if problems:
        return problems
    if job.job_id in snapshot.allocations:
        return [f"job {job.job_id} is already allocated"]
    needs = [need_of(t) for t in job.tasks]
    for i, placement in enumerate(allocation.instances):
        problems += _instance(snapshot, job.tasks[placement.task], needs[placement.task], placement, i)
    if problems:
        return problems
    return _over_capacity(snapshot, allocation)


def _over_capacity(snapshot: ClusterSnapshot, allocation: Allocation) -> list[str]:
    """Capacity checks on the GPUs and machines the allocation touches (nothing else changes)."""
    layout = snapshot.layout
    gpu_add: dict[int, list[int]] = {}
    machine_add: dict[int, list[int]] = {}
    for p in allocation.instances:
        for g in p.gpus:
            added = gpu_add.setdefault(g, [0, 0])
            added[0] += p.gpu_milli
            added[1] += p.gpu_mem_mib
        added = machine_add.setdefault(p.machine, [0, 0])
        added[0] += p.cpu_milli
        added[1] += p.mem_mib
    gpus, machines = sorted(gpu_add), sorted(machine_add)
    problems = []
    for name, index, used, extra, cap in (
            ("GPU share", gpus, snapshot.gpu_milli_used, [gpu_add[g][0] for g in gpus], [MILLI] * len(gpus)),
            ("GPU memory", gpus, snapshot.gpu_mem_used, [gpu_add[g][1] for g in gpus],
             layout.gpu_mem_cap[gpus].tolist()),
            ("CPU", machines, snapshot.cpu_used, [machine_add[m][0] for m in machines],
             layout.cpu_cap[machines].tolist()),
            ("memory", machines, snapshot.mem_used, [machine_add[m][1] for m in machines],
             layout.mem_cap[machines].tolist())):
        # Python integers: an allocation touches few GPUs and machines, where numpy calls cost more
        for at, before, more, limit in zip(index, used[index].tolist(), extra, cap, strict=True):
            if before + more > limit:
                problems.append(f"{name} over capacity at index {at}: {before + more} > {limit}")
                break
    return problems


def _gang(job: Job, allocation: Allocation) -> list[str]:
    if allocation.job_id != job.job_id:
        return [f"allocation is for job {allocation.job_id}, not {job.job_id}"]
    counts = Counter(p.task for p in allocation.instances)
    wanted = {i: t.instances for i, t in enumerate(job.tasks)}
    if dict(counts) != wanted:
        return [f"gang broken: placed instances per task {dict(counts)}, job needs {wanted}"]
    return []


def _instance(snapshot: ClusterSnapshot, task: Task, need: Need, p: InstancePlacement, i: int) -> list[str]:
    layout = snapshot.layout
    if not 0 <= p.machine < len(layout.cpu_cap):
        return [f"instance {i}: no machine {p.machine}"]
    problems: list[str] = []
    machine_type = layout.gpu_types[int(layout.gpu_type[p.machine])]
    if task.gpu > 0 and task.gpu_types and machine_type not in task.gpu_types:
        problems.append(f"instance {i}: GPU type {machine_type} not in {sorted(task.gpu_types)}")
    on_machine = all(0 <= g < len(layout.gpu_machine) and layout.gpu_machine[g] == p.machine for g in p.gpus)
    expected_gpus = need.whole_gpus or (1 if task.gpu > 0 else 0)
    if len(set(p.gpus)) != len(p.gpus) or len(p.gpus) != expected_gpus or not on_machine:
        problems.append(f"instance {i}: needs {expected_gpus} distinct GPU(s) of machine {p.machine}, got {p.gpus}")
        return problems
    if p.gpus and (p.gpu_milli < need.gpu_milli or p.gpu_mem_mib < need.gpu_mem_on(int(layout.gpu_mem_cap[p.gpus[0]]))):
        problems.append(f"instance {i}: holds less GPU share or memory than it needs")
    if p.cpu_milli < need.cpu_milli or p.mem_mib < need.mem_mib:
        problems.append(f"instance {i}: holds less CPU or memory than it needs")
    return problems
