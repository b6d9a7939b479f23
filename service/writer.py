"""The service's one writer: every placement and every release or completion of a process is
group-committed.

A request hands its operation to the writer and awaits it; the event loop goes on serving others.
The writer takes every operation waiting (up to ``max_batch``) and runs them in order in one
database transaction (:meth:`service.state_db.SqlStore.apply_ops`): one commit, one generation lock
and one existence query for the lot instead of one each. Each answer is given only after the
transaction that stored it has committed, so an acknowledged placement is durable.

Where the batch runs depends on the database (``on_loop``; default: on the loop for SQLite):

* **On the event loop** (SQLite: a commit is a local file write, a fraction of a millisecond). The
  operations asked during one pass of the loop are decided and committed at the start of the next
  pass, as predictions are batched. No thread hand-offs: with a writer thread, the loop and the writer
  traded the GIL on every database and numpy call, and placements at 300/s had a p99 of 54-210 ms
  against 20-41 ms on the loop (``tests/benchmarks/bench_service.py``).
* **In one writer thread** (PostgreSQL: every statement is a round trip and the commit waits for the
  server's log flush; on the loop, those waits would stall every request). The answers of a batch
  reach the event loop in one wake-up. Measured the other way round on PostgreSQL: 340 placements/s
  with the thread, 219/s on the loop.

A database error fails a whole transaction; the writer then runs that batch's operations one by one,
so that only the operation that cannot be stored fails. An operation whose request has gone before
its batch started is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import defaultdict

from service.state_db import EndOp, OpResult, PlaceOp, SqlStore

log = logging.getLogger(__name__)
Op = PlaceOp | EndOp
_Item = tuple[Op, asyncio.AbstractEventLoop, "asyncio.Future[OpResult]"]
_Settled = tuple["asyncio.Future[OpResult]", OpResult, bool]
"""A future, and its result or, if the flag says it failed, the exception to raise in the request."""


class Writer:
    def __init__(self, store: SqlStore, max_batch: int = 64, on_loop: bool | None = None) -> None:
        self.store, self.max_batch = store, max_batch
        self.on_loop = store.engine.dialect.name == "sqlite" if on_loop is None else on_loop
        self._pending: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.batches = self.ops = 0

    async def run(self, op: Op) -> OpResult:
        """Run ``op`` in the next group commit. Its result: a ``Placed``, whether an ``EndOp`` ended its
        job, or the exception of that op alone (returned, not raised). A database error is raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OpResult] = loop.create_future()
        if self.on_loop:
            pending = self._pending.setdefault(loop, [])
            pending.append((op, loop, future))
            if len(pending) == 1:  # the first of this pass: commit them all at the start of the next
                loop.call_soon(self._flush, loop)
            return await future
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)
                    self._thread.start()
        self._queue.put((op, loop, future))
        return await future

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: commit up to ``max_batch`` of its waiting ops; any more at the next pass."""
        pending = self._pending.get(loop, [])
        batch, rest = pending[:self.max_batch], pending[self.max_batch:]
        if rest:
            self._pending[loop] = rest
            loop.call_soon(self._flush, loop)
        else:
            self._pending.pop(loop, None)
        settled: list[tuple[asyncio.AbstractEventLoop, _Settled]] = []
        self._write([b for b in batch if not b[2].cancelled()], settled)
        _settle([one for _, one in settled])

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:  # stop
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                batch.append(more)
            settled: list[tuple[asyncio.AbstractEventLoop, _Settled]] = []
            self._write([b for b in batch if not b[2].cancelled()], settled)
            by_loop: dict[asyncio.AbstractEventLoop, list[_Settled]] = defaultdict(list)
            for loop, one in settled:
                by_loop[loop].append(one)
            for loop, answers in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop has closed: nobody is waiting
                    loop.call_soon_threadsafe(_settle, answers)

    def _write(self, batch: list[_Item], settled: list[tuple[asyncio.AbstractEventLoop, _Settled]]) -> None:
        if not batch:
            return
        self.batches += 1
        self.ops += len(batch)
        try:
            results = self.store.apply_ops([op for op, _, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                settled.append((batch[0][1], (batch[0][2], exc, True)))
                return
            log.warning("group commit failed; writing its operations one by one", extra={"error": str(exc)})
            for one in batch:
                self._write([one], settled)
            return
        for (_, loop, future), result in zip(batch, results, strict=True):
            settled.append((loop, (future, result, False)))


def _settle(answers: list[_Settled]) -> None:
    for future, result, failed in answers:
        if future.done():  # its request has gone
            continue
        if failed:
            assert isinstance(result, BaseException)
            future.set_exception(result)
        else:
            future.set_result(result)
