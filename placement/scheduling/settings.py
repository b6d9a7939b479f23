"""The switches and limits of a scheduling cycle."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulingSettings:
    preemption: bool = True
    """Let a guaranteed job preempt opportunistic jobs, lower-priority jobs of its queue and borrowed capacity."""
    reserve_heads: bool = True
    """Reserve a place for each queue's first job that waits for capacity, so backfilling never delays it."""
    prescheduling_horizon_s: float = 0.0
    """Reserve the place of a running job estimated to end within this many seconds for a waiting job that
    fits there (Liquid's pre-scheduling); 0 turns it off."""
    max_reservations: int = 8
    """Reservations held at once (each costs placement calls in every later decision of the cycle)."""
    opportunistic_after_s: float = math.inf
    """A guaranteed job that has waited this long over its quota may start opportunistically (AntMan)."""
    max_victims: int = 64
    """Running jobs considered as victims for one preemptor, cheapest first."""
    explain_waits: bool = True
    """Tell a waiting job that fits nowhere the placement policy's reasons (what the filters rule out, in words),
    where the policy gives them. Without, the same plan, less those words: worth it where nobody reads them (the
    service's passes; a reader of why jobs wait has a plan made with them)."""

    def __post_init__(self) -> None:
        if not (self.prescheduling_horizon_s >= 0 and not math.isinf(self.prescheduling_horizon_s)):
            raise ValueError(f"prescheduling_horizon_s must be finite and >= 0, got {self.prescheduling_horizon_s}")
        if not self.opportunistic_after_s >= 0:
            raise ValueError(f"opportunistic_after_s must be >= 0, got {self.opportunistic_after_s}")
        if self.max_reservations < 0 or self.max_victims < 0:
            raise ValueError("max_reservations and max_victims must be >= 0")
