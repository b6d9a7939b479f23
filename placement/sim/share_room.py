"""How many shares of one GPU's size the whole cluster could still take: a pass's vector check for jobs of many
GPU shares.

A job of ``k`` instances of a share ``s`` of a GPU can start only if the GPUs together take ``k`` more shares of
``s``: the sum over GPUs of ``free // s``, an upper bound of what the filters' room per machine allows (GPU
memory, CPU and memory aside, like ``placement.filters.gpu_share.GpuShare.room_bound``). The free totals do not
say it: a cluster of half-used GPUs has the milli-GPUs of a job of many 0.6 shares but room for none. Most of
the jobs a pass on a busy cluster passes over are such jobs; asked one by one, each cost the filters' room per
machine on the snapshot of the moment.

Counted from the histogram of the GPUs' free milli-GPUs (one pass over the GPUs per snapshot), times, for each
share size of the replay's jobs, ``free // s`` per level: every job's bound in one matrix product.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from placement.model.feasibility import Need
from placement.model.snapshot import MILLI, ClusterSnapshot

IntArray = npt.NDArray[np.int64]
_NEVER_SHORT = np.iinfo(np.int64).max
"""The room of the jobs not checked."""


class ShareRoom:
    """Per job of the replay, whether the cluster's GPUs could take its shares (jobs of one task of two or more
    instances of a share of a GPU that accept any GPU type; every other job passes)."""

    def __init__(self, needs: Sequence[tuple[Need, int, bool]]) -> None:
        """``needs``: per job, its one task's demand, instances and whether it accepts any GPU type (a job of
        several tasks comes with 0 instances: it is not checked)."""
        checked = [_counted(need, count, any_type) for need, count, any_type in needs]
        sizes = sorted({need.gpu_milli for (need, _, _), check in zip(needs, checked, strict=True) if check})
        size_at = {size: k for k, size in enumerate(sizes)}
        self.checks = bool(sizes)
        none = len(sizes)  # a row of its own for the jobs not checked: room never short
        self.size = np.array([size_at[need.gpu_milli] if check else none
                              for (need, _, _), check in zip(needs, checked, strict=True)], dtype=np.int64)
        self.count = np.array([count if check else 0 for (_, count, _), check in zip(needs, checked, strict=True)],
                              dtype=np.int64)
        levels = np.arange(MILLI + 1, dtype=np.int64)
        # whole numbers in floats, for a matrix product in BLAS: sums of at most 1,000 x the GPUs, exact
        self._floors = (levels[None, :] // np.array(sizes, dtype=np.int64).reshape(-1, 1)).astype(np.float64)
        self._kept: tuple[int, IntArray] = (-1, np.zeros(0, dtype=np.int64))

    def room(self, snapshot: ClusterSnapshot) -> IntArray:
        """Per share size, then one entry for the jobs not checked: how many shares the GPUs could take."""
        if self._kept[0] != snapshot.generation:
            histogram = np.bincount(MILLI - snapshot.gpu_milli_used, minlength=MILLI + 1).astype(np.float64)
            room = np.empty(len(self._floors) + 1, dtype=np.int64)
            room[:-1] = self._floors @ histogram
            room[-1] = _NEVER_SHORT
            self._kept = (snapshot.generation, room)
        return self._kept[1]

    def covers(self, snapshot: ClusterSnapshot, jobs: IntArray) -> npt.NDArray[np.bool_]:
        """Whether the GPUs could take the shares of each of ``jobs`` (indices)."""
        count = self.count[jobs]
        if not count.any():  # none of them is checked: the room need not be counted
            return np.ones(len(count), dtype=bool)
        found: npt.NDArray[np.bool_] = count <= self.room(snapshot)[self.size[jobs]]
        return found


def _counted(need: Need, count: int, any_type: bool) -> bool:
    return count > 1 and any_type and 0 < need.gpu_milli < MILLI and not need.whole_gpus
