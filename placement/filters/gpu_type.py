"""Filter ``gpu-type``: an instance with GPUs goes only to a machine of a GPU type it accepts.

The demand's ``gpu_types`` is an any-of constraint; empty accepts every type. The rule reads the layout
only (standing): the machines of the accepted types are worked out once per layout and set of types
(``Derived.type_masks``).
"""

from __future__ import annotations

import numpy as np

from placement.filters.base import UNBOUNDED, Usage
from placement.model.feasibility import Need
from placement.model.layout import BoolArray, IntArray, Layout


def type_mask_of(layout: Layout, types: frozenset[str]) -> BoolArray:
    """Machines of ``layout`` with one of ``types`` (read-only; worked out once per layout and types,
    ``Derived.type_masks``)."""

    def make() -> BoolArray:
        allowed = [i for i, t in enumerate(layout.gpu_types) if t in types]
        mask = np.isin(layout.gpu_type, allowed)
        mask.flags.writeable = False
        return mask

    return layout.derived.type_masks.get(types, make)


class GpuType:
    name = "gpu-type"
    standing = True

    def applies(self, need: Need) -> bool:
        return bool(need.gpu_types)

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        if not need.gpu_types:
            return usage.layout.derived.all_machines
        return type_mask_of(usage.layout, need.gpu_types)

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        return not need.gpu_types or bool(type_mask_of(usage.layout, need.gpu_types)[machine])

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        if self.fits_at(usage, need, machine):
            return None
        layout = usage.layout
        return f"GPU type {layout.gpu_types[int(layout.gpu_type[machine])]} not in {sorted(need.gpu_types)}"

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        return f"{rejected:,} machines have no {'/'.join(sorted(need.gpu_types))} GPUs"

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        if not need.gpu_types:
            return None
        layout, types = usage.layout, need.gpu_types
        return layout.derived.type_rooms.get(types, lambda: _room(type_mask_of(layout, types)))

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        return None if self.fits_at(usage, need, machine) else 0


def _room(mask: BoolArray) -> IntArray:
    room: IntArray = np.where(mask, UNBOUNDED, 0).astype(np.int64)
    room.flags.writeable = False
    return room
