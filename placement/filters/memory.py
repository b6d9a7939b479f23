"""Filter ``memory``: an instance needs its memory (MiB) free on the machine."""

from __future__ import annotations

from placement.filters.base import Usage, largest
from placement.model.feasibility import Need
from placement.model.layout import MIB_PER_GIB, BoolArray, IntArray


class Memory:
    name = "memory"
    standing = False

    def applies(self, need: Need) -> bool:
        return True  # even asking for none: a machine already over its memory (a shrunk capacity) takes nothing

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        fits: BoolArray = usage.mem + need.mem_mib <= usage.layout.mem_cap
        return fits

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        return bool(usage.mem[machine] + need.mem_mib <= usage.layout.mem_cap[machine])

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        if self.fits_at(usage, need, machine):
            return None
        free = usage.layout.mem_cap[machine] - usage.mem[machine]
        return f"needs {need.mem_mib / MIB_PER_GIB:g} GiB memory, {free / MIB_PER_GIB:g} free"

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        free = largest(usage, "free memory", lambda: usage.layout.mem_cap - usage.mem, allowed) / MIB_PER_GIB
        return (f"{rejected:,} machines lack {need.mem_mib / MIB_PER_GIB:g} GiB free memory "
                f"(most free: {free:g} GiB)")

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        if not need.mem_mib:
            return None
        room: IntArray = (usage.layout.mem_cap - usage.mem) // need.mem_mib
        return room

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        if not need.mem_mib:
            return None
        return int(usage.layout.mem_cap[machine] - usage.mem[machine]) // need.mem_mib
