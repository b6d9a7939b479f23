"""Placements a cycle need not ask for: a job whose instances of one demand outnumber the room the machines
have for them does not fit, and the placement policy would only say so.

Every registered policy is the greedy step of ``placement.online`` over the filters of
``placement.filters``: it places an instance only on a machine the filters pass for its demand. So where, for
some demand of a job, the machines that pass them have room for fewer instances than it has (the filters'
``room_bound``, an upper bound), the policy places nothing; a cycle with a waiting queue
asks that of most of its jobs, and the answer costs a tenth of the policy's (the filters alone, for the
machines changed since they were last asked).

:class:`RoomIndex` keeps, per demand, which machines pass the filters on the snapshots of one stream (the
cycle's working state, it fenced by the reservations, a trial of preemption, ...): when asked about the
stream's next snapshot it works out again only the machines whose usage changed. The indexes outlive a
cycle (the next one starts from nearly the same state), one set per cluster layout and per caller at a
time.

What the policy would have answered is then made up (:meth:`Screen.unplaced`) where that is known: a
policy that explains nothing (``explain=False``) answers every failure alike, without reasons. A policy
that explains is asked, as before: its reasons are the plan's; unless the cycle wants no words
(``SchedulingSettings.explain_waits``), when it is asked once per job shape (for whether the job could ever fit,
which depends on the cluster and the shape alone) and its answer is made up, without reasons, from then on.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from placement.filters.base import SnapshotUsage
from placement.filters.chain import chain_for
from placement.model.decision import Decision, Verdict
from placement.model.demand import Job, Task
from placement.model.feasibility import Need, needs_of
from placement.model.layout import BoolArray, IntArray, Layout, Table
from placement.model.snapshot import ClusterSnapshot
from placement.online.policies import OnlinePolicy

PATCH_MOST = 48
"""Machines changed since a demand was last asked about, up to which they are worked out one by one
(above it, every machine at once in numpy is cheaper)."""
MOST_DEMANDS = 1024
"""Demands an index keeps before it is emptied (an entry holds a flag, and for gangs a count, per machine)."""
MOST_STREAMS = 48
"""Indexes kept per layout before they are all dropped (a few per queue, priority and reservation)."""
LOG_TICKS = 16
"""Changes an index remembers, to bring an entry that far behind up to date machine by machine."""
KEPT_LAYOUTS = 4
"""Layouts (clusters) whose indexes are kept for the next cycle."""
MOST_VERDICTS = 16_384
"""Job shapes whose verdict (:meth:`Screen.unplaced`) is kept per policy before its table is emptied."""
Counts = npt.NDArray[np.int32]
NO_SCORE: MappingProxyType[str, float] = MappingProxyType({})
"""The score of a decision without one (shared: it cannot change)."""


@dataclass
class _Entry:
    passing: BoolArray
    tick: int
    """The index's tick when the entry was last brought up to date."""
    count: int
    """Machines passing."""
    room: Counts | None = None
    """Per machine, at most how many instances it takes (0 where the filters fail it); worked out for
    demands of more than one instance only."""
    total: int = 0


class RoomIndex:
    """Which machines pass the filters for each demand asked about, and how many instances each could take
    at most, on the snapshots of one stream."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.tick = 0
        self._log: list[IntArray] = []
        self._since: tuple[int, dict[int, IntArray | None]] = (0, {})
        """At a tick, the machines changed since each number of ticks before it (:meth:`_changed_since`)."""
        """The machines changed at each of the last ticks (``_log[-1]``: at ``tick``)."""
        self._usage: tuple[IntArray, IntArray, IntArray, IntArray] | None = None
        self._snapshot: ClusterSnapshot | None = None
        self._view: SnapshotUsage | None = None
        self._entries: dict[Need, _Entry] = {}

    def _sync(self, snapshot: ClusterSnapshot) -> SnapshotUsage:
        if snapshot is self._snapshot and self._view is not None:
            return self._view
        now = (snapshot.gpu_milli_used, snapshot.gpu_mem_used, snapshot.cpu_used, snapshot.mem_used)
        if self._usage is None:
            self._usage = (now[0].copy(), now[1].copy(), now[2].copy(), now[3].copy())
        else:
            milli, mem, cpu, ram = self._usage
            gpus = np.flatnonzero((milli != now[0]) | (mem != now[1]))
            machines = np.flatnonzero((cpu != now[2]) | (ram != now[3]))
            if len(gpus) or len(machines):
                self._log.append(np.union1d(self.layout.gpu_machine[gpus], machines))
                del self._log[:-LOG_TICKS]
                self.tick += 1
                milli[gpus], mem[gpus] = now[0][gpus], now[1][gpus]
                cpu[machines], ram[machines] = now[2][machines], now[3][machines]
        self._snapshot, self._view = snapshot, SnapshotUsage(snapshot)
        return self._view

    def _changed_since(self, tick: int) -> IntArray | None:
        """The machines changed after ``tick``; ``None`` when too many, or too long ago, to patch (worked out once
        per tick behind: the entries asked after a change were mostly last brought up to date at the same tick)."""
        behind = self.tick - tick
        if behind > len(self._log):
            return None
        if self._since[0] != self.tick:
            self._since = (self.tick, {})
        since = self._since[1]
        if behind not in since:
            changed = self._log[-1] if behind == 1 else np.unique(np.concatenate(self._log[-behind:]))
            since[behind] = changed if len(changed) <= PATCH_MOST else None
        return since[behind]

    def _entry(self, snapshot: ClusterSnapshot, need: Need, counted: bool) -> _Entry:
        usage = self._sync(snapshot)
        entry = self._entries.get(need)
        if entry is not None and entry.tick == self.tick and (entry.room is not None or not counted):
            return entry
        chain = chain_for(need)
        if entry is not None and entry.tick != self.tick:
            stale = self._changed_since(entry.tick)
            if stale is None:
                entry = None
            else:
                passing, room = entry.passing, entry.room
                for m in stale.tolist():
                    ok = chain.passes_at(usage, m)
                    entry.count += int(ok) - int(passing[m])
                    passing[m] = ok
                    if room is not None:  # exact for one machine: still at most the bound
                        now = chain.room_at(usage, m) if ok else 0
                        entry.total += now - int(room[m])
                        room[m] = now
                entry.tick = self.tick
        if entry is None:
            if len(self._entries) >= MOST_DEMANDS:
                self._entries.clear()
            passing = chain.passing(usage)
            entry = self._entries[need] = _Entry(passing, self.tick, int(np.count_nonzero(passing)))
        if counted and entry.room is None:
            room = chain.room(usage, entry.passing)
            entry.room, entry.total = room, int(room.sum())
        return entry

    def passing(self, snapshot: ClusterSnapshot, need: Need) -> BoolArray:
        """Per machine: whether it passes the filters for one more instance of ``need`` on ``snapshot`` (the
        index's to change: copy it to keep it)."""
        return self._entry(snapshot, need, False).passing

    def room(self, snapshot: ClusterSnapshot, need: Need) -> Counts:
        """Per machine: at most how many instances of ``need`` it takes on ``snapshot`` (the index's)."""
        room = self._entry(snapshot, need, True).room
        assert room is not None
        return room

    def holds(self, snapshot: ClusterSnapshot, need: Need, instances: int) -> bool:
        """Whether the machines together may take ``instances`` of ``need`` on ``snapshot`` (``False``: they
        cannot)."""
        entry = self._entry(snapshot, need, instances > 1)
        return entry.count > 0 if instances <= 1 else entry.total >= instances


_kept: list[tuple[Layout, dict[Hashable, RoomIndex]]] = []
_kept_lock = threading.Lock()


class Screen:
    """One cycle's view of the indexes, and what it learnt of each policy it asked: whether it explains failures.
    ``words``: whether the cycle wants an explaining policy's reasons for jobs that fit nowhere."""

    def __init__(self, layout: Layout, words: bool = True) -> None:
        self.layout, self.words = layout, words
        self.memory_everywhere = not len(layout.gpu_mem_cap) or int(layout.gpu_mem_cap.min()) > 0
        """Every GPU has memory: then a GPU share fits where the filters say (they also want memory)."""
        self.terse: dict[OnlinePolicy, bool] = {}
        """Per policy asked, whether it answers a failure without reasons (absent until one failure was asked)."""
        self._failure: dict[OnlinePolicy, Decision] = {}
        """Per terse policy, the made-up answer (shared: thousands fail each cycle)."""
        with _kept_lock:  # a caller at a time: the indexes change as they are asked
            found = next((k for k, (kept, _) in enumerate(_kept) if kept is layout), None)
            self.streams = _kept.pop(found)[1] if found is not None else {}

    def close(self) -> None:
        """Hand the indexes on to the next cycle on this layout."""
        with _kept_lock:
            _kept.append((self.layout, self.streams))
            del _kept[:-KEPT_LAYOUTS]

    def stream(self, key: Hashable) -> RoomIndex:
        found = self.streams.get(key)
        if found is None:
            if len(self.streams) >= MOST_STREAMS:
                self.streams.clear()
            found = self.streams[key] = RoomIndex(self.layout)
        return found

    def fits_nowhere(self, key: Hashable, snapshot: ClusterSnapshot, job: Job) -> bool:
        """Whether the machines of ``snapshot`` (stream ``key``) have room for fewer instances of some
        demand of ``job`` than it has: then no placement of it exists."""
        index = self.stream(key)
        return not all(index.holds(snapshot, need, count) for need, count in needs_of(job))

    def unplaced(self, snapshot: ClusterSnapshot, job: Job, policy: OnlinePolicy) -> Decision:
        """``policy``'s answer for ``job``, which fits nowhere on ``snapshot``: made up where the policy is known
        to explain nothing, or where it explains and the cycle wants no words (then with the verdict it gives
        the job's shape); else asked (its first failure of a cycle tells which it is)."""
        failure = self._failure.get(policy)
        if failure is not None:
            return failure
        if not self.words and self.terse.get(policy) is False:
            return _verdict(policy, snapshot, job)
        decision = policy(snapshot, job)
        if policy not in self.terse and decision.allocation is None:
            terse = self.terse[policy] = (not decision.reasons and not decision.score
                                          and decision.verdict is Verdict.UNSCHEDULABLE_NOW)
            if terse:  # one answer for every later failure: where a failure is used, its id is not read
                self._failure[policy] = Decision("", decision.policy, Verdict.UNSCHEDULABLE_NOW, -1, score=NO_SCORE)
            elif not self.words:
                return _verdict(policy, snapshot, job, decision)
        return decision


_verdicts: weakref.WeakKeyDictionary[OnlinePolicy, tuple[Layout, Table[tuple[Task, ...], Decision]]] = \
    weakref.WeakKeyDictionary()
"""Per explaining policy, the cluster layout it last failed a job on and its failures there without reasons, by
job shape (:func:`_verdict`)."""


def _verdict(policy: OnlinePolicy, snapshot: ClusterSnapshot, job: Job, asked: Decision | None = None) -> Decision:
    """``policy``'s failure for ``job`` (which fits nowhere on ``snapshot``) without its reasons: the policy is
    asked once per job shape and cluster layout (``asked``: its answer, where the caller asked it), and the verdict
    it gave (whether the job could ever fit the cluster, which nothing allocated changes) kept across cycles. The
    failure's job id is not read."""
    kept = _verdicts.get(policy)
    if kept is None or kept[0] is not snapshot.layout:
        kept = _verdicts[policy] = (snapshot.layout, Table(MOST_VERDICTS))

    def unworded() -> Decision:
        decision = asked or policy(snapshot, job)
        assert decision.allocation is None, "a job that fits nowhere was placed"
        return Decision("", decision.policy, decision.verdict, -1, score=NO_SCORE)

    return kept[1].get(job.tasks, unworded)  # tasks alike but for a NaN's identity: asked again, no more
