"""What an SQLite state database needs that a database server does not: its pragmas and explicit
write transactions, a thread that checkpoints its write-ahead log, and a lock that writers queue on.

Each is a no-op for other databases and for an SQLite database in memory."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger(__name__)
CHECKPOINT_EVERY_S = 0.25
"""How often the log of an SQLite state database is copied back (at 600 commits/s, a few MB each time)."""


def sqlite_file(engine: Engine) -> str | None:
    """The path of the engine's SQLite database file; ``None`` for other databases and in memory."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    return database if database and database != ":memory:" else None


def sqlite_engine(url: str) -> Engine:
    """An engine for the SQLite database ``url``: WAL, NORMAL sync (durable against a process crash), a
    busy timeout, and ``BEGIN IMMEDIATE`` transactions so that writers queue instead of deadlocking.
    Its connections never checkpoint the WAL on commit: :class:`WalCheckpoints` does, in a thread."""
    # named parameters, as PostgreSQL's driver takes them: the store's driver SQL passes dicts to both
    engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, paramstyle="named")

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # transactions are begun explicitly below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class WalCheckpoints:
    """Copies an SQLite database's write-ahead log back into the database file every ``every_s``
    seconds, in a thread of its own (a passive checkpoint: it waits for no reader or writer).

    SQLite's default is that the commit that takes the log past 1,000 pages checkpoints it, with two
    fsyncs, in the committing thread, which for the service is its event loop, and every request
    waits: the slowest commits were those (``docs/service.md``, Performance). The driver releases the
    GIL while it checkpoints, so the loop goes on serving."""

    def __init__(self, engine: Engine, every_s: float = CHECKPOINT_EVERY_S) -> None:
        database = sqlite_file(engine)
        # a weak reference: a store dropped without ``close()`` takes its engine, and this thread, with it
        self._engine, self.every_s = weakref.ref(engine), every_s
        self.runs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if database:
            self._thread = threading.Thread(target=self._loop, name="sqlite-checkpoints", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s) and self._engine() is not None:
            try:
                self.checkpoint()
            except Exception as exc:  # the next pass tries again; the log only grows meanwhile
                log.warning("WAL checkpoint failed", extra={"error": str(exc)})

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """One checkpoint: (busy, frames in the log, frames copied back), as SQLite reports them."""
        engine = self._engine()
        if engine is None:
            return 0, 0, 0
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            busy, frames, copied = cursor.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            cursor.close()
        finally:
            raw.close()
        self.runs += 1
        return int(busy), int(frames), int(copied)

    def stop(self) -> None:
        """Stop the thread, after a last checkpoint of everything committed."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self._thread = None
        self.checkpoint()


class WritersQueue:
    """Writers of one SQLite file queue on an advisory file lock (``<database>-writers.lock``) before
    they begin: SQLite's own busy handler makes a writer that finds the database locked sleep and retry
    (1, 2, 5, 10 ms and longer), so that two service processes served less than one.
    The kernel wakes the next one the moment the lock is free."""

    def __init__(self, engine: Engine) -> None:
        database = sqlite_file(engine)
        self._path = f"{database}-writers.lock" if database else None
        self._fd: int | None = None

    def __enter__(self) -> None:
        if self._path is None:
            return
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
