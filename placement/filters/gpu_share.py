"""Filter ``gpu-share``: an instance sharing a GPU needs one GPU of the machine with its share and its
GPU memory free.

A GPU takes a share of ``s`` milli-GPUs needing ``g`` MiB when ``used_milli + s <= 1000`` and
``used_mem + g <= capacity`` (and it has memory at all); ``g`` is the demand's GPU memory, or
``floor(share x capacity)`` when the demand's memory is proportional
(``placement.model.feasibility.proportional_mib``). The share and the memory must be free on the same GPU,
so the rule is checked GPU by GPU. A machine's few GPUs are worked on as Python integers, the many GPUs of a
large node (more than ``FEW_GPUS_PER_MACHINE``) in numpy.
"""

from __future__ import annotations

import numpy as np

from placement.filters.base import UNBOUNDED, Usage, largest
from placement.model.feasibility import Need
from placement.model.layout import (
    FEW_GPUS_PER_MACHINE as FEW_GPUS_PER_MACHINE,  # read here by the policies (tests set it)
)
from placement.model.layout import MIB_PER_GIB, MILLI, BoolArray, IntArray, Layout, frozen


def share_mem_per_gpu(layout: Layout, need: Need, span: slice) -> IntArray:
    """GPU memory (MiB) one share of ``need`` takes on each GPU of ``span`` (read-only)."""
    shared = share_mem(layout, need)
    return np.full(span.stop - span.start, shared) if isinstance(shared, int) else shared[span]


def proportional_per_gpu(caps: IntArray, share: float) -> IntArray:
    """``proportional_mib`` on every GPU of memory ``caps``."""
    per_gpu: IntArray = np.floor(share * caps + 1e-9).astype(np.int64)
    return per_gpu


def share_room_per_gpu(milli: IntArray, mem: IntArray, caps: IntArray, need: Need, per_gpu: IntArray) -> IntArray:
    """How many more shares of ``need`` each GPU takes (used share ``milli``, used memory ``mem``, memory ``caps``;
    ``per_gpu``: :func:`share_mem_per_gpu` of these GPUs)."""
    by_mem = np.where(per_gpu > 0, (caps - mem) // np.maximum(per_gpu, 1), UNBOUNDED)
    room: IntArray = np.where(caps > 0, np.minimum((MILLI - milli) // need.gpu_milli, by_mem), 0).clip(min=0)
    return room


def fitting_gpus(milli: list[int], mem: list[int], caps: list[int], need: Need) -> list[int]:
    """Positions of the GPUs (given as Python lists) that take one more share of ``need``."""
    return [i for i, (m, g, cap) in enumerate(zip(milli, mem, caps, strict=True))
            if cap > 0 and m + need.gpu_milli <= MILLI and g + need.gpu_mem_on(cap) <= cap]


def shares_on(usage: Usage, need: Need, machine: int, enough: int = UNBOUNDED) -> int:
    """How many more shares of ``need`` the GPUs of ``machine`` take (counting stops at ``enough`` on
    machines with few GPUs; a machine with many is counted in numpy)."""
    layout = usage.layout
    first = int(layout.gpu_first[machine])
    span = slice(first, first + int(layout.gpu_count[machine]))
    if span.stop - span.start > FEW_GPUS_PER_MACHINE:
        if enough == 1:  # whether one GPU takes a share: four array operations, not the count of every GPU's room
            caps, mem_need = layout.gpu_mem_cap[span], share_mem(layout, need)
            per_gpu = mem_need if isinstance(mem_need, int) else mem_need[span]
            return int(bool(np.any((usage.gpu_milli[span] + need.gpu_milli <= MILLI) & (caps > 0)
                                   & (usage.gpu_mem[span] + per_gpu <= caps))))
        return int(share_room_per_gpu(usage.gpu_milli[span], usage.gpu_mem[span], layout.gpu_mem_cap[span],
                                      need, share_mem_per_gpu(layout, need, span)).sum())
    room = 0
    for used, mem, cap in zip(usage.gpu_milli[span].tolist(), usage.gpu_mem[span].tolist(),
                              layout.gpu_mem_cap[span].tolist(), strict=True):
        per_gpu = need.gpu_mem_on(cap)
        if cap > 0:
            room += max(0, min((MILLI - used) // need.gpu_milli, (cap - mem) // per_gpu if per_gpu > 0 else UNBOUNDED))
        if room >= enough:
            break
    return room


def share_mem(layout: Layout, need: Need) -> int | IntArray:
    """GPU memory (MiB) one share of ``need`` takes: its own figure, or per GPU of the layout in proportion (kept
    per share with the layout: the same few shares come again and again; read-only)."""
    if need.gpu_mem_mib >= 0:
        return need.gpu_mem_mib
    return layout.derived.share_mem.get(need.share_mem,
                                        lambda: frozen(proportional_per_gpu(layout.gpu_mem_cap, need.share_mem)))


class GpuShare:
    name = "gpu-share"
    standing = False

    def applies(self, need: Need) -> bool:
        return not need.whole_gpus and need.gpu_milli > 0

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        if not self.applies(need):
            return usage.layout.derived.all_machines
        layout = usage.layout
        cap = layout.gpu_mem_cap
        mem_need = share_mem(layout, need)
        on_gpu = (usage.gpu_milli + need.gpu_milli <= MILLI) & (usage.gpu_mem + mem_need <= cap) & (cap > 0)
        fits: BoolArray = np.zeros(len(layout.cpu_cap), dtype=bool)
        fits[layout.gpu_machine[on_gpu]] = True  # a machine passes if any of its GPUs does
        return fits

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        return not self.applies(need) or shares_on(usage, need, machine, 1) > 0

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        if self.fits_at(usage, need, machine):
            return None
        return f"no GPU with a free share of {need.gpu_milli / MILLI:g} and its GPU memory"

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        layout = usage.layout
        on_allowed = allowed[layout.gpu_machine]
        share = f"{need.gpu_milli / MILLI:g} of a GPU"
        largest_share = largest(usage, "free share", lambda: MILLI - usage.gpu_milli, on_allowed) / MILLI
        if need.gpu_mem_mib >= 0:
            largest_mem = largest(usage, "free GPU memory", lambda: layout.gpu_mem_cap - usage.gpu_mem,
                              on_allowed) / MIB_PER_GIB
            return (f"needs {share} with {need.gpu_mem_mib / MIB_PER_GIB:g} GiB GPU memory on one GPU; largest "
                    f"free share {largest_share:g}, largest free GPU memory {largest_mem:g} GiB")
        return f"no GPU has {share} free (largest free share {largest_share:g})"

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        """Shares by milli-GPUs alone, GPU by GPU (GPU memory aside: a bound, cheap)."""
        if not self.applies(need):
            return None
        milli, layout = need.gpu_milli, usage.layout

        def make() -> IntArray:
            return layout.per_machine((MILLI - usage.gpu_milli) // milli)

        return usage.remember(("gpu-share room", milli), make)

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        return shares_on(usage, need, machine) if self.applies(need) else None
