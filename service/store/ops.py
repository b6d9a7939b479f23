"""What a write is made of and what it comes to, and the store every part of the service writes through.

A write is a list of ops, applied in order in one transaction: :class:`Place` a job, :class:`End` a
running job, :class:`Replace` the cluster spec, :class:`Submit` a job to a queue, :class:`Cancel` a
pending job, :class:`SetQueues` (the queue configuration), :class:`Schedule` (a scheduling pass: its
plan's preemptions and starts). Each op comes to a typed result: :class:`Placed`, :class:`Refused`
(with its :class:`Reason`), :class:`Ended`, :class:`Replaced`, :class:`Submitted`, :class:`Cancelled`,
:class:`QueuesSet` or :class:`Scheduled`. A bug (a policy that raises, details that cannot be stored)
is an exception, raised, never a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, overload

from placement import Cluster, ClusterSnapshot, Decision, Job, JobMode, OnlinePolicy, Plan
from service.store.codec import EventRow, JobRow, Json
from service.store.queued import QueueState
from service.store.schema import COMPLETED, PENDING, RELEASED


@dataclass(frozen=True)
class Place:
    """Place ``job`` as ``policy`` decides, storing ``details`` with it.

    ``decision``: what ``policy`` decided outside the transaction, on the state of
    ``decision.generation``. The write keeps it only if it meets that very state (see
    :meth:`Store.write`); otherwise ``policy`` decides again on the state as committed."""

    job: Job
    policy: OnlinePolicy
    details: Json | None = None
    decision: Decision | None = None


@dataclass(frozen=True)
class Completion:
    """What a completed job really took: its duration and its usage (per instance)."""

    duration_s: float
    usage: Json


@dataclass(frozen=True)
class End:
    """End a running job: ``released``, or ``completed`` with what it really took."""

    job_id: str
    completion: Completion | None = None

    @property
    def state(self) -> str:
        return RELEASED if self.completion is None else COMPLETED


@dataclass(frozen=True)
class Replace:
    """Load a new cluster spec. Running jobs must fit it as they are (same machine names, GPUs and
    capacity); if some would not, it is refused unless ``force``, which evicts them."""

    cluster: Cluster
    force: bool = False


@dataclass(frozen=True)
class Submit:
    """Queue ``job`` (its ``priority`` the job's) in ``queue``: stored as pending, with ``details``, until a
    scheduling pass starts it. ``p50_s``/``p90_s``: its estimated duration (NaN where unknown)."""

    job: Job
    queue: str
    mode: JobMode = JobMode.GUARANTEED
    p50_s: float = math.nan
    p90_s: float = math.nan
    details: Json | None = None
    policy: str | None = None
    """The online placement policy that places it, by name (``None``: the service's)."""


@dataclass(frozen=True)
class Cancel:
    """Take a pending job out of its queue for good."""

    job_id: str


@dataclass(frozen=True)
class SetQueues:
    """Store the queue configuration ``spec`` (checked against the cluster by its sender)."""

    spec: Json


Decide = Callable[[ClusterSnapshot, QueueState], Plan]
"""A scheduling pass's decider: the plan for the state and the queues as committed."""


@dataclass(frozen=True)
class Schedule:
    """A scheduling pass: ``plan``, decided ahead on ``plan.generation``, or, if the state has moved or no
    plan is given, what ``decide`` makes of the state as committed. Written alone: its preemptions send
    jobs back to pending, its starts place pending jobs, its upgrades count opportunistic jobs as
    guaranteed."""

    decide: Decide
    plan: Plan | None = None


Op = Place | End | Replace | Submit | Cancel | SetQueues | Schedule


class Reason(StrEnum):
    EXISTS = "exists"
    """The job id is taken (ids are never reused)."""
    DOES_NOT_FIT = "does-not-fit"
    """The policy did not place it: the decision says why."""
    NOT_RUNNING = "not-running"
    """Nothing to end: the job is not running (never placed, or ended already)."""
    WOULD_ORPHAN = "would-orphan"
    """Running jobs would not fit the new cluster spec."""
    NOT_PENDING = "not-pending"
    """Nothing to cancel: the job is not pending (never submitted, started, or ended)."""


@dataclass(frozen=True)
class Placed:
    """The job was placed and stored: the decision, and the cluster its allocation names machines of."""

    decision: Decision
    cluster: Cluster


@dataclass(frozen=True)
class Refused:
    """Nothing stored for the op, and why; ``decision``: the policy's, for a job that does not fit."""

    reason: Reason
    detail: str
    decision: Decision | None = None


@dataclass(frozen=True)
class Ended:
    job_id: str
    state: str


@dataclass(frozen=True)
class Replaced:
    """The new spec is loaded at ``generation``; ``evicted``: the running jobs it did not hold."""

    cluster: Cluster
    evicted: tuple[str, ...]
    generation: int


@dataclass(frozen=True)
class Submitted:
    """The job is stored: ``pending``, or ``running`` when the scheduling pass of its cycle started it."""

    job_id: str
    state: str = PENDING


@dataclass(frozen=True)
class Cancelled:
    job_id: str


@dataclass(frozen=True)
class QueuesSet:
    generation: int


@dataclass(frozen=True)
class Scheduled:
    """The plan written: the jobs it started and those it sent back to pending."""

    plan: Plan
    started: tuple[str, ...]
    preempted: tuple[str, ...]


Result = Placed | Refused | Ended | Replaced | Submitted | Cancelled | QueuesSet | Scheduled


@dataclass(frozen=True)
class Written:
    """The write committed: a result per op, the state it left, and how many jobs are pending."""

    results: list[Result]
    snapshot: ClusterSnapshot
    pending: int = 0


@dataclass(frozen=True)
class Moved:
    """Nothing written: the state is no longer the one the ops were decided on. ``snapshot``: the
    state as committed now, to decide on again."""

    snapshot: ClusterSnapshot


class Store(Protocol):
    """The cluster state: snapshots to decide on, the job rows, and one way to write."""

    fast_commits: bool
    """A commit is a local write of a fraction of a millisecond (SQLite, memory), not a round trip."""

    def snapshot(self) -> ClusterSnapshot:
        """The state as committed (caught up with what other processes wrote)."""
        ...

    def cached(self) -> ClusterSnapshot:
        """The state this process last saw, without asking the database."""
        ...

    def generation(self) -> int: ...

    @overload
    def write(self, ops: Sequence[Op], decided_on: None = None, comes_to: None = None) -> Written: ...

    @overload
    def write(self, ops: Sequence[Op], decided_on: int, comes_to: ClusterSnapshot | None = None) -> Written | Moved: ...

    def write(self, ops: Sequence[Op], decided_on: int | None = None,
              comes_to: ClusterSnapshot | None = None) -> Written | Moved:
        """Apply ``ops`` in order in one transaction, on the state as committed, and store what they
        change. ``decided_on``: the generation the ops' decisions were made on; if the state has moved
        on since, nothing is written (:class:`Moved`). Without it, every placement is decided in the
        transaction. ``comes_to``: the state the decisions come to, as their decider computed it; the
        state after the write if every op comes to what was decided (else computed again). A database
        error stores nothing of the write and is raised."""
        ...

    def exists(self, job_id: str) -> bool: ...

    def job(self, job_id: str) -> JobRow | None: ...

    def completions(self, newest: int | None = None) -> list[JobRow]:
        """Every completed job with its observed duration and usage, oldest completion first; with
        ``newest``, only the ``newest`` most recently ended of them."""
        ...

    def queued(self) -> tuple[ClusterSnapshot, QueueState]:
        """The state as committed and the queues' jobs and configuration, for a scheduling pass to decide
        on (read one after the other: a plan is written only if the generation has not moved since)."""
        ...

    def queue_spec(self) -> Json | None:
        """The queue configuration as stored; ``None`` until one is set."""
        ...

    def list_jobs(self, states: Sequence[str], queue: str | None, after: str | None, limit: int) -> list[JobRow]:
        """Jobs in one of ``states`` (every state if empty), of ``queue`` if given, by id after ``after``."""
        ...

    def pending_by_queue(self) -> dict[str, int]: ...

    def events(self, job_id: str, after: int = 0) -> list[EventRow]:
        """The job's state changes with an id above ``after``, oldest first."""
        ...

    def close(self) -> None: ...

