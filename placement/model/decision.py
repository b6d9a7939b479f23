"""A placement decision: a verdict, the allocation if placed, and why - never an exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from placement.model.snapshot import Allocation


class Verdict(StrEnum):
    PLACED = "placed"
    UNSCHEDULABLE_NOW = "unschedulable-now"
    """Does not fit the cluster as it is allocated now; it would fit an empty cluster: waiting helps."""
    CAN_NEVER_FIT = "can-never-fit"
    """Does not fit this cluster even when nothing else runs: waiting cannot help."""


@dataclass(frozen=True)
class Decision:
    """What a policy decided for one job on the snapshot of ``generation``.

    ``score`` breaks the decision down (network cost, load, machines, racks, fragmentation);
    ``reasons`` says, for a job not placed, the top reasons with the number of machines each rules out.
    """

    job_id: str
    policy: str
    verdict: Verdict
    generation: int
    allocation: Allocation | None = None
    score: MappingProxyType[str, float] = field(default_factory=lambda: MappingProxyType({}))
    reasons: tuple[str, ...] = ()

    @property
    def placed(self) -> bool:
        return self.verdict is Verdict.PLACED
