"""The ids of the machines' states (``placement.model.states``), followed as decisions are built.

A decision's working state differs from its snapshot only on the machines it took instances on: the ids of the
others are the snapshot's (``ClusterSnapshot.state_ids``, worked out once per snapshot, from the snapshot followed
before where there is one), the machines it took instances on are hashed, and a machine back to the snapshot's
usage gets the snapshot's id back.
"""

from __future__ import annotations

import numpy as np

from placement.model.layout import IntArray, Layout
from placement.model.snapshot import ClusterSnapshot
from placement.model.states import STATE_LIMIT
from placement.online.working import WorkingState


class MachineStates:
    """Per machine of one layout, the id of its state in the working state last followed."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.registry = layout.derived.state_ids
        self.epoch = self.registry.epoch
        """The epoch of the ids followed: what was kept by id under another one no longer holds."""
        self.state = np.zeros(len(layout.cpu_cap), dtype=np.int64)
        self.base: ClusterSnapshot | None = None
        self.base_state = self.state
        self.differs: set[int] = set()
        """Machines where the usage last followed may differ from the base snapshot's."""
        self.working: WorkingState | None = None
        self.working_seen = (0, 0)
        """How many takes of ``working`` were followed, and its changes then (a restore is a change, no take)."""

    def __len__(self) -> int:
        """How many ids are given so far (every id is below)."""
        return len(self.registry)

    def follow(self, working: WorkingState) -> IntArray:
        """Per machine, the id of its state in ``working`` (read-only; valid until the next call)."""
        registry = self.registry
        if len(registry) > STATE_LIMIT:
            registry.forget()
        if registry.epoch != self.epoch:
            self.epoch, self.base = registry.epoch, None
        snapshot, touched = working.snapshot, working.touched()
        on = set(touched)
        if snapshot is not self.base:
            self.base_state = snapshot.state_ids(near=self.base)
            self.base, self.state, self.differs = snapshot, self.base_state.copy(), set()
            suspects = on
        elif working is self.working and working.changes - self.working_seen[1] == len(touched) - self.working_seen[0]:
            suspects = set(touched[self.working_seen[0]:])  # only takes since: the others were followed
        else:
            suspects = self.differs | on
        back = [m for m in suspects if m not in on]
        if back:
            self.state[back] = self.base_state[back]
        moved = sorted(suspects & on)
        if moved:
            self.state[moved] = registry.of(working.gpu_milli, working.gpu_mem, working.cpu,
                                            np.array(moved, dtype=np.int64))
        self.differs = on
        self.working, self.working_seen = working, (len(touched), working.changes)
        return self.state
