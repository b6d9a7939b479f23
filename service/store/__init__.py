"""The service's state store: the cluster state and every job placed, on a database or in memory.

* :mod:`.ops`: what a write is made of (place, end, replace), what each op comes to (placed,
  refused with a reason, ended, replaced), and the :class:`Store` protocol.
* :mod:`.store`: the store on SQLite or PostgreSQL (snapshot reads, catch-up, the one write path).
* :mod:`.memory`: the store in memory.
* :mod:`.changes`: ops applied to the state as committed, shared by both.
* :mod:`.schema` (tables, Alembic migrations in ``migrations/``), :mod:`.sqlite` (pragmas, WAL
  checkpoints, the writers' lock), :mod:`.codec` (rows and the values they hold).
"""

from service.store.codec import JobRow
from service.store.memory import MemoryStore
from service.store.ops import (
    Completion,
    End,
    Ended,
    Moved,
    Op,
    Place,
    Placed,
    Reason,
    Refused,
    Replace,
    Replaced,
    Result,
    Store,
    Written,
)
from service.store.schema import COMPLETED, EVICTED, RELEASED, RUNNING
from service.store.store import SqlStore, make_engine, open_store

__all__ = ["COMPLETED", "EVICTED", "RELEASED", "RUNNING", "Completion", "End", "Ended", "JobRow", "MemoryStore",
           "Moved", "Op", "Place", "Placed", "Reason", "Refused", "Replace", "Replaced", "Result", "SqlStore", "Store",
           "Written", "make_engine", "open_store"]
