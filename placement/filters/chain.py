"""The filters composed for one demand: the machines that pass them all, the first one each machine
fails (as a code, and in words), and how many more instances they let a machine take together.

A machine's code is 0 when it passes every filter, else ``k``: it fails the k-th filter of
``placement.filters.FILTERS`` (1-based) and every filter before it passes. Only the filters that apply
to the demand are asked (:class:`Chain`, made once per demand).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.filters import FILTERS
from placement.filters.base import UNBOUNDED, Filter, Usage
from placement.model.feasibility import Need
from placement.model.layout import BoolArray, IntArray

OK = 0
CODED: tuple[tuple[int, Filter], ...] = tuple(enumerate(FILTERS.values(), 1))
"""Every filter with its code."""
LAST_AT_ONE_MACHINE = ("gpu-share",)
"""Filters that walk a machine's GPUs: asked last where only whether a machine passes matters."""
_CHAINS_MAX = 4096


@dataclass(frozen=True)
class Chain:
    """The filters that apply to one demand, in registry order, each with its code."""

    need: Need
    coded: tuple[tuple[int, Filter], ...]
    cheap_first: tuple[Filter, ...]
    """The same filters, those that walk a machine's GPUs last."""

    def passing(self, usage: Usage) -> BoolArray:
        """Per machine: whether it passes every filter (a new array, the caller's to change)."""
        return self.masks(usage)[0]

    def masks(self, usage: Usage) -> tuple[BoolArray, list[BoolArray]]:
        """:meth:`passing`, and each filter's mask in order (for :meth:`codes`, while the usage is unchanged)."""
        masks = [f.mask(usage, self.need) for _, f in self.coded]
        if not masks:
            return usage.layout.derived.all_machines.copy(), masks
        ok = masks[0] & masks[1] if len(masks) > 1 else masks[0].copy()
        for mask in masks[2:]:
            ok &= mask
        return ok, masks

    def first_failing(self, usage: Usage) -> IntArray:
        """Per machine: the code of the first filter it fails, 0 if none (later filters written first)."""
        return self.codes([f.mask(usage, self.need) for _, f in self.coded], len(usage.layout.cpu_cap))

    def codes(self, masks: list[BoolArray], machines: int) -> IntArray:
        """:meth:`first_failing` from the filters' masks (as :meth:`masks` gives them)."""
        codes = np.zeros(machines, dtype=np.int64)
        for (code, _), mask in zip(reversed(self.coded), reversed(masks), strict=True):
            codes[~mask] = code  # an earlier filter, written later, wins
        return codes

    def passes_at(self, usage: Usage, machine: int) -> bool:
        """Whether ``machine`` passes every filter (:meth:`passing` for one machine)."""
        need = self.need
        return all(f.fits_at(usage, need, machine) for f in self.cheap_first)

    def first_failing_at(self, usage: Usage, machine: int) -> int:
        """:meth:`first_failing` for one machine."""
        for code, f in self.coded:
            if not f.fits_at(usage, self.need, machine):
                return code
        return OK

    def reason_at(self, usage: Usage, machine: int) -> str | None:
        """Why ``machine`` cannot host one more instance, from the first filter it fails; ``None`` if it can."""
        for _, f in self.coded:
            reason = f.reason(usage, self.need, machine)
            if reason is not None:
                return reason
        return None

    def room(self, usage: Usage, passing: BoolArray) -> npt.NDArray[np.int32]:
        """Per machine: at most how many more instances it takes together by the filters (``room_bound``; up to
        ``UNBOUNDED``), 0 where it does not pass (``passing``, as :meth:`passing` gives it on ``usage``)."""
        bound = room_bound(usage, self.need, (f.name for _, f in self.coded))
        room = np.zeros(len(passing), dtype=np.int32)  # UNBOUNDED fits: half the memory
        room[passing] = UNBOUNDED if bound is None else np.minimum(bound, UNBOUNDED)[passing]
        return room

    def room_at(self, usage: Usage, machine: int) -> int:
        """How many more instances ``machine`` takes by every filter (up to ``UNBOUNDED``)."""
        room = UNBOUNDED
        for _, f in self.coded:
            limit = f.room_at(usage, self.need, machine)
            if limit is not None and limit < room:
                room = limit
        return max(0, room)


_chains: dict[Need, Chain] = {}


def chain_for(need: Need) -> Chain:
    """The filters that apply to ``need`` (remembered per demand; the table is emptied when full)."""
    found = _chains.get(need)
    if found is None:
        if len(_chains) >= _CHAINS_MAX:
            _chains.clear()
        coded = tuple((code, f) for code, f in CODED if f.applies(need))
        cheap_first = tuple(sorted((f for _, f in coded), key=lambda f: f.name in LAST_AT_ONE_MACHINE))
        found = _chains[need] = Chain(need, coded, cheap_first)
    return found


def room_bound(usage: Usage, need: Need, names: Iterable[str]) -> IntArray | None:
    """Per machine: at most how many more instances of ``need`` the filters ``names`` let it take together
    (``None``: none of them limits the count)."""
    room: IntArray | None = None
    for name in names:
        limit = FILTERS[name].room_bound(usage, need)
        if limit is not None:
            room = limit if room is None else np.minimum(room, limit)
    return room
