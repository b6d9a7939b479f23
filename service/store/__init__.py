"""The service's state store: the cluster state and every job placed, on a database or in memory.

* :mod:`.ops`: what a write is made of (place, end, replace; submit, cancel, set the queues, a
  scheduling pass), what each op comes to (placed, refused with a reason, ended, replaced, ...), and
  the :class:`Store` protocol.
* :mod:`.queued`: what a scheduling pass reads (pending and running jobs of the queues, their
  configuration) and the decider that asks ``placement.schedule`` for a plan.
* :mod:`.store`: the store on SQLite or PostgreSQL (snapshot reads, catch-up, the one write path).
* :mod:`.memory`: the store in memory.
* :mod:`.changes`: ops applied to the state as committed, shared by both.
* :mod:`.schema` (tables, Alembic migrations in ``migrations/``), :mod:`.sqlite` (pragmas, WAL
  checkpoints, the writers' lock), :mod:`.codec` (rows and the values they hold).
"""

from service.store.codec import EventRow, JobRow
from service.store.memory import MemoryStore
from service.store.ops import (
    Cancel,
    Cancelled,
    Completion,
    Decide,
    End,
    Ended,
    Moved,
    Op,
    Place,
    Placed,
    QueuesSet,
    Reason,
    Refused,
    Replace,
    Replaced,
    Result,
    Schedule,
    Scheduled,
    SetQueues,
    Store,
    Submit,
    Submitted,
    Written,
)
from service.store.queued import DEFAULT_QUEUES, Planner, QueueState
from service.store.schema import CANCELLED, COMPLETED, ENDED, EVICTED, PENDING, RELEASED, RUNNING
from service.store.store import SqlStore, make_engine, open_store

__all__ = ["CANCELLED", "COMPLETED", "DEFAULT_QUEUES", "ENDED", "EVICTED", "PENDING", "RELEASED", "RUNNING", "Cancel",
           "Cancelled", "Completion", "Decide", "End", "Ended", "EventRow", "JobRow", "MemoryStore", "Moved", "Op",
           "Place", "Placed", "Planner", "QueueState", "QueuesSet", "Reason", "Refused", "Replace", "Replaced",
           "Result", "Schedule", "Scheduled", "SetQueues", "SqlStore", "Store", "Submit", "Submitted", "Written",
           "make_engine", "open_store"]
