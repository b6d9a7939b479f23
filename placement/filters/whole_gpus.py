"""Filter ``whole-gpus``: an instance of whole GPUs needs that many free GPUs on one machine.

A GPU is free when neither a share nor any of its memory is taken; an instance of ``k`` whole GPUs
takes ``k`` free GPUs of one machine, all their share and memory.
"""

from __future__ import annotations

from placement.filters.base import Usage, largest
from placement.model.feasibility import Need
from placement.model.layout import BoolArray, IntArray


class WholeGpus:
    name = "whole-gpus"
    standing = False

    def applies(self, need: Need) -> bool:
        return need.whole_gpus > 0

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        if not need.whole_gpus:
            return usage.layout.derived.all_machines
        fits: BoolArray = usage.free_whole >= need.whole_gpus
        return fits

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        return bool(usage.free_whole[machine] >= need.whole_gpus)

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        if self.fits_at(usage, need, machine):
            return None
        return f"needs {need.whole_gpus} free GPU(s), {int(usage.free_whole[machine])} free"

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        types = "/".join(sorted(need.gpu_types)) + " " if need.gpu_types else ""
        free = int(largest(usage, "free whole GPUs", lambda: usage.free_whole, allowed))
        return f"no machine has {need.whole_gpus} free {types}GPUs (most free on one allowed machine: {free})"

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        if not need.whole_gpus:
            return None
        room: IntArray = usage.free_whole // need.whole_gpus
        return room

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        return int(usage.free_whole[machine]) // need.whole_gpus if need.whole_gpus else None
