"""The order in which a cycle offers the guaranteed jobs of all its queues, worked out in arrays.

A cycle offers the head of the queue whose turn comes first (``placement.scheduling.cycle``) and goes on
down that queue's line while its next job's turn still comes before every other queue's head; when the
quota book changes, every head's turn is compared afresh. Between two changes that takes the jobs in the
order of each job's *running largest* turn: the largest turn among it and the jobs of its line offered
since the change. A job whose turn is smaller than one before it in its line cannot go before that one (a
line is taken in order) and goes right after it, before any job of another line whose running largest is
larger. So sorting by that key, each line keeping its order among equal keys, gives the order of offering
heads one by one (``tests/placement/test_scheduling_lines.py`` holds the two equal) without comparing turns
job by job in Python.

A turn is ``(within its guarantee or not, borrowed share, -priority, submit time, job id)``: the first two per
queue and job shape on the book (:class:`Offer` asks for them), the rest the job's own, ranked once per cycle.
The order is worked out a window at a time: a job's running largest is known from the jobs before it in its
line, so the first jobs of every line tell the order up to the smallest running largest among the lines that go
on past the window. Each window starts its running largest afresh: a line's jobs left after a window come after
everything the window took, in any line, so what it took would raise none of them past another. A window is
small after a change of the book (a cycle that starts many jobs changes it after each) and grows while none
comes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
import numpy.typing as npt

from placement.scheduling.memo import Facts

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Share = tuple[int, float]
"""The first two parts of a turn: (0, 0.0) within the queue's guarantee, else (1, the borrowed share)."""

FIRST_WINDOW = 32
"""Jobs per line looked at first after a change of the book (then four times as many each time, up to the
lines: a steady cycle's few thousand jobs in a few windows)."""
_INT64 = np.iinfo(np.int64)


@dataclass
class _LineArrays:
    facts: list[Facts]
    shape: IntArray
    cautious: FloatArray
    priority: IntArray | None
    """``-priority`` per job; ``None`` where numpy would not compare the turns as Python does: a priority beyond 64
    bits, or an id with a NUL (numpy's strings drop trailing ones)."""
    submit: FloatArray
    ids: npt.NDArray[np.str_]
    job_ids: list[str]
    codes: IntArray
    """Per job, the number of its shape among the line's, in order of shape."""
    first: IntArray
    """Per shape number, the line's first job of that shape."""


_kept: dict[str, _LineArrays] = {}
"""Per queue, the arrays of its last line (a queue's line is the same list while its jobs are: ``in_order``)."""


def _arrays_of(queue: str, line: list[Facts]) -> _LineArrays:
    found = _kept.get(queue)
    if found is not None and found.facts is line:
        return found
    priorities = [f.turn[0] for f in line]
    exact = (all(_INT64.min <= p <= _INT64.max for p in priorities)
             and not any("\x00" in f.turn[2] for f in line))
    shapes = np.fromiter((f.shape for f in line), dtype=np.int64, count=len(line))
    job_ids = [f.turn[2] for f in line]
    _, first, codes = np.unique(shapes, return_index=True, return_inverse=True)
    found = _LineArrays(line, shapes, np.fromiter((f.cautious_s for f in line), dtype=np.float64, count=len(line)),
                        np.array(priorities, dtype=np.int64) if exact else None,
                        np.fromiter((f.turn[1] for f in line), dtype=np.float64, count=len(line)),
                        np.array(job_ids, dtype=str), job_ids, codes.reshape(-1).astype(np.int64),
                        first.astype(np.int64))
    if len(_kept) > 256:  # queues come and go with configurations
        _kept.clear()
    _kept[queue] = found
    return found


class Offer:
    """The guaranteed jobs of a cycle's queues in the order they are offered: job ``k`` is ``facts[k]``; the lines
    lie one after the other, each in its order. ``share(facts)``: the first two parts of a job's turn on the book
    as it is (the same for jobs of one queue and shape while that queue's usage stays)."""

    def __init__(self, lines: dict[str, list[Facts]], share: Callable[[Facts], Share],
                 usage_state: Callable[[str], int]) -> None:
        arrays = [_arrays_of(name, line) for name, line in lines.items()]
        self.share, self.usage_state, self.names, self.arrays = share, usage_state, list(lines), arrays
        self.facts: list[Facts] = list(chain.from_iterable(a.facts for a in arrays))
        self.job_ids: list[str] = list(chain.from_iterable(a.job_ids for a in arrays))
        self.queues: list[str] = list(chain.from_iterable(repeat(name, len(a.facts))
                                                          for name, a in zip(lines, arrays, strict=True)))
        sizes = [len(a.facts) for a in arrays]
        self.start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.lines = len(arrays)
        self.line_of = np.repeat(np.arange(len(arrays), dtype=np.int64), sizes)
        self.shape = np.concatenate([a.shape for a in arrays]) if arrays else np.zeros(0, dtype=np.int64)
        self.cautious = np.concatenate([a.cautious for a in arrays]) if arrays else np.zeros(0)
        self.turn_rank = _turn_ranks(arrays, self.facts)
        self.taken = [0] * len(arrays)
        """Per line, how many of its jobs have been offered."""
        self.size = FIRST_WINDOW
        self._window: IntArray = np.zeros(0, dtype=np.int64)
        self._rest: IntArray | None = None
        """The jobs of the last window not offered yet, where their order still holds."""
        self._primary: list[tuple[int, FloatArray]] = [(-1, np.zeros(0)) for _ in arrays]
        """Per line, the state of its queue's usage and the first part of the turn (:meth:`_keys`) per shape
        number, worked out then (NaN: not yet)."""

    def next(self) -> IntArray:
        """The next jobs in order (empty when every job has been offered); :meth:`took` says how many were."""
        if self._rest is not None:
            self._window, self._rest = self._rest, None
            return self._window
        spans = [(line, int(self.start[line]) + self.taken[line],
                  min(int(self.start[line + 1]), int(self.start[line]) + self.taken[line] + self.size))
                 for line in range(self.lines) if self.start[line] + self.taken[line] < self.start[line + 1]]
        if not spans:
            return np.zeros(0, dtype=np.int64)
        jobs = np.concatenate([np.arange(lo, hi, dtype=np.int64) for _, lo, hi in spans])
        rank = np.empty(len(jobs), dtype=np.int64)
        rank[np.lexsort((self.turn_rank[jobs], self._keys(spans)))] = np.arange(len(jobs))
        running: list[IntArray] = []
        bound = _INT64.max
        at = 0
        for line, lo, hi in spans:
            ranks = np.maximum.accumulate(rank[at:at + hi - lo])
            running.append(ranks)
            if hi < self.start[line + 1]:  # the line goes on past the window: its later jobs come after this
                bound = min(bound, int(ranks[-1]))
            at += hi - lo
        largest = np.concatenate(running)
        chosen = np.flatnonzero(largest <= bound)
        self._window = jobs[chosen[np.argsort(largest[chosen], kind="stable")]]
        return self._window

    def took(self, count: int, changed: bool, lowered: bool = False) -> None:
        """``count`` of the jobs :meth:`next` gave were offered; ``changed``: the book changed as the last of them
        was; ``lowered``: some queue's usage went down then (a preemption), so that a turn may come sooner. Where
        none did, turns only move later, and the rest of the window keeps its order if no turn in it moved (the
        jobs after it came after it and still do; a start within a queue's guarantee leaves it within, as most
        starts of a cycle that starts many do); else every turn is compared afresh, from each line's next job, in
        small windows again."""
        for line, n in enumerate(np.bincount(self.line_of[self._window[:count]], minlength=self.lines).tolist()):
            self.taken[line] += n
        rest = self._window[count:]
        if changed:
            self.size = FIRST_WINDOW
            self._rest = rest if len(rest) and not lowered and self._turns_stay(rest) else None
        elif len(rest):
            self._rest = rest
        else:
            self.size *= 4

    def _turns_stay(self, jobs: IntArray) -> bool:
        """Whether the first part of the turn of every one of ``jobs`` is what it was when they were ordered, the
        book as it is now (the lines whose queue's usage changed asked again for the shapes among them)."""
        lines = self.line_of[jobs]
        for line in np.unique(lines).tolist():
            state, known = self._primary[line]
            if state == (now := self.usage_state(self.names[line])):
                continue
            arrays, start = self.arrays[line], int(self.start[line])
            codes = np.unique(arrays.codes[jobs[lines == line] - start]).tolist()
            fresh = np.full(len(arrays.first), np.nan)
            for code in codes:
                fresh[code] = self._primary_of(start + int(arrays.first[code]))
                if fresh[code] != known[code]:
                    return False
            self._primary[line] = (now, fresh)
        return True

    def classes(self, jobs: IntArray, now: float, due: Sequence[float]) -> list[int]:
        """Per job of ``jobs``, a number equal for jobs of one queue and shape whose cautious ends fall between
        the same of the times ``due`` (sorted): the jobs a cycle decides alike on one state."""
        between = np.searchsorted(np.asarray(due, dtype=np.float64), now + self.cautious[jobs], side="left")
        pair = self.shape[jobs] * max(self.lines, 1) + self.line_of[jobs]
        out: list[int] = (pair * (len(due) + 1) + between).tolist()
        return out

    def _keys(self, spans: Sequence[tuple[int, int, int]]) -> FloatArray:
        """Per job of ``spans`` (line, first job, end), the first part of its turn as one number that sorts alike: -1
        within the guarantee, else the borrowed share (at least 0); asked per line and shape while the line's
        queue's usage stays."""
        parts = []
        for line, lo, hi in spans:
            arrays, start = self.arrays[line], int(self.start[line])
            state, known = self._primary[line]
            if state != (now := self.usage_state(self.names[line])):
                known = np.full(len(arrays.first), np.nan)
                self._primary[line] = (now, known)
            codes = arrays.codes[lo - start:hi - start]
            values = known[codes]
            missing = np.isnan(values)
            if missing.any():
                for code in set(codes[missing].tolist()):
                    known[code] = self._primary_of(start + int(arrays.first[code]))
                values = known[codes]
            parts.append(values)
        return np.concatenate(parts)

    def _primary_of(self, job: int) -> float:
        share = self.share(self.facts[job])
        return -1.0 if share[0] == 0 else share[1]


def _turn_ranks(arrays: Sequence[_LineArrays], facts: list[Facts]) -> IntArray:
    """Per job, the rank of its own part of the turn, ``(-priority, submit time, job id)``, among all."""
    rank = np.empty(len(facts), dtype=np.int64)
    if not facts:
        return rank
    priorities = [a.priority for a in arrays]
    if all(p is not None for p in priorities):
        order = np.lexsort((np.concatenate([a.ids for a in arrays]), np.concatenate([a.submit for a in arrays]),
                            np.concatenate([p for p in priorities if p is not None])))
    else:
        order = np.array(sorted(range(len(facts)), key=lambda k: facts[k].turn), dtype=np.int64)
    rank[order] = np.arange(len(facts))
    return rank
