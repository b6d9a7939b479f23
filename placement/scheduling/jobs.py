"""The jobs a scheduling cycle reads: pending ones (waiting in a queue) and running ones (started by it).

Both wrap a placement :class:`~placement.model.demand.Job`, whose ``priority`` is the job's priority (higher
goes first and may preempt lower). ``mode`` says whether the job runs within its queue's quota
(``guaranteed``) or on idle GPUs outside any quota, first to be preempted (``opportunistic``, as in AntMan).
Durations are estimates in seconds (P50 and P90, NaN where unknown); times (``submit_s``, ``started_s``,
the cycle's ``now``) are seconds on one clock the caller chooses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from placement.model.demand import Job


class JobMode(StrEnum):
    GUARANTEED = "guaranteed"
    OPPORTUNISTIC = "opportunistic"


@dataclass(frozen=True)
class DurationEstimate:
    """A job's estimated run time, seconds: its median and its 90th percentile (NaN where unknown)."""

    p50_s: float = math.nan
    p90_s: float = math.nan

    def __post_init__(self) -> None:
        for name in ("p50_s", "p90_s"):
            value = getattr(self, name)
            if not math.isnan(value) and (math.isinf(value) or value < 0):
                raise ValueError(f"{name} must be finite and >= 0 or NaN, got {value}")

    @property
    def expected_s(self) -> float:
        """The point estimate: P50, else P90, else NaN."""
        return self.p50_s if not math.isnan(self.p50_s) else self.p90_s

    @property
    def cautious_s(self) -> float:
        """The estimate to trust when being late costs someone else: P90, else P50, else NaN."""
        return self.p90_s if not math.isnan(self.p90_s) else self.p50_s


class _JobNames:
    """What pending and running jobs answer alike about the job they wrap."""

    job: Job

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def priority(self) -> int:
        return self.job.priority


@dataclass(frozen=True)
class PendingJob(_JobNames):
    job: Job
    queue: str
    submit_s: float
    mode: JobMode = JobMode.GUARANTEED
    estimate: DurationEstimate = field(default_factory=DurationEstimate)
    policy: str | None = None
    """The online placement policy that places it, by name (``schedule``'s ``policies``); ``None``: the cycle's."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.submit_s):
            raise ValueError(f"job {self.job.job_id!r}: submit_s must be finite, got {self.submit_s}")


@dataclass(frozen=True)
class RunningJob(_JobNames):
    """A job the scheduler started; its allocation is the snapshot's (``snapshot.allocations[job_id]``)."""

    job: Job
    queue: str
    started_s: float
    mode: JobMode = JobMode.GUARANTEED
    estimate: DurationEstimate = field(default_factory=DurationEstimate)

    def __post_init__(self) -> None:
        if not math.isfinite(self.started_s):
            raise ValueError(f"job {self.job.job_id!r}: started_s must be finite, got {self.started_s}")

    def estimated_end_s(self, cautious: bool = False) -> float:
        """started + estimated duration (P50, or P90 when ``cautious``); infinity when nothing is known."""
        duration = self.estimate.cautious_s if cautious else self.estimate.expected_s
        return self.started_s + duration if not math.isnan(duration) else math.inf

    def lost_gpu_s(self, now: float) -> float:
        """The work thrown away if it is preempted now, GPU-seconds: GPUs x seconds run (no checkpoint)."""
        return max(self.job.gpus, 0.0) * max(now - self.started_s, 0.0)
