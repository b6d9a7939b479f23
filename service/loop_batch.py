"""Calls made during one pass of the event loop, run together at the start of the next pass.

A run whose cost hardly depends on how many calls it serves (a model call, a commit) is then shared by
every call of the moment: under load many calls share a run, and when idle a call waits for nobody.
The run is made on the loop's own thread: handing it to another thread would have the two contend for
the GIL, and each handover can wait the interpreter's switch interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class LoopBatcher(Generic[Item, Answer]):
    """Runs ``run`` over the items submitted during one pass of a loop, at the start of its next pass.

    ``run`` answers every item it is given, in order: its answer, or the exception that failed it alone.
    ``take``: how many of the waiting items the next run takes (at least one; default all); the rest
    wait for the pass after. An item whose caller has gone before its run starts is left out.
    """

    def __init__(self, run: Callable[[list[Item]], list[Answer | BaseException]],
                 take: Callable[[Sequence[Item]], int] | None = None) -> None:
        self._run, self._take = run, take
        self._waiting: dict[asyncio.AbstractEventLoop, list[tuple[Item, asyncio.Future[Answer]]]] = {}

    async def submit(self, item: Item) -> Answer:
        """``item``'s answer, once its run is over; the exception that failed it is raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        waiting = self._waiting.setdefault(loop, [])
        waiting.append((item, future))
        if len(waiting) == 1:  # the first of this pass: run them all at the start of the next
            loop.call_soon(self._run_waiting, loop)
        return await future

    def _run_waiting(self, loop: asyncio.AbstractEventLoop) -> None:
        waiting = self._waiting.get(loop, [])
        taken = len(waiting) if self._take is None else self._take([item for item, _ in waiting])
        batch, rest = waiting[:taken], waiting[taken:]
        if rest:
            self._waiting[loop] = rest
            loop.call_soon(self._run_waiting, loop)
        else:
            self._waiting.pop(loop, None)
        live = [(item, future) for item, future in batch if not future.cancelled()]
        if not live:
            return
        try:
            answers = self._run([item for item, _ in live])
        except Exception as exc:  # a broken run must not leave its callers waiting for ever
            answers = [exc] * len(live)
        settle(zip((future for _, future in live), answers, strict=True))


def settle(answers: Iterable[tuple[asyncio.Future[Answer], Answer | BaseException]]) -> None:
    """Give each future its answer or exception, on the future's loop; a future already done (its caller
    has gone) is passed over."""
    for future, answer in answers:
        if future.done():
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
