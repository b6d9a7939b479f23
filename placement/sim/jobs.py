"""A job as the simulator sees it: its demand, when it arrives, how long it really runs, and estimates.

Estimates arrive with the job (attached before replay by whatever estimator the caller chose), so
this package never imports the ML stack: ``estimates`` maps an estimator name (``user``, ``group``,
``model``, ...) to a predicted duration in seconds; NaN where that estimator has nothing to say.

The job's ``workload_class`` and ``reference_gpu_type`` say how its speed depends on its placement
(``placement.model.speed``): which measured workload it behaves like, and the GPU type its trace duration was
measured on. Empty means unknown: the job then runs at its trace speed wherever it is placed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from placement.model.demand import Job


@dataclass(frozen=True)
class SimJob:
    job: Job
    user: str
    submit_s: float
    duration_s: float
    estimates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    reference_gpu_type: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.submit_s) or not math.isfinite(self.duration_s) or self.duration_s < 0:
            raise ValueError(f"job {self.job.job_id}: submit and duration must be finite, duration >= 0")

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def workload_class(self) -> str:
        return self.job.workload_class

    def estimate(self, name: str) -> float:
        """The named estimate, falling back to the true duration's absence: NaN if not given."""
        return float(self.estimates.get(name, math.nan))


def without_sharing(jobs: Sequence[SimJob]) -> list[SimJob]:
    """The same jobs with every share of a GPU rounded up to a whole GPU: nobody shares a GPU."""
    return [job if not any(t.shares_gpu for t in job.job.tasks) else
            replace(job, job=replace(job.job, tasks=tuple(replace(t, gpu=1.0) if t.shares_gpu else t
                                                          for t in job.job.tasks))) for job in jobs]
