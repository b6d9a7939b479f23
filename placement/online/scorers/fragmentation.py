"""Scorer ``fragmentation``: FGD's node score (Weng et al., ATC'23). The cost of a machine is the least
expected fragmentation (milli-GPUs) that placing the instance there adds, over the ways of placing it
(``placement.online.frag_measure``), for the typical shapes of the jobs this scorer was asked about
(``placement.online.shape_mix``: learned online, never read from a trace). :meth:`Fragmentation.choose_gpus`
then puts each share of a placed job on the GPU that adds the least (counted in the same score, the
lowest-indexed GPU among those with the best score, as FGD's plugin chooses), which the greedy step alone
does not choose (it takes the fullest GPU that fits).

The cost is FGD's node score, negated (``placement.online.frag_measure.score_steps``): the integer part of
100 x sigmoid(-added / 1000), one point of which is ``STEP_MILLI`` (40 milli-GPUs) around zero and ever more
further out, so that all machines where the instance would strand about four GPUs' worth or more score alike.
Machines with the same score tie, and the greedy step gives a tie to the first machine in cluster order (the
Kubernetes scheduler FGD runs in gives it to the first node by name, and FGD's simulator names its nodes in
an order drawn per seed, which ``gpuplace simulate fill`` draws the same way). Near-equal choices therefore
pack onto the machines already in use and later machines stay whole. On FGD's own cluster and arrivals
(the GPU nodes of the openb traces, seeds 42, 43, 44 and 47 of the default pod list, 100% arrived), points
counted evenly in steps of 40 milli-GPUs left 5.32, 5.16, 4.83 and 5.84% of the GPUs unallocated, FGD's
score 4.85, 4.88, 4.76 and 5.20%: with even steps, a machine where an instance strands a whole GPU still
loses to one where it strands a little less, and the pods spread over machines that FGD's score leaves alike.
``step_milli=None`` gives the exact costs.

An instance without GPUs also pays half a step on a machine with GPUs. The measure only sees the CPU it
takes from a GPU machine once a typical shape no longer fits there; until then CPU-only pods go to the
first machine in order, GPU machines included (on the default pod list, seed 42, 130% arrived: 12,261
cores of CPU-only pods on GPU machines while the machines without GPUs had 5,867 cores free; 7,468 and
1,074 with the half step). On the shipped pod lists this changed no GPU placement's outcome (the same
unallocated shares to four decimals over seeds 42-51): CPU was not what the failed pods lacked there.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from placement.filters.gpu_share import FEW_GPUS_PER_MACHINE
from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import Need, need_of, violations
from placement.model.layout import MILLI, BoolArray, FloatArray, IntArray, Layout
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement
from placement.online.frag_kernel import KernelTable, added_on, kernel_table
from placement.online.frag_measure import (
    NO_GPU,
    MachineUsage,
    Measured,
    ShapeTable,
    added,
    added_both,
    rows_of,
    score_steps,
    with_room,
)
from placement.online.greedy import Step
from placement.online.machine_states import MachineStates
from placement.online.scorers.base import Costs
from placement.online.shape_mix import Mix, ShapeMix
from placement.online.working import WorkingState

ENTRY_LIMIT = 128
"""Instance demands whose costs are kept at once (the table is emptied when full)."""
STEP_MILLI = 40.0
"""The resolution of the cost (expected milli-GPUs of fragmentation added): FGD's one score point near zero."""
GPU_MACHINE_STEPS = 0.5
"""What an instance without GPUs pays, in steps, on a machine with GPUs: less than a step, so it goes to a
machine without GPUs only among machines where it adds the same fragmentation."""

CostKey = tuple[int, int, int, float, int]
"""What a machine's cost depends on in a demand: whole GPUs, share, GPU memory (explicit, proportional), CPU."""


def cost_key(need: Need) -> CostKey:
    return need.whole_gpus, need.gpu_milli, need.gpu_mem_mib, need.share_mem, need.cpu_milli


class _Costs:
    """Per machine state (by id): the cost of one demand, that cost in steps as :meth:`Fragmentation.cost`
    answers it, the GPU :meth:`Fragmentation.choose_gpus` gives a share of it there (``NO_GPU`` for other
    demands) and whether they were worked out."""

    def __init__(self) -> None:
        self.cost: FloatArray = np.zeros(0)
        self.steps: FloatArray = np.zeros(0)
        self.gpu: IntArray = np.zeros(0, dtype=np.int64)
        self.known: BoolArray = np.zeros(0, dtype=bool)

    def fit(self, size: int) -> None:
        """Make room for ``size`` states."""
        if len(self.known) < size:
            self.cost, self.steps = with_room(self.cost, size, 0.0), with_room(self.steps, size, 0.0)
            self.gpu, self.known = with_room(self.gpu, size, NO_GPU), with_room(self.known, size, False)


class _Seen:
    """What the scorer knows of the machines of one layout: the ids of their states (``MachineStates``) and, under
    one mix, what it worked out per state: per demand its costs, per state its tallies and measure."""

    def __init__(self, layout: Layout, step_milli: float | None) -> None:
        self.layout, self.step_milli = layout, step_milli
        self.states = MachineStates(layout)
        self.epoch = self.states.epoch
        self.mix: Mix | None = None
        self.table: ShapeTable | None = None
        self.entries: dict[CostKey, _Costs] = {}
        self.measured: Measured | None = None
        self.kernel: KernelTable | None = None

    def use(self, mix: Mix) -> ShapeTable:
        """The shape table of ``mix``; what was worked out under another mix is dropped (the tallies are kept
        while the levels hold)."""
        if self.mix is None or self.table is None or mix.version != self.mix.version:
            table = ShapeTable.of(mix, self.layout)
            self.measured = Measured(table) if self.measured is None else self.measured.retable(table)
            self.mix, self.table, self.entries = mix, table, {}
            self.kernel = kernel_table(table)
        return self.table

    def follow(self, working: WorkingState) -> IntArray:
        """Per machine, the id of its state in ``working``."""
        ids = self.states.follow(working)
        if self.states.epoch != self.epoch:  # the ids were given afresh: nothing kept by id holds
            self.epoch, self.entries = self.states.epoch, {}
            if self.table is not None:
                self.measured = Measured(self.table)
        return ids

    def costs(self, working: WorkingState, ids: IntArray, need: Need, wanted: BoolArray,
              among: IntArray | None = None) -> _Costs:
        """The costs of ``need``, worked out for the states of the ``wanted`` machines (``ids``: per machine,
        the id of its state, from :meth:`follow` on ``working``; with ``among``, ``wanted`` is of those machines)."""
        key = cost_key(need)
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= ENTRY_LIMIT:
                self.entries.clear()
            entry = self.entries[key] = _Costs()
        size = len(self.states)
        entry.fit(size)
        stale = np.flatnonzero(wanted & ~entry.known[ids if among is None else ids[among]])
        if among is not None:
            stale = among[stale]
        if len(stale):
            at = ids[stale]
            mark = np.zeros(size, dtype=bool)
            mark[at] = True
            todo = np.flatnonzero(mark)
            where = np.empty(size, dtype=np.int64)
            where[at] = stale  # a machine in each state: any of them, they are alike
            machines = where[todo]
            cost, gpu = self._added(working, machines, todo, need)
            steps = cost if self.step_milli is None else score_steps(cost, self.step_milli)
            if not need.gpu_milli:
                steps = steps + GPU_MACHINE_STEPS * (self.layout.gpu_count[machines] > 0)
            entry.cost[todo], entry.steps[todo], entry.gpu[todo], entry.known[todo] = cost, steps, gpu, True
        return entry

    def share_gpu(self, usage: MachineUsage, machine: int, need: Need) -> int:
        """The GPU (position on ``machine``) a share of ``need`` adds the least on in ``usage``, in steps; ``NO_GPU``
        if none: compiled on a machine of a few GPUs, in numpy on a large one."""
        assert self.table is not None and self.kernel is not None  # set by use, called first
        at = np.array([machine])
        if self.layout.gpu_count.item(machine) <= FEW_GPUS_PER_MACHINE:
            costs, gpus = added_on(usage, at, self.kernel, need, self.step_milli)
        else:
            costs, gpus = added(rows_of(usage, at), need, self.table, self.step_milli)
        return int(gpus[0]) if math.isfinite(costs[0]) else NO_GPU

    def _added(self, usage: MachineUsage, machines: IntArray, ids: IntArray, need: Need) -> tuple[FloatArray, IntArray]:
        """The exact costs of :func:`added` on ``machines`` (in the states ``ids``) and, for a share, the GPU it
        gives counted in steps: compiled (``frag_kernel``) on machines of a few GPUs; each large machine alone in
        numpy, from the kept parts of its measure (the rows of the others are not widened to its GPUs)."""
        table, measured, kernel = self.table, self.measured, self.kernel
        assert table is not None and measured is not None and kernel is not None  # set by use, called first
        large = self.layout.gpu_count[machines] > FEW_GPUS_PER_MACHINE
        if not large.any():
            return added_on(usage, machines, kernel, need, self.step_milli)
        cost, gpu = np.zeros(len(machines)), np.full(len(machines), NO_GPU, dtype=np.int64)
        small = np.flatnonzero(~large)
        if len(small):
            cost[small], gpu[small] = added_on(usage, machines[small], kernel, need, self.step_milli)
        measured.fit(len(self.states))
        for k in np.flatnonzero(large).tolist():
            pick = np.array([k])
            at = ids[pick]
            measured.prepare(usage, machines[pick], at)
            if not need.gpu_milli or need.whole_gpus:
                grown, fits = measured.added_whole(at, need.whole_gpus, need.cpu_milli)
                cost[k] = grown[0] / table.norm[measured.gpu_type[at[0]]] if fits[0] else np.inf
            else:
                rows = rows_of(usage, machines[pick])
                cost[pick], _, gpu[pick] = added_both(rows, measured.tally(at), measured.before[at], need, table, None,
                                                      self.step_milli)
        return cost, gpu


class Fragmentation:
    """See the module docstring. Each instance learns from the jobs it is asked about on its own."""

    name = "fragmentation"
    unit = "FGD's node score lost: 100 x sigmoid(-expected fragmentation added / 1000 milli-GPUs), rounded down"

    def __init__(self, mix: ShapeMix | None = None, step_milli: float | None = STEP_MILLI) -> None:
        if step_milli is not None and not step_milli > 0:
            raise ValueError(f"step_milli must be positive, got {step_milli}")
        self.mix = mix if mix is not None else ShapeMix()
        self.step_milli = step_milli
        self._seen: _Seen | None = None

    def cost(self, step: Step) -> Costs | None:
        ok = step.candidates.ok
        entry, ids = self._costs(step.working, step.job, step.need, ok)
        result: FloatArray = np.where(ok, entry.steps[ids], 0.0)
        return result

    def local(self, step: Step) -> bool:
        return True  # a machine's cost follows its state, and the mix changes only as a new job is asked about

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        ok = step.candidates.ok[machines]
        entry, ids = self._costs(step.working, step.job, step.need, ok, machines)
        result: FloatArray = np.where(ok, entry.steps[ids[machines]], 0.0)
        return result

    def _costs(self, working: WorkingState, job: Job, need: Need, wanted: BoolArray,
               among: IntArray | None = None) -> tuple[_Costs, IntArray]:
        """The costs of ``need`` by state, worked out for the ``wanted`` machines (of ``among``, if given), and per
        machine its state's id."""
        self.mix.observe(job)
        mix = self.mix.current()
        seen = self._seen
        if seen is None or seen.layout is not working.layout:
            seen = self._seen = _Seen(working.layout, self.step_milli)
        seen.use(mix)
        ids = seen.follow(working)
        return seen.costs(working, ids, need, wanted, among), ids

    def choose_gpus(self, snapshot: ClusterSnapshot, job: Job, decision: Decision) -> Decision:
        """``decision`` with each share of its job moved to the GPU of its machine that adds the least
        fragmentation, one instance after the other; unchanged if that does not hold up (a later
        instance would no longer fit) or the job holds no share."""
        allocation = decision.allocation
        if allocation is None or not any(p.gpus and p.gpu_milli < MILLI for p in allocation.instances):
            return decision
        seen = self._seen
        if seen is None or seen.layout is not snapshot.layout or seen.kernel is None:
            return decision
        usage = WorkingState(snapshot)
        moved: list[InstancePlacement] = []
        last = len(allocation.instances) - 1
        for k, placement in enumerate(allocation.instances):
            chosen = self._gpu_for(usage, need_of(job.tasks[placement.task]), placement, seen)
            if chosen is None:
                return decision
            if k < last:
                usage.put(chosen)
            moved.append(chosen)
        better = Allocation(allocation.job_id, tuple(moved))
        if better == allocation or violations(snapshot, job, better):
            return decision
        return replace(decision, allocation=better)

    @staticmethod
    def _gpu_for(usage: WorkingState, need: Need, placement: InstancePlacement,
                 seen: _Seen) -> InstancePlacement | None:
        """``placement`` on the GPU of its machine that adds the least, in FGD's score points (the
        lowest-indexed among those with the best score; shares only: whole GPUs and CPU stay where they are if still
        free); ``None`` where it no longer fits. On a machine still as the snapshot has it, the GPU worked out
        with the machine's cost, if any, is the answer."""
        machine = placement.machine
        first = usage.layout.gpu_first.item(machine)
        if not (placement.gpus and placement.gpu_milli < MILLI):
            return placement if not placement.gpus or all(
                usage.gpu_milli.item(g) == 0 and usage.gpu_mem.item(g) == 0 for g in placement.gpus) else None
        states = seen.states
        entry = seen.entries.get(cost_key(need)) if states.base is usage.snapshot and machine not in usage.touched() \
            else None
        at = states.base_state.item(machine)
        if entry is not None and at < len(entry.known) and entry.known[at]:
            gpu = entry.gpu.item(at) if np.isfinite(entry.cost[at]) else NO_GPU
        else:
            gpu = seen.share_gpu(usage, machine, need)
        if gpu == NO_GPU:
            return None
        chosen = first + gpu
        return InstancePlacement(placement.task, machine, (chosen,), placement.gpu_milli,
                                 need.gpu_mem_on(usage.layout.gpu_mem_cap.item(chosen)), placement.cpu_milli,
                                 placement.mem_mib)
