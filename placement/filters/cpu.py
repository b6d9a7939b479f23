"""Filter ``cpu``: an instance needs its CPU (milli-cores) free on the machine."""

from __future__ import annotations

from placement.filters.base import Usage, largest
from placement.model.feasibility import Need
from placement.model.layout import MILLI, BoolArray, IntArray


class Cpu:
    name = "cpu"
    standing = False

    def applies(self, need: Need) -> bool:
        return True  # even asking for none: a machine already over its CPU (a shrunk capacity) takes nothing

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        fits: BoolArray = usage.cpu + need.cpu_milli <= usage.layout.cpu_cap
        return fits

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        return bool(usage.cpu[machine] + need.cpu_milli <= usage.layout.cpu_cap[machine])

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        if self.fits_at(usage, need, machine):
            return None
        free = usage.layout.cpu_cap[machine] - usage.cpu[machine]
        return f"needs {need.cpu_milli / MILLI:g} CPU cores, {free / MILLI:g} free"

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        free = largest(usage, "free cpu", lambda: usage.layout.cpu_cap - usage.cpu, allowed) / MILLI
        return f"{rejected:,} machines lack {need.cpu_milli / MILLI:g} free CPU cores (most free: {free:g})"

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        if not need.cpu_milli:
            return None
        room: IntArray = (usage.layout.cpu_cap - usage.cpu) // need.cpu_milli
        return room

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        if not need.cpu_milli:
            return None
        return int(usage.layout.cpu_cap[machine] - usage.cpu[machine]) // need.cpu_milli
