"""What one scheduling pass has learnt about waiting jobs that cannot start, so that it offers every
waiting job without asking the same question twice.

Within a pass the cluster only fills (jobs start, none ends), so:

* a job whose GPU part alone (GPUs or GPU shares per instance, instances, allowed types) finds no room
  cannot start later in the pass, nor can any job with the same GPU part;
* a job that fails the replay's necessary check (free totals, room per machine) cannot start later, nor
  can a job with the same GPU part that needs at least as much CPU and memory in every task;
* a job the placement policy refused is refused again for the same shape (same tasks).

Only necessary conditions are generalised by dominance; a policy's refusal is remembered for its exact
shape only, because a greedy policy may place a bigger job where it failed a smaller one.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

Sizes = tuple[tuple[int, int], ...]
"""Per task, (CPU milli, memory MiB) per instance."""


@dataclass
class PassMemo:
    shapes: set[Hashable] = field(default_factory=set)
    gpu_checked: dict[Hashable, bool] = field(default_factory=dict)
    """GPU part -> whether it found room when first asked in this pass."""
    frontier: dict[Hashable, list[Sizes]] = field(default_factory=dict)
    """GPU part -> minimal CPU and memory sizes known not to start."""

    def known_to_fail(self, gpu_part: Hashable, sizes: Sizes, shape: Hashable) -> bool:
        if shape in self.shapes or self.gpu_checked.get(gpu_part) is False:
            return True
        return any(_dominates(sizes, failed) for failed in self.frontier.get(gpu_part, ()))

    def could_not_start(self, gpu_part: Hashable, sizes: Sizes) -> None:
        kept = [failed for failed in self.frontier.get(gpu_part, ()) if not _dominates(failed, sizes)]
        self.frontier[gpu_part] = [*kept, sizes]

    def refused(self, shape: Hashable) -> None:
        self.shapes.add(shape)


def _dominates(sizes: Sizes, failed: Sizes) -> bool:
    """Whether ``sizes`` needs at least ``failed`` of CPU and of memory in every task."""
    return all(c >= fc and m >= fm for (c, m), (fc, fm) in zip(sizes, failed, strict=True))
