"""The scheduling cycle: every placement, release and completion of a process goes through it.

A request hands its ops to the cycle and awaits their results; the event loop goes on serving others.
Each cycle takes every op waiting (up to ``max_batch``) and:

1. takes the snapshot this process holds (:meth:`Store.cached`; no database read);
2. decides the placements on it, in order, each on the state with the earlier ops applied, outside
   the store's transaction (the policy is the slow part);
3. writes them through the store's one write path, on condition that the state is still the one
   they were decided on. If another process wrote in between, nothing is written and the write hands
   back the state as committed: the cycle decides again on it (optimistic concurrency). After
   ``max_moves`` such retries in a row it lets the write decide on the locked state itself, so that a
   process always gets its turn however busy the others are.

A cycle that stored a change the queues care about (a job submitted, ended, cancelled; new queues or
a new cluster) while jobs are pending is followed by a scheduling pass (:func:`schedule_pass`), before
its answers are sent: ``placement.schedule`` decides on the state and the queues as committed, outside
any transaction, and its plan (preemptions, starts) is written only on the generation it was decided
on, as placements are; a submitted job that the pass started is answered as running. Nothing polls:
besides these changes, only the time the last plan names wakes a pass (a timer: a reservation coming due,
or a waiting job reaching the wait after which it may start opportunistically), and an empty group asks
for one (:meth:`Cycle.wake`).

While other processes write as busily as this one (a cycle found the state moved, or found their
writes when it wrote), the next cycles let the write decide on the locked state straight away:
deciding ahead would mostly be decided again, and the moves would cost more placements than deciding
ahead saves. After ``QUIET_CYCLES`` cycles in a row that find nobody else wrote, the cycles decide
ahead again.

An op of a group (:meth:`Cycle.run_all`, e.g. a batch placement) is written in the same transaction as
the rest of its group. Each answer is given only after the transaction that stored it has committed,
so an acknowledged placement is durable. A policy that raises fails its own group alone; a database
error fails a whole transaction, and the cycle then writes that cycle's groups one by one, so that
only the group that cannot be stored fails. A group whose request has gone before its cycle started
is dropped.

Where the cycles run depends on the store (``on_loop``; default: on the loop when its commits are
local, as SQLite's are):

* **On the event loop** (:mod:`service.loop_batch`). The ops asked during one pass of the loop are
  decided and committed at the start of the next pass, as predictions are batched. No thread
  hand-offs: with a writer thread, the loop and the writer traded the GIL on every database and numpy
  call, which cost more than a local commit on the loop.
* **In a thread of its own** (PostgreSQL: every statement is a round trip and the commit waits for the
  server's log flush; on the loop, those waits would stall every request). The answers of a cycle
  reach the event loop in one wake-up.

What each choice measured is in ``docs/service.md`` (Performance).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from placement import ClusterSnapshot, Plan, apply, at_generation, release
from service.loop_batch import LoopBatcher, settle
from service.store import (
    RUNNING,
    Cancel,
    Cancelled,
    Decide,
    End,
    Ended,
    Moved,
    Op,
    Place,
    QueuesSet,
    Refused,
    Replaced,
    Result,
    Schedule,
    Scheduled,
    SetQueues,
    Store,
    Submit,
    Submitted,
)

log = logging.getLogger(__name__)
MAX_MOVES = 2
"""Retries on a fresh snapshot before a write decides on the locked state itself."""
QUIET_CYCLES = 16
"""Cycles in a row without another process's writes before a crowded process decides ahead again."""
Outcome = list[Result] | BaseException
"""What a group came to: a result per op, or the exception that failed it."""
_Item = tuple[list[Op], asyncio.AbstractEventLoop, "asyncio.Future[list[Result]]"]
_Settled = tuple["asyncio.Future[list[Result]]", Outcome]


def decide(snapshot: ClusterSnapshot,
           groups: Sequence[Sequence[Op]]) -> tuple[list[list[Op] | BaseException], ClusterSnapshot | None]:
    """Each group's placements decided on ``snapshot``, in order, with the earlier ops applied: per group
    the ops with their decisions, or the exception that failed the group (its ops are then left out, as if
    it had not been asked); and the state they come to (``None`` if no placement was decided: the write
    works it out). A placement of a job already running or placed earlier is left undecided (the write
    refuses it), as is every op after a cluster spec is replaced (the write decides those)."""
    out: list[list[Op] | BaseException] = []
    base, placed, ending, deciding, decided = snapshot, set[str](), list[str](), True, False
    for group in groups:
        before, ended_before, ops, mine = base, list(ending), list[Op](), list[str]()
        try:
            for op in group:
                if isinstance(op, Place) and deciding:
                    base, ending = _released(base, ending), []
                    job_id = op.job.job_id
                    if job_id in base.allocations or job_id in placed or job_id in mine:
                        ops.append(Place(op.job, op.policy, op.details))
                        continue
                    decision = op.policy(base, op.job)
                    ops.append(Place(op.job, op.policy, op.details, decision))
                    if decision.allocation is not None:
                        base = apply(base, decision.allocation)
                        mine.append(job_id)
                elif isinstance(op, End) and deciding:
                    ending.append(op.job_id)  # released when a later placement needs the state
                    ops.append(op)
                elif isinstance(op, Submit | Cancel | SetQueues) and deciding:
                    # the generation moves, the usage does not (a refused one moves nothing: the
                    # decisions after it are made again in the write)
                    base, ending = _released(base, ending), []
                    base = at_generation(base, base.generation + 1)
                    ops.append(op)
                else:
                    deciding = False
                    ops.append(Place(op.job, op.policy, op.details) if isinstance(op, Place) else op)
        except Exception as exc:  # this group's alone: the others go on, as if it had not been asked
            base, ending = before, ended_before
            out.append(exc)
            continue
        placed.update(mine)
        decided = decided or any(isinstance(op, Place) and op.decision is not None for op in ops)
        out.append(ops)
    return out, _released(base, ending) if decided else None


def _released(snapshot: ClusterSnapshot, job_ids: list[str]) -> ClusterSnapshot:
    for job_id in job_ids:
        snapshot = release(snapshot, job_id)
    return snapshot


@dataclass(frozen=True)
class Turn:
    """What one cycle came to: per group its results, or the exception that failed it; how many times
    the state moved underneath; whether another process wrote while it ran."""

    outcomes: list[Outcome]
    moves: int
    crowded: bool
    pending: int = 0
    """Jobs pending once it was written."""


def cycle(store: Store, groups: Sequence[Sequence[Op]], ahead: bool = True, max_moves: int = MAX_MOVES) -> Turn:
    """One cycle over ``groups`` (see module docstring); ``ahead``: decide before the transaction (else
    the write decides on the locked state). A database error is raised (nothing of the cycle is stored)."""
    snapshot, moves = store.cached(), 0
    while True:
        if ahead and moves <= max_moves:
            decided, after = decide(snapshot, groups)
        else:
            decided, after = [list(g) for g in groups], None
        ops = [op for group in decided if not isinstance(group, BaseException) for op in group]
        written = store.write(ops) if after is None else store.write(ops, snapshot.generation, after)
        if not isinstance(written, Moved):
            break
        snapshot, moves = written.snapshot, moves + 1
    changed = sum(not isinstance(result, Refused) for result in written.results)  # each moved it by one
    crowded = moves > 0 or written.snapshot.generation != snapshot.generation + changed
    results, out = iter(written.results), list[Outcome]()
    for group in decided:
        out.append(group if isinstance(group, BaseException) else [next(results) for _ in group])
    return Turn(out, moves, crowded, written.pending)


_WAKES = (Submitted, Ended, Cancelled, QueuesSet, Replaced)
"""Results after which pending jobs may start: something was queued, freed, or reconfigured."""


def schedule_pass(store: Store, decide: Decide, max_moves: int = MAX_MOVES) -> Scheduled:
    """One scheduling pass: ``decide`` on the state and queues as committed, outside the transaction, and
    the plan written only on the generation it was decided on; if another process wrote in between,
    decided again on the state as committed, and after ``max_moves`` such moves in the write itself. A
    plan that changes nothing is not written."""
    moves = 0
    while True:
        if moves <= max_moves:
            snapshot, queued = store.queued()
            plan = decide(snapshot, queued)
            if not (plan.starts or plan.preemptions or plan.upgrades):
                return Scheduled(plan, (), ())
            written = store.write([Schedule(decide, plan)], plan.generation)
        else:
            written = store.write([Schedule(decide)])
        if not isinstance(written, Moved):
            result = written.results[0]
            assert isinstance(result, Scheduled), f"a scheduling pass came to {result!r}"
            return result
        moves += 1


def _answered_as_started(outcomes: list[Outcome], started: set[str]) -> list[Outcome]:
    """A submitted job that the pass of its own cycle started is answered as running."""
    if not started:
        return outcomes
    return [o if isinstance(o, BaseException) else
            [replace(r, state=RUNNING) if isinstance(r, Submitted) and r.job_id in started else r for r in o]
            for o in outcomes]


def run_cycle(store: Store, ops: Sequence[Op]) -> list[Result]:
    """``ops`` as one group through one cycle, now, in this thread (for tools and tests; the service
    queues its ops on a :class:`Cycle`)."""
    outcome = cycle(store, [ops]).outcomes[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


class Cycle:
    """The cycles of one process over ``store`` (see module docstring)."""

    def __init__(self, store: Store, max_batch: int = 64, on_loop: bool | None = None,
                 decide: Decide | None = None) -> None:
        self.store, self.max_batch, self.decide = store, max_batch, decide
        self.preemptions: Counter[tuple[str, str]] = Counter()
        """Jobs this process's passes preempted, by queue and reason."""
        self.due: float | None = None
        """When time alone may change the next pass's decisions (Unix s; ``Plan.wake_s`` of the last plan)."""
        self._timer: asyncio.TimerHandle | None = None
        self._woken: asyncio.Task[None] | None = None
        self.on_loop = store.fast_commits if on_loop is None else on_loop
        self._on_loop: LoopBatcher[list[Op], list[Result]] = LoopBatcher(self._outcomes, take=self._taken)
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.batches = self.ops = self.moves = 0
        self.quiet = QUIET_CYCLES
        """Cycles in a row in which no other process wrote; under ``QUIET_CYCLES``, the write decides."""

    async def run(self, op: Op) -> Result:
        """``op``'s result, once committed; an exception of its own (a policy's) or of the database is raised."""
        return (await self.run_all([op]))[0]

    async def wake(self) -> None:
        """A scheduling pass (in the next cycle), as after a change the cycle did not see (a cluster
        spec loaded directly through the store)."""
        await self.run_all([])

    async def run_all(self, ops: Sequence[Op]) -> list[Result]:
        """The results of ``ops``, decided in order and written in one transaction."""
        try:
            return await self._run_all(ops)
        finally:
            self._arm()

    def _arm(self) -> None:
        """A timer for the time the last plan said a pass may decide differently (``due``), if none is set."""
        due = self.due
        if due is None or (self._timer is not None and not self._timer.cancelled()):
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timer, self.due = None, None
            self._woken = loop.create_task(self.wake())

        self._timer = loop.call_later(max(due - time.time(), 0.0), fire)

    async def _run_all(self, ops: Sequence[Op]) -> list[Result]:
        if self.on_loop:
            return await self._on_loop.submit(list(ops))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Result]] = loop.create_future()
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="state-cycle", daemon=True)
                    self._thread.start()
        self._queue.put((list(ops), loop, future))
        return await future

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _taken(self, groups: Sequence[Sequence[Op]]) -> int:
        """How many of ``groups`` the next cycle takes: up to ``max_batch`` ops, at least one group."""
        count = taken = 0
        while taken < len(groups) and (taken == 0 or count + len(groups[taken]) <= self.max_batch):
            count += len(groups[taken])
            taken += 1
        return taken

    def _run(self) -> None:
        """The cycle thread: one cycle over the ops waiting, the answers sent to each loop in one wake-up."""
        waiting: list[_Item] = []
        while True:
            if not waiting:
                item = self._queue.get()
                if item is None:  # stop
                    return
                waiting.append(item)
            stop = self._drain(waiting)
            taken = self._taken([ops for ops, _, _ in waiting])
            batch, waiting = waiting[:taken], waiting[taken:]
            live = [b for b in batch if not b[2].cancelled()]
            if live:
                self._answer(live, self._outcomes([ops for ops, _, _ in live]))
            if stop:
                self._queue.put(None)

    def _drain(self, waiting: list[_Item]) -> bool:
        """Move every op queued now to ``waiting``; whether a stop was queued among them."""
        while True:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                return False
            if more is None:
                return True
            waiting.append(more)

    @staticmethod
    def _answer(batch: list[_Item], outcomes: list[Outcome]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Settled]] = defaultdict(list)
        for (_, loop, future), outcome in zip(batch, outcomes, strict=True):
            by_loop[loop].append((future, outcome))
        for loop, answers in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody is waiting
                loop.call_soon_threadsafe(settle, answers)

    def _outcomes(self, groups: list[list[Op]]) -> list[Outcome]:
        """One cycle over ``groups``; if its transaction fails, one cycle per group."""
        self.batches += 1
        self.ops += sum(len(ops) for ops in groups)
        try:
            turn = cycle(self.store, groups, ahead=self.quiet >= QUIET_CYCLES)
        except Exception as exc:
            if len(groups) == 1:
                return [exc]
            log.warning("a cycle's transaction failed; writing its groups one by one", extra={"error": str(exc)})
            return [outcome for group in groups for outcome in self._outcomes([group])]
        self.moves, self.quiet = self.moves + turn.moves, 0 if turn.crowded else self.quiet + 1
        if self.decide is None or turn.pending <= 0 or not self._wakes(groups, turn.outcomes):
            return turn.outcomes
        try:
            scheduled = schedule_pass(self.store, self.decide)
        except Exception:  # what the cycle wrote is committed: its answers go out; the next change tries again
            log.exception("a scheduling pass failed")
            return turn.outcomes
        self._planned(scheduled.plan)
        return _answered_as_started(turn.outcomes, set(scheduled.started))

    @staticmethod
    def _wakes(groups: list[list[Op]], outcomes: list[Outcome]) -> bool:
        if any(not group for group in groups):
            return True
        return any(isinstance(r, _WAKES) for o in outcomes if not isinstance(o, BaseException) for r in o)

    def _planned(self, plan: Plan) -> None:
        for preemption in plan.preemptions:
            self.preemptions[(preemption.queue, preemption.reason.value)] += 1
        self.due = plan.wake_s
