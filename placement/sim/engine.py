"""The event-driven replay: arrivals and completions in time order, a scheduling pass after each.

At every event time the simulator first applies completions (releasing their resources), then
arrivals, then offers the waiting jobs to the placement policy in the queue policy's order. Every
job that fits is started (later jobs may start ahead of a blocked earlier one: backfilling); the rest
wait. Every waiting job that could fit is offered: the jobs whose totals the free totals do not cover are
left out for the whole queue at once, in vector operations, again after each start, and
``placement.sim.pass_memo`` makes the rest of those that cannot start cheap to pass over. A job that
could not fit the cluster even empty is reported and dropped, never silently. The replay is
deterministic: ties break by event kind, arrival and job id; policies are seeded.

With a :class:`BatchWindow`, jobs are not placed one by one: at the end of every window of
``every_s`` seconds in which something arrived or finished, the first ``max_jobs`` waiting jobs (queue
order) that could fit the free capacity go to a batch policy (``gga``, ``cpsat``, ``ffd``) together.
A time-limited solver is reproducible only when it stops before its limit (stall, bound, optimum);
the result counts each window's stop reason.

With ``fluid``, the cluster is one pool of GPU, CPU and memory capacity: a job starts when the free
totals cover its totals, wherever its instances would go, and no GPU is ever fragmented (the single big
node of the PAI trace's own simulator, which pools shares of GPUs into one count). Placement is not
consulted; jobs run for their trace durations.

Time-weighted series are kept for the metrics (``placement.sim.metrics``): allocated GPUs, and free
GPUs while at least one job waits (free but unusable capacity: fragmentation).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from placement.batch.policies import batch_policy
from placement.filters import FILTERS, GPU_RULES
from placement.filters.base import SnapshotUsage, usage_of
from placement.filters.chain import room_bound
from placement.model.cluster import Cluster
from placement.model.demand import Task
from placement.model.feasibility import Need, need_of
from placement.model.snapshot import MILLI, Allocation, ClusterSnapshot, Layout, apply, release
from placement.online.greedy import PlacementConfig, fits_by_room
from placement.online.policies import LEARNING, OnlinePolicy, online_policy
from placement.sim.jobs import SimJob
from placement.sim.pass_memo import PassMemo, Sizes
from placement.sim.queues import QueuePolicy, WaitingQueue
from placement.sim.runtime import Runtime, TraceRuntime
from placement.sim.share_room import ShareRoom

FINISH, ARRIVE, TICK = 0, 1, 2
Event = tuple[float, int, int, int]
"""(time, kind, job index, version of the job's end it announces)."""


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
    lost_type_s: float = 0.0
    lost_spread_s: float = 0.0
    lost_share_s: float = 0.0
    """Seconds lost against the job's reference placement, by cause (``placement.sim.runtime``)."""


@dataclass(frozen=True)
class BatchWindow:
    """Batch scheduling: every ``every_s`` seconds hand up to ``max_jobs`` waiting jobs to ``policy``."""

    policy: str = "gga"
    every_s: float = 60.0
    time_limit_s: float = 1.0
    max_jobs: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        batch_policy(self.policy)  # KeyError naming the known ones
        if not (self.every_s > 0 and self.time_limit_s > 0 and self.max_jobs >= 1):
            raise ValueError("a batch window needs every_s > 0, time_limit_s > 0 and max_jobs >= 1")


@dataclass
class SimResult:
    records: list[JobRecord]
    samples: list[tuple[float, float, float, int]] = field(default_factory=list)
    """(time, allocated GPUs, free GPUs, waiting jobs) after each event time."""
    total_gpus: float = 0.0
    decisions: int = 0
    batch_stops: Counter[str] = field(default_factory=Counter)
    """Batch windows by how their solver stopped ("stall", "time", "optimal", ...)."""
    runtime: str = "trace"


@dataclass(frozen=True)
class _Demand:
    """What one job needs in total (integer units), its per-task needs and its shape."""

    gpu_milli: int
    whole_gpus: int
    cpu_milli: int
    mem_mib: int
    needs: tuple[Need, ...]
    shape: tuple[str, ...]
    gpu_part: tuple[tuple[int, int, int, tuple[str, ...]], ...]
    """Per task: whole GPUs, GPU share (milli) and instances, allowed types."""
    sizes: Sizes

    largest_share: int
    """The largest share of one GPU an instance asks for (milli; 0 for none)."""

    @staticmethod
    def of(job: SimJob) -> _Demand:
        tasks = job.job.tasks
        needs = tuple(need_of(t) for t in tasks)
        gpu = cpu = mem = whole = share = 0
        for n, t in zip(needs, tasks, strict=True):  # one pass: 20,000 jobs are set up before a replay
            gpu += (n.whole_gpus * MILLI or n.gpu_milli) * t.instances
            cpu += n.cpu_milli * t.instances
            mem += n.mem_mib * t.instances
            whole += n.whole_gpus * t.instances
            if not n.whole_gpus:
                share = max(share, n.gpu_milli)
        gpu_part = tuple((n.whole_gpus, n.gpu_milli, t.instances, tuple(sorted(t.gpu_types)) if t.gpu else ())
                         for n, t in zip(needs, tasks, strict=True))
        return _Demand(gpu, whole, cpu, mem, needs, tuple(repr(t) for t in tasks),  # repr: NaN-safe key
                       gpu_part, tuple((n.cpu_milli, n.mem_mib) for n in needs), share)


@dataclass
class _State:
    snapshot: ClusterSnapshot
    waiting: WaitingQueue
    free: list[int]
    """Free GPU milli, CPU milli and memory MiB of the whole cluster."""
    runtime: Runtime
    version: list[int]
    """Per job, the version of its end event now due: an end moved by a neighbour leaves a stale one."""
    new: list[int] = field(default_factory=list)
    freed: bool = False
    tick_pending: bool = False
    free_whole: tuple[int, int, int] = (-1, 0, 0)
    """(generation, completely free GPUs in the cluster, the most free milli of one GPU) of the last snapshot
    asked about."""
    usage: SnapshotUsage | None = None
    """The filters' view of ``snapshot`` (``_usage``)."""
    user_gpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    user_cpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    fits_empty: dict[tuple[str, ...], tuple[str, ...] | None] = field(default_factory=dict)
    fluid: bool = False
    """One pool of capacity, no placement (see the module's notes)."""
    learning: bool = False
    """Whether the placement policy learns from the jobs it is asked about (then it is asked whether a new shape
    fits the empty cluster, as before, rather than told by the filters)."""
    totals: np.ndarray = field(default_factory=lambda: np.zeros((5, 0), dtype=np.int64))
    """Per job (columns), its GPU milli, CPU milli, memory MiB, whole GPUs and largest share of one GPU (these
    two 0 on a fluid cluster): the free-totals check of a whole queue at once."""
    asked: tuple[int, ...] = ()
    """The rows of ``totals`` some job asks for (more than 0 of), in order: the others never need comparing."""
    asked_totals: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    """Those rows of ``totals`` alone, contiguous: what :func:`_covers` gathers from."""
    asked_rows: list[tuple[int, ...]] = field(default_factory=list)
    """Per job, its column of ``asked_totals`` in Python integers (:func:`_covers_one`)."""
    changes: int = 0
    """Starts and ends so far (:func:`_account`): the free totals, and the snapshot on a discrete cluster, change
    with each and only then."""
    free_asked: tuple[int, tuple[list[int], np.ndarray]] = (-1, ([], np.zeros((0, 1), dtype=np.int64)))
    """(``changes``, :func:`_free_asked` then)."""
    share_room: ShareRoom | None = None
    """The GPUs' room for the shares of jobs of many shares (``placement.sim.share_room``; none on a fluid
    cluster)."""


def simulate(cluster: Cluster, jobs: Sequence[SimJob], policy: str, queue: QueuePolicy,
             config: PlacementConfig | None = None, progress: Callable[[int], None] | None = None,
             batch: BatchWindow | None = None,
             runtime: Callable[[Sequence[SimJob], Layout], Runtime] | None = None,
             fluid: bool = False) -> SimResult:
    """Replay ``jobs`` on ``cluster`` with online placement ``policy`` and the order of ``queue``
    (with ``batch``, placement by a batch policy at window ends instead). ``runtime`` makes the
    runtime that says how long a started job runs (default: its trace duration). ``fluid``: the
    cluster's capacity as one pool, no placement (module notes); it takes neither a batch window nor a
    runtime, which both need placements."""
    if fluid and (batch is not None or runtime is not None):
        raise ValueError("a fluid cluster places nothing: it takes neither a batch window nor a runtime")
    place = online_policy(policy, config, explain=False)
    explained = online_policy(policy, config)
    records = [JobRecord(j.job_id, j.user, j.submit_s, j.duration_s, j.job.gpus) for j in jobs]
    by_tasks: dict[tuple[Task, ...], _Demand] = {}  # jobs alike share one (a NaN's identity aside: worked out again)
    demands = [by_tasks.get(j.job.tasks) or by_tasks.setdefault(j.job.tasks, _Demand.of(j)) for j in jobs]
    empty = ClusterSnapshot.empty(cluster)
    layout = empty.layout
    runs = runtime(jobs, layout) if runtime is not None else TraceRuntime(jobs)
    state = _State(empty, queue.new_queue(), [len(layout.gpu_machine) * MILLI, int(layout.cpu_cap.sum()),
                                              int(layout.mem_cap.sum())], runs, [0] * len(jobs), fluid=fluid,
                   totals=np.array([[d.gpu_milli, d.cpu_milli, d.mem_mib, *((0, 0) if fluid else
                                                                               (d.whole_gpus, d.largest_share))]
                                    for d in demands], dtype=np.int64).reshape(-1, 5).T.copy(),
                   share_room=None if fluid else ShareRoom([_one_task(j, d)
                                                            for j, d in zip(jobs, demands, strict=True)]))
    state.learning = policy in LEARNING
    state.asked = tuple(np.flatnonzero(state.totals.any(axis=1)).tolist())
    state.asked_totals = np.ascontiguousarray(state.totals[list(state.asked)])
    state.asked_rows = [tuple(column) for column in state.asked_totals.T.tolist()]
    result = SimResult(records, total_gpus=float(cluster.total_gpus), runtime=runs.name)
    events = [(j.submit_s, ARRIVE, i, 0) for i, j in enumerate(jobs)]
    heapq.heapify(events)
    capacity = (float(cluster.total_gpus), float(sum(m.cpu_cores for m in cluster.machines)))
    seen = 0
    while events:
        now = events[0][0]
        tick = False
        while events and events[0][0] == now:
            _, kind, i, version = heapq.heappop(events)
            if kind == FINISH:
                if version != state.version[i]:
                    continue  # its end moved since this event was due
                if not fluid:
                    state.snapshot = release(state.snapshot, jobs[i].job_id)
                _account(state, jobs[i], demands[i], -1)
                state.freed = True
                _finish(state, i, now, events, records)
            elif kind == ARRIVE:
                _arrive(state, jobs[i], i, demands[i], place, explained, empty, records)
                seen += 1
                if progress is not None:
                    progress(seen)
            else:
                tick, state.tick_pending = True, False
        shares = ({u: max(state.user_gpu[u] / max(capacity[0], 1.0), state.user_cpu[u] / max(capacity[1], 1.0))
                   for u in state.user_gpu} if queue.uses_shares else {})
        if fluid:
            _schedule_fluid(state, jobs, demands, now, events, records, result, shares)
        elif batch is None:
            _schedule(state, jobs, demands, place, now, events, records, result, shares)
        elif tick:  # the window sees every arrival and completion so far
            state.new, state.freed = [], False
            _batch(state, jobs, demands, batch, now, events, records, result, shares)
        if batch is not None and len(state.waiting) and not state.tick_pending and (state.new or state.freed):
            state.new, state.freed, state.tick_pending = [], False, True
            heapq.heappush(events, (math.ceil(now / batch.every_s) * batch.every_s, TICK, -1, 0))
        _sample(state, now, result)
    return result


def _arrive(state: _State, job: SimJob, i: int, demand: _Demand, place: OnlinePolicy, explained: OnlinePolicy,
            empty: ClusterSnapshot, records: list[JobRecord]) -> None:
    if demand.shape not in state.fits_empty:  # can it fit the cluster at all? once per job shape
        if state.fluid:
            state.fits_empty[demand.shape] = _beyond_pool(demand, empty.layout)
        else:
            known = None if state.learning else fits_by_room(empty, job.job)  # a learning policy learns from it
            fits = known if known is not None else place(empty, job.job).allocation is not None
            state.fits_empty[demand.shape] = None if fits else explained(empty, job.job).reasons
    reasons = state.fits_empty[demand.shape]
    if reasons is not None:
        records[i].never_fits, records[i].reasons = True, reasons
    else:
        state.waiting.add(i, job)
        state.new.append(i)


def _could_start(state: _State, job: SimJob, demand: _Demand) -> bool:
    """Necessary: the cluster's free totals (and its completely free GPUs) cover the job, and
    :func:`_may_fit`."""
    free = state.free
    if demand.gpu_milli > free[0] or demand.cpu_milli > free[1] or demand.mem_mib > free[2]:
        return False
    if demand.whole_gpus and demand.whole_gpus > _free_whole(state):
        return False
    return _may_fit(state, job, demand)


def _free_whole(state: _State) -> int:
    """Completely free GPUs in the cluster now (and, kept beside, the most free milli of one GPU)."""
    snapshot = state.snapshot
    if state.free_whole[0] != snapshot.generation:
        most = MILLI - int(snapshot.gpu_milli_used.min()) if len(snapshot.gpu_milli_used) else 0
        state.free_whole = (snapshot.generation, int(snapshot.machine_free_whole.sum()), most)
    return state.free_whole[1]


def _one_task(job: SimJob, demand: _Demand) -> tuple[Need, int, bool]:
    """A job's demand for :class:`ShareRoom`: its one task's demand, instances and whether it accepts any GPU type
    (a job of several tasks is not checked there: no instances)."""
    tasks = job.job.tasks
    return (demand.needs[0], tasks[0].instances, not tasks[0].gpu_types) if len(tasks) == 1 else \
        (demand.needs[0], 0, False)


def _schedule(state: _State, jobs: Sequence[SimJob], demands: Sequence[_Demand], place: OnlinePolicy, now: float,
              events: list[Event], records: list[JobRecord], result: SimResult,
              shares: dict[str, float]) -> None:
    """Offer every waiting job to the policy that could start. Without a completion since the last pass,
    the old waiting jobs cannot fit (nothing was freed), so only the new arrivals are offered."""
    if not state.freed and not state.new:
        return
    offer = _offer(state, shares) if state.freed else _covered(state, state.waiting.order_of(state.new, shares))
    state.new, state.freed = [], False
    memo = PassMemo()
    for i in _while_covered(state, offer):
        demand = demands[i]
        if memo.known_to_fail(demand.gpu_part, demand.sizes, demand.shape):
            continue
        # Asked first: most jobs a pass offers start (the free totals and whole GPUs cover them, _while_covered),
        # and the policy fails a job its necessary check (_may_fit) rules out, on the same snapshot. So the check
        # runs only on a refusal, to say what the memo may generalise, and the pass learns what it learnt before.
        decision = place(state.snapshot, jobs[i].job)
        result.decisions += 1
        if decision.allocation is None:
            if _may_fit(state, jobs[i], demand):
                memo.refused(demand.shape)
                continue
            if demand.gpu_part not in memo.gpu_checked:  # is it the GPUs? then every job of that GPU part waits
                memo.gpu_checked[demand.gpu_part] = _may_fit(state, jobs[i], demand, gpu_only=True)
            memo.could_not_start(demand.gpu_part, demand.sizes)
            continue
        _start(state, jobs, demands, i, decision.allocation, now, events, records)


def _schedule_fluid(state: _State, jobs: Sequence[SimJob], demands: Sequence[_Demand], now: float,
                    events: list[Event], records: list[JobRecord], result: SimResult,
                    shares: dict[str, float]) -> None:
    """A pass over one pool: every waiting job whose totals the free totals cover starts, in queue order."""
    if not state.freed and not state.new:
        return
    offer = _offer(state, shares) if state.freed else _covered(state, state.waiting.order_of(state.new, shares))
    state.new, state.freed = [], False
    for i in _while_covered(state, offer):  # each one the free totals cover when it comes
        demand = demands[i]
        result.decisions += 1
        state.waiting.remove(i)
        _account(state, jobs[i], demand, +1)
        records[i].start_s = now
        _due(state, [(i, now + jobs[i].duration_s)], events, records)  # the trace runtime: no placement to slow it


def _while_covered(state: _State, offer: np.ndarray) -> Iterator[int]:
    """``offer`` in order, less every job whose totals the free totals no longer cover once a job has started.

    After a start each next job is checked alone (:func:`_covers_one`, a few integer comparisons) until one is not
    covered; then the rest of the offer is checked at once and every job no longer covered dropped. Within a pass
    the cluster only fills, so a job checked at its own turn gets the answer a check of the whole rest right after
    the last start would have given it: the same jobs come out, with a vector check only where a start left a job
    uncovered, not after every start (a pass that starts jobs one after the other checked the whole rest each
    time). Kept as an array: a pass with thousands offered would spend more on converting the rest to a list and
    back than on checking it."""
    pending = offer
    at, checked = 0, state.changes
    while at < len(pending):
        i = int(pending[at])
        if state.changes != checked and not _covers_one(state, i):
            checked, pending, at = state.changes, _covering(state, pending[at:]), 0
            continue
        yield i
        at += 1


def _covered(state: _State, indices: Sequence[int] | np.ndarray) -> np.ndarray:
    """``indices``, in their order, less the jobs that cannot start now (:func:`_may_start`)."""
    found = np.asarray(indices, dtype=np.int64)
    kept: np.ndarray = found[_may_start(state, found)]
    return kept


def _may_start(state: _State, jobs: np.ndarray) -> np.ndarray:
    """Whether the free totals cover each of ``jobs`` (indices) and the GPUs could take its shares
    (:class:`ShareRoom`): what a pass checks of its offer at once. After each start only the totals are checked
    again (:func:`_covering`): the room changes with every start, and counting it then cost more than it saved."""
    found = _covers(state, jobs)
    if state.share_room is not None and state.share_room.checks:
        found &= state.share_room.covers(state.snapshot, jobs)
    return found


def _covering(state: _State, indices: np.ndarray) -> np.ndarray:
    """``indices``, in their order, less the jobs whose totals the free totals do not cover (after a start)."""
    found: np.ndarray = indices[_covers(state, indices)]
    return found


def _covers(state: _State, jobs: np.ndarray) -> np.ndarray:
    """Whether the free totals cover each of ``jobs`` (indices), on the totals some job asks for (a replay without
    memory demands never compares memory): the jobs' columns gathered in one call and compared at once. A pass
    asks this of a few hundred jobs thousands of times, so the number of numpy calls, not their size, is the cost."""
    return np.asarray((state.asked_totals.take(jobs, axis=1) <= _free_asked(state)[1]).all(axis=0))


def _covers_one(state: _State, i: int) -> bool:
    """:func:`_covers` of the one job ``i``, in Python integers."""
    return all(need <= free for need, free in zip(state.asked_rows[i], _free_asked(state)[0], strict=True))


def _free_asked(state: _State) -> tuple[list[int], np.ndarray]:
    """The free totals now, on the rows of ``totals`` some job asks for (``_State.asked``), as Python integers and as
    a column; kept while no job starts or ends (a pass asks after every job it offers)."""
    if state.free_asked[0] != state.changes:
        on_gpus = not state.fluid and bool(state.asked) and state.asked[-1] >= len(state.free)
        every = [*state.free, _free_whole(state), state.free_whole[2]] if on_gpus else state.free
        free = [every[row] for row in state.asked]
        state.free_asked = (state.changes, (free, np.array(free, dtype=np.int64).reshape(-1, 1)))
    return state.free_asked[1]


def _offer(state: _State, shares: dict[str, float]) -> np.ndarray:
    """The waiting jobs whose totals (and whole GPUs) the free totals cover, in queue order: every job that may
    start in a pass (within a pass the cluster only fills), found for the whole queue in a few vector
    operations."""
    return state.waiting.among(partial(_may_start, state), shares)


def _beyond_pool(demand: _Demand, layout: Layout) -> tuple[str, ...] | None:
    """Why a job's totals exceed the whole pool (None: they do not)."""
    reasons = tuple(f"needs {need / MILLI:g} {what}, the cluster has {have / MILLI:g}"
                    for what, need, have in (("GPUs", demand.gpu_milli, len(layout.gpu_machine) * MILLI),
                                             ("CPU cores", demand.cpu_milli, int(layout.cpu_cap.sum())))
                    if need > have)
    if demand.mem_mib > int(layout.mem_cap.sum()):
        reasons += (f"needs {demand.mem_mib:,} MiB of memory, the cluster has {int(layout.mem_cap.sum()):,}",)
    return reasons or None


def _batch(state: _State, jobs: Sequence[SimJob], demands: Sequence[_Demand], window: BatchWindow, now: float,
           events: list[Event], records: list[JobRecord], result: SimResult,
           shares: dict[str, float]) -> None:
    """One batch window: the first ``max_jobs`` waiting jobs that could start go to the batch policy."""
    chosen: list[int] = []
    for i in state.waiting.ordered(shares):
        if _could_start(state, jobs[i], demands[i]):
            chosen.append(i)
            if len(chosen) == window.max_jobs:
                break
    if not chosen:
        return
    decided = batch_policy(window.policy)(state.snapshot, [jobs[i].job for i in chosen], window.time_limit_s,
                                          window.seed)
    result.decisions += len(chosen)
    result.batch_stops[decided.stopped] += 1
    index = {jobs[i].job_id: i for i in chosen}
    allocations = {d.job_id: d.allocation for d in decided.decisions if d.allocation is not None}
    for job_id in decided.applied_order:
        _start(state, jobs, demands, index[job_id], allocations[job_id], now, events, records)


def _start(state: _State, jobs: Sequence[SimJob], demands: Sequence[_Demand], i: int, allocation: Allocation,
           now: float, events: list[Event], records: list[JobRecord]) -> None:
    state.snapshot = apply(state.snapshot, allocation)
    state.waiting.remove(i)
    _account(state, jobs[i], demands[i], +1)
    records[i].start_s = now
    _due(state, state.runtime.start(i, allocation, now), events, records)


def _finish(state: _State, i: int, now: float, events: list[Event], records: list[JobRecord]) -> None:
    """Book a job's end; the jobs it shared GPUs with get new end times."""
    records[i].end_s = now
    moved = state.runtime.finish(i, now)
    lost = state.runtime.lost(i)
    records[i].lost_type_s, records[i].lost_spread_s, records[i].lost_share_s = lost.type_s, lost.spread_s, \
        lost.share_s
    _due(state, moved, events, records)


def _due(state: _State, ends: list[tuple[int, float]], events: list[Event], records: list[JobRecord]) -> None:
    for j, end in ends:
        state.version[j] += 1
        records[j].end_s = end
        heapq.heappush(events, (end, FINISH, j, state.version[j]))


def _may_fit(state: _State, job: SimJob, demand: _Demand, gpu_only: bool = False) -> bool:
    """A necessary condition, cheap (a few vector operations): for every task, the allowed machines
    together have room for all its instances, counting per machine how many instances the filters'
    room bounds (``placement.filters``) let it take: by its free whole GPUs (or free GPU shares, GPU by
    GPU), CPU and memory (unless ``gpu_only``), on the task's GPU types."""
    usage = _usage(state)
    rules: Iterable[str] = GPU_RULES if gpu_only else FILTERS
    for task, need in zip(job.job.tasks, demand.needs, strict=True):
        room = room_bound(usage, need, rules)
        if room is None:  # nothing limits it: any machine takes all its instances
            if not len(usage.cpu):
                return False
            continue
        if int(np.minimum(room, task.instances).sum()) < task.instances:
            return False
    return True


def _usage(state: _State) -> SnapshotUsage:
    """The usage of the current snapshot, which keeps what the filters work out from it (the room for
    each GPU share) until the snapshot changes."""
    if state.usage is None or state.usage.snapshot is not state.snapshot:
        state.usage = usage_of(state.snapshot)
    return state.usage


def _account(state: _State, job: SimJob, demand: _Demand, sign: int) -> None:
    state.user_gpu[job.user] += sign * job.job.gpus
    state.user_cpu[job.user] += sign * sum(t.cpu_cores * t.instances for t in job.job.tasks)
    state.free[0] -= sign * demand.gpu_milli
    state.free[1] -= sign * demand.cpu_milli
    state.free[2] -= sign * demand.mem_mib
    state.changes += 1


def _sample(state: _State, now: float, result: SimResult) -> None:
    allocated = result.total_gpus - state.free[0] / MILLI  # the free totals are kept for fluid clusters too
    result.samples.append((now, allocated, result.total_gpus - allocated, len(state.waiting)))
