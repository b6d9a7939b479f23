"""What an estimate of a submitted job is, and the one protocol every estimator the service answers with
follows.

A job is estimated task by task: the caller gives one record per task (canonical job fields), the
estimator answers one :class:`TaskEstimate` per record, and :func:`job_estimate` combines them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, TypeAlias

RecordValue: TypeAlias = str | int | float | bool | None
JobRecord: TypeAlias = Mapping[str, RecordValue]
"""One task of a submitted job as canonical job fields (``req_gpu``, ``user``, ``hyperparams`` as JSON
text, ...; ``training.pipeline.bundle.JOB_COLUMNS``)."""
Json: TypeAlias = str | int | float | bool | list["Json"] | dict[str, "Json"] | None
NeedsAnswer: TypeAlias = Mapping[str, Json]
"""What a task's stated hyperparameters answer (``training.needs``): per need its P50 and P90, unit and
the measurements it was learned from."""

TARGET_UNITS: Mapping[str, str] = MappingProxyType({
    "duration": "s",
    "gpu_request": "GPUs", "cpu_request": "cores", "mem_request": "GiB", "bandwidth_request": "Gbit/s",
    "gpu": "GPUs", "cpu": "cores", "mem": "GiB", "gpu_mem": "GiB", "bandwidth": "Gbit/s",
})
"""The unit of each target's estimates (``training.features.targets``): ``*_request`` is what a job will ask
for, the bare name what it will use, per instance."""


def unit_of(target: str) -> str:
    """``target``'s unit; empty for a target this table does not know."""
    return TARGET_UNITS.get(target, "")


@dataclass(frozen=True)
class Quantiles:
    """One estimate in ``unit``: a point estimate, the median and the 90th percentile, and ``mean``, the
    expected value, where the estimator gives one."""

    point: float
    p50: float
    p90: float
    unit: str
    mean: float | None = None


@dataclass(frozen=True)
class TaskEstimate:
    """What one task will need, from one model version."""

    model_version: str
    targets: Mapping[str, Quantiles | None]
    """Per target (``duration``, ``gpu_request``, ...), its estimate; ``None`` where it is unknown."""
    sources: Mapping[str, str] | None = None
    """The trace each target was trained on; ``None`` when no trained model answered."""
    needs: NeedsAnswer | None = None
    """What the task's stated hyperparameters answer; ``None`` when it states none."""


@dataclass(frozen=True)
class JobEstimate:
    """A job's tasks' estimates and its duration: the longest task's, per quantity."""

    job_id: str
    model_version: str
    duration_s: Quantiles | None
    tasks: tuple[TaskEstimate, ...]


def job_estimate(job_id: str, tasks: Sequence[TaskEstimate]) -> JobEstimate:
    """``tasks`` (at least one) as one job: the job runs until its longest task ends, so each quantity of
    its duration is the largest of its tasks' (``mean`` only where every task's has one)."""
    durations = [d for d in (t.targets.get("duration") for t in tasks) if d is not None]
    duration = None
    if durations:
        means = [d.mean for d in durations]
        duration = Quantiles(max(d.point for d in durations), max(d.p50 for d in durations),
                             max(d.p90 for d in durations), unit_of("duration"),
                             None if None in means else max(m for m in means if m is not None))
    return JobEstimate(job_id, tasks[0].model_version, duration, tuple(tasks))


@dataclass(frozen=True)
class CacheCounts:
    """Rows (one per record and target) answered from an estimator's answer cache and by its model."""

    hits: int
    misses: int


class JobEstimator(Protocol):
    """Estimates the tasks of submitted jobs."""

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        """One estimate per record, in order; ``ValueError`` for a record it cannot read (e.g. a field it
        does not know)."""
        ...


class CachingEstimator(JobEstimator, Protocol):
    """An estimator that keeps answers it gave lately, and counts where its answers came from."""

    def cache_counts(self) -> CacheCounts:
        """Rows answered from the cache and by the model since it was loaded."""
        ...
