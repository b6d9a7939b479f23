"""Scorer ``fragmentation``: FGD's node score (Weng et al., ATC'23). The cost of a machine is the least
expected fragmentation (milli-GPUs) that placing the instance there adds, over the ways of placing it
(``placement.online.frag_measure``), for the typical shapes of the jobs this scorer was asked about
(``placement.online.shape_mix``: learned online, never read from a trace). :meth:`Fragmentation.choose_gpus`
then puts each share of a placed job on the GPU that adds the least (counted in the same steps, the
fullest GPU among those in the least step), which the greedy step alone does not choose (it takes the
fullest GPU that fits).

The cost is counted in steps of ``STEP_MILLI`` (the added fragmentation, divided by it and rounded down):
machines whose additions fall in the same step tie, and the greedy step gives a tie to the first machine in
cluster order, so near-equal choices pack onto the machines already in use and later machines stay whole.
FGD does the same: its node score is the integer part of 100 x sigmoid(-added / 1000), one point of which is
40 milli-GPUs around zero, and the Kubernetes scheduler gives equal scores to the first node by name. Exact
costs spread the near-equal choices over the cluster instead: with FGD's own mix (the 95% most common
shapes of the whole default pod list, seed 42) they left 5.92% / 5.66% of the GPUs unallocated at 100% /
130% arrived, steps of 40 milli-GPUs 4.89% / 4.70%, against 4.86% / 4.71% that FGD's published runs
report for that seed.

An instance without GPUs also pays half a step on a machine with GPUs. The measure only sees the CPU it
takes from a GPU machine once a typical shape no longer fits there; until then CPU-only pods go to the
first machine in order, GPU machines included (on the default pod list, seed 42, 130% arrived: 12,261
cores of CPU-only pods on GPU machines while the machines without GPUs had 5,867 cores free; 7,468 and
1,074 with the half step). On the shipped pod lists this changed no GPU placement's outcome (the same
unallocated shares to four decimals over seeds 42-51): CPU was not what the failed pods lacked there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from placement.filters.base import usage_of
from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import Need, need_of, violations
from placement.model.layout import MILLI, BoolArray, FloatArray, IntArray, Layout
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement
from placement.online.frag_measure import NO_GPU, MachineUsage, Rows, ShapeTable, added, rows_of
from placement.online.greedy import Step
from placement.online.scorers.base import Costs
from placement.online.shape_mix import Mix, ShapeMix

ENTRY_LIMIT = 256
"""Instance demands whose costs are kept at once (the table is emptied when full)."""
STEP_MILLI = 40.0
"""The resolution of the cost (expected milli-GPUs of fragmentation added): FGD's one score point near zero."""
GPU_MACHINE_STEPS = 0.5
"""What an instance without GPUs pays, in steps, on a machine with GPUs: less than a step, so it goes to a
machine without GPUs only among machines where it adds the same fragmentation."""
DEDUPLICATE_FROM = 64
"""From this many machines to work out at once, machines in the same state are worked out once."""


CostKey = tuple[int, int, int, float, int]
"""What a machine's cost depends on in a demand: whole GPUs, share, GPU memory (explicit, proportional), CPU."""
_MIX_WEIGHTS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5],
                        dtype=np.uint64)
"""Odd 64-bit multipliers that fold a machine's state into one number, to find machines in the same state."""


def cost_key(need: Need) -> CostKey:
    return need.whole_gpus, need.gpu_milli, need.gpu_mem_mib, need.share_mem, need.cpu_milli


@dataclass
class _Costs:
    """Per machine, the cost of one demand and the machine's version it was worked out at."""

    cost: FloatArray
    version: IntArray


class _Seen:
    """The usage the scorer saw last on one layout under one mix, and per machine a version that changes
    whenever the machine's usage does."""

    def __init__(self, layout: Layout, mix: Mix) -> None:
        self.layout, self.mix, self.table = layout, mix, ShapeTable.of(mix, layout)
        self.version = np.zeros(len(layout.cpu_cap), dtype=np.int64)
        self.usage: tuple[IntArray, IntArray, IntArray] | None = None
        self.entries: dict[CostKey, _Costs] = {}

    def sync(self, usage: MachineUsage) -> None:
        """Bump the version of every machine whose usage changed since the last call."""
        if self.usage is None:
            self.usage = (usage.gpu_milli.copy(), usage.gpu_mem.copy(), usage.cpu.copy())
            return
        milli, mem, cpu = self.usage
        gpus = np.flatnonzero((milli != usage.gpu_milli) | (mem != usage.gpu_mem))
        machines = np.flatnonzero(cpu != usage.cpu)
        self.version[self.layout.gpu_machine[gpus]] += 1
        self.version[machines] += 1
        milli[gpus], mem[gpus], cpu[machines] = usage.gpu_milli[gpus], usage.gpu_mem[gpus], usage.cpu[machines]

    def costs(self, usage: MachineUsage, need: Need, wanted: BoolArray) -> _Costs:
        """The costs of ``need``, up to date on the ``wanted`` machines."""
        key = cost_key(need)
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= ENTRY_LIMIT:
                self.entries.clear()
            entry = self.entries[key] = _Costs(np.zeros(len(self.version)), np.full(len(self.version), -1))
        stale = np.flatnonzero(wanted & (entry.version != self.version))
        if len(stale):
            entry.cost[stale] = _added(rows_of(usage, stale), need, self.table)
            entry.version[stale] = self.version[stale]
        return entry


def _added(rows: Rows, need: Need, table: ShapeTable) -> FloatArray:
    """The costs of :func:`added`, working out each distinct machine state once when there are many."""
    if len(rows.free) < DEDUPLICATE_FROM:
        return added(rows, need, table)[0]
    state = np.column_stack([rows.free, rows.mem_free, rows.caps, rows.cpu_free, rows.gpu_type]).astype(np.uint64)
    folded = np.zeros(len(state), dtype=np.uint64)
    for column in range(state.shape[1]):  # a 64-bit hash: machines in the same state fold to the same number
        folded = (folded ^ state[:, column]) * _MIX_WEIGHTS[column % len(_MIX_WEIGHTS)]
    _, first, back = np.unique(folded, return_index=True, return_inverse=True)
    distinct = Rows(rows.free[first], rows.mem_free[first], rows.caps[first], rows.cpu_free[first],
                    rows.gpu_type[first])
    cost: FloatArray = added(distinct, need, table)[0][back.reshape(-1)]
    return cost


class Fragmentation:
    """See the module docstring. Each instance learns from the jobs it is asked about on its own."""

    name = "fragmentation"
    unit = f"expected fragmentation added, in steps of {STEP_MILLI:g} milli-GPUs (rounded down)"

    def __init__(self, mix: ShapeMix | None = None, step_milli: float = STEP_MILLI) -> None:
        if not step_milli > 0:
            raise ValueError(f"step_milli must be positive, got {step_milli}")
        self.mix = mix if mix is not None else ShapeMix()
        self.step_milli = step_milli
        self._seen: _Seen | None = None

    def cost(self, step: Step) -> Costs | None:
        entry = self._costs(step.working, step.job, step.need, step.candidates.ok)
        steps = np.floor(entry.cost / self.step_milli + 1e-9)  # the costs are ratios of integers: no drift
        if not step.need.gpu_milli:
            steps = steps + GPU_MACHINE_STEPS * (step.working.layout.gpu_count > 0)
        result: FloatArray = np.where(step.candidates.ok, steps, 0.0)
        return result

    def _costs(self, usage: MachineUsage, job: Job, need: Need, wanted: BoolArray) -> _Costs:
        self.mix.observe(job)
        mix = self.mix.current()
        seen = self._seen
        if seen is None or seen.layout is not usage.layout or seen.mix.version != mix.version:
            seen = self._seen = _Seen(usage.layout, mix)
        seen.sync(usage)
        return seen.costs(usage, need, wanted)

    def choose_gpus(self, snapshot: ClusterSnapshot, job: Job, decision: Decision) -> Decision:
        """``decision`` with each share of its job moved to the GPU of its machine that adds the least
        fragmentation, one instance after the other; unchanged if that does not hold up (a later
        instance would no longer fit) or the job holds no share."""
        allocation = decision.allocation
        if allocation is None or not any(p.gpus and p.gpu_milli < MILLI for p in allocation.instances):
            return decision
        seen = self._seen
        if seen is None or seen.layout is not snapshot.layout:
            return decision
        usage = _Scratch(snapshot)
        moved: list[InstancePlacement] = []
        for placement in allocation.instances:
            chosen = self._gpu_for(usage, need_of(job.tasks[placement.task]), placement, seen.table, self.step_milli)
            if chosen is None:
                return decision
            usage.take(chosen)
            moved.append(chosen)
        better = Allocation(allocation.job_id, tuple(moved))
        if better == allocation or violations(snapshot, job, better):
            return decision
        return replace(decision, allocation=better)

    @staticmethod
    def _gpu_for(usage: _Scratch, need: Need, placement: InstancePlacement, table: ShapeTable,
                 step_milli: float) -> InstancePlacement | None:
        """``placement`` on the GPU of its machine that adds the least, in steps of ``step_milli`` (the fullest
        among those in the least step; shares only: whole GPUs and CPU stay where they are if still free);
        ``None`` where it no longer fits."""
        first = int(usage.layout.gpu_first[placement.machine])
        if not (placement.gpus and placement.gpu_milli < MILLI):
            still_free = all(usage.gpu_milli[g] == 0 and usage.gpu_mem[g] == 0 for g in placement.gpus)
            return placement if still_free or not placement.gpus else None
        cost, gpu = added(rows_of(usage, np.array([placement.machine])), need, table, step_milli)
        if not np.isfinite(cost[0]) or gpu[0] == NO_GPU:
            return None
        chosen = first + int(gpu[0])
        return replace(placement, gpus=(chosen,), gpu_mem_mib=need.gpu_mem_on(int(usage.layout.gpu_mem_cap[chosen])))


class _Scratch:
    """A snapshot's usage as mutable copies, changed by :meth:`take` (for :meth:`Fragmentation.choose_gpus`)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        base = usage_of(snapshot)
        self.layout = base.layout
        self.gpu_milli, self.gpu_mem = base.gpu_milli.copy(), base.gpu_mem.copy()
        self.cpu, self.mem = base.cpu.copy(), base.mem.copy()

    def take(self, placement: InstancePlacement) -> None:
        for g in placement.gpus:
            self.gpu_milli[g] += placement.gpu_milli
            self.gpu_mem[g] += placement.gpu_mem_mib
        self.cpu[placement.machine] += placement.cpu_milli
        self.mem[placement.machine] += placement.mem_mib
