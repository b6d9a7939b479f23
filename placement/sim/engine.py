"""The event-driven replay: arrivals and completions in time order, a scheduling pass after each.

At every event time the simulator first applies completions (releasing their resources), then
arrivals, then offers the waiting jobs to the placement policy in the queue policy's order. Every
job that fits is started (later jobs may start ahead of a blocked earlier one: backfilling); the
rest wait. A job that could not fit the cluster even empty is reported and dropped, never silently.
The replay is deterministic: ties break by event kind, arrival and job id; policies are seeded.

Time-weighted series are kept for the metrics (``placement.sim.metrics``): allocated GPUs, and free
GPUs while at least one job waits (free but unusable capacity: fragmentation).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.cluster import Cluster
from placement.feasibility import need_of
from placement.online import PlacementConfig
from placement.policies import OnlinePolicy, online_policy
from placement.sim.jobs import SimJob
from placement.sim.queues import QueueOrder
from placement.snapshot import MILLI, ClusterSnapshot, apply, release
from placement.working import type_mask_of

FINISH, ARRIVE = 0, 1


@dataclass
class JobRecord:
    job_id: str
    user: str
    submit_s: float
    duration_s: float
    gpus: float
    start_s: float | None = None
    end_s: float | None = None
    never_fits: bool = False
    reasons: tuple[str, ...] = ()


@dataclass
class SimResult:
    records: list[JobRecord]
    samples: list[tuple[float, float, float, int]] = field(default_factory=list)
    """(time, allocated GPUs, free GPUs, waiting jobs) after each event time."""
    total_gpus: float = 0.0
    decisions: int = 0


@dataclass
class _State:
    snapshot: ClusterSnapshot
    queue: list[int] = field(default_factory=list)
    new: list[int] = field(default_factory=list)
    freed: bool = False
    user_gpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    user_cpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    fits_empty: dict[tuple[object, ...], tuple[str, ...] | None] = field(default_factory=dict)


def simulate(cluster: Cluster, jobs: Sequence[SimJob], policy: str, order: QueueOrder,
             config: PlacementConfig | None = None, progress: Callable[[int], None] | None = None,
             max_tries_per_pass: int = 256) -> SimResult:
    """Replay ``jobs`` on ``cluster`` with online placement ``policy`` and queue order ``order``."""
    place = online_policy(policy, config, explain=False)
    explained = online_policy(policy, config)
    records = [JobRecord(j.job_id, j.user, j.submit_s, j.duration_s, j.job.gpus) for j in jobs]
    state = _State(ClusterSnapshot.empty(cluster))
    empty = state.snapshot
    result = SimResult(records, total_gpus=float(cluster.total_gpus))
    events = [(j.submit_s, ARRIVE, i) for i, j in enumerate(jobs)]
    heapq.heapify(events)
    capacity = (float(cluster.total_gpus), float(sum(m.cpu_cores for m in cluster.machines)))
    seen = 0
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            if kind == FINISH:
                state.snapshot = release(state.snapshot, jobs[i].job_id)
                _account(state, jobs[i], -1.0)
                state.freed = True
            else:
                _arrive(state, jobs[i], i, place, explained, empty, records)
                seen += 1
                if progress is not None:
                    progress(seen)
        _schedule(state, jobs, place, order, now, events, records, result, capacity, max_tries_per_pass)
        _sample(state, now, result)
    return result


def _arrive(state: _State, job: SimJob, i: int, place: OnlinePolicy, explained: OnlinePolicy,
            empty: ClusterSnapshot, records: list[JobRecord]) -> None:
    shape = _shape(job)
    if shape not in state.fits_empty:  # can it fit the cluster at all? once per job shape
        fits = place(empty, job.job).allocation is not None
        state.fits_empty[shape] = None if fits else explained(empty, job.job).reasons
    reasons = state.fits_empty[shape]
    if reasons is not None:
        records[i].never_fits, records[i].reasons = True, reasons
    else:
        state.new.append(i)


def _schedule(state: _State, jobs: Sequence[SimJob], place: OnlinePolicy, order: QueueOrder, now: float,
              events: list[tuple[float, int, int]], records: list[JobRecord], result: SimResult,
              capacity: tuple[float, float], max_tries: int) -> None:
    """Offer waiting jobs to the policy. Without a completion since the last pass, the old waiting jobs
    cannot fit (nothing was freed), so only the new arrivals are offered."""
    candidates = state.queue + state.new if state.freed else state.new
    state.queue, state.new, state.freed = state.queue + state.new, [], False
    if not candidates:
        return
    shares = {u: max(state.user_gpu[u] / max(capacity[0], 1.0), state.user_cpu[u] / max(capacity[1], 1.0))
              for u in state.user_gpu}
    index = {jobs[i].job_id: i for i in candidates}
    failed_shapes: set[tuple[object, ...]] = set()
    started: set[int] = set()
    for tries, sim_job in enumerate(order([jobs[i] for i in candidates], shares)):
        if tries >= max_tries:
            state.freed = True  # not everything was offered: offer again at the next event
            break
        free = (len(state.snapshot.gpu_milli_used) * MILLI - int(state.snapshot.gpu_milli_used.sum())) / MILLI
        shape = _shape(sim_job)
        if sim_job.job.gpus > free + 1e-9 or shape in failed_shapes or not _may_fit(state.snapshot, sim_job):
            continue
        decision = place(state.snapshot, sim_job.job)
        result.decisions += 1
        if decision.allocation is None:
            failed_shapes.add(shape)  # same shape on this or a fuller snapshot: same answer
            continue
        i = index[sim_job.job_id]
        state.snapshot = apply(state.snapshot, decision.allocation)
        _account(state, sim_job, +1.0)
        records[i].start_s, records[i].end_s = now, now + sim_job.duration_s
        heapq.heappush(events, (now + sim_job.duration_s, FINISH, i))
        started.add(i)
    state.queue = [i for i in state.queue if i not in started]


def _may_fit(snapshot: ClusterSnapshot, job: SimJob) -> bool:
    """A necessary condition, cheap (a few vector operations): for every task, the allowed machines
    together have room for all its instances, counting per machine how many instances its free whole
    GPUs (or free GPU shares, GPU by GPU), CPU and memory could each hold."""
    layout = snapshot.layout
    big = np.int64(1 << 40)
    for task in job.job.tasks:
        need = need_of(task)
        if need.whole_gpus:
            room = snapshot.machine_free_whole // need.whole_gpus
        elif need.gpu_milli:
            per_gpu = (MILLI - snapshot.gpu_milli_used) // need.gpu_milli
            room = np.bincount(layout.gpu_machine, weights=per_gpu, minlength=len(layout.cpu_cap)).astype(np.int64)
        else:
            room = np.full(len(layout.cpu_cap), big)
        if need.cpu_milli:
            room = np.minimum(room, (layout.cpu_cap - snapshot.cpu_used) // need.cpu_milli)
        if need.mem_mib:
            room = np.minimum(room, (layout.mem_cap - snapshot.mem_used) // need.mem_mib)
        if task.gpu > 0 and task.gpu_types:
            room = room[type_mask_of(layout, task.gpu_types)]
        if int(np.minimum(room, task.instances).sum()) < task.instances:
            return False
    return True


def _shape(job: SimJob) -> tuple[object, ...]:
    """What decides whether a job fits (NaN-safe: ``repr`` of every task)."""
    return tuple(repr(t) for t in job.job.tasks)


def _account(state: _State, job: SimJob, sign: float) -> None:
    state.user_gpu[job.user] += sign * job.job.gpus
    state.user_cpu[job.user] += sign * sum(t.cpu_cores * t.instances for t in job.job.tasks)


def _sample(state: _State, now: float, result: SimResult) -> None:
    allocated = float(state.snapshot.gpu_milli_used.sum()) / MILLI
    result.samples.append((now, allocated, result.total_gpus - allocated, len(state.queue)))
