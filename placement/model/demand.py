"""What a job asks for: tasks with roles and instances, and per instance the resources it needs.

A task's ``gpu`` is either a whole number of GPUs (1, 2, 8: the instance gets that many free GPUs of
one machine) or a share of one GPU below 1 (0.5: the instance shares a GPU with others whose shares
sum to at most 1). ``gpu_mem_gib`` is per GPU used; NaN means "proportional": a share s of a GPU with
M GiB needs s x M GiB (rounded down to whole MiB), a whole GPU all of its memory. ``gpu_types`` is an
any-of constraint; empty means any type. Jobs are gang-placed: every instance or none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from placement.model.speed import SyncCurve


class Role(StrEnum):
    PS = "ps"
    WORKER = "worker"
    EVALUATOR = "evaluator"
    OTHER = "other"


@dataclass(frozen=True)
class Task:
    """``instances`` identical instances of one role."""

    role: Role
    instances: int
    gpu: float = 0.0
    cpu_cores: float = 0.0
    mem_gib: float = 0.0
    gpu_mem_gib: float = math.nan
    bandwidth_gbps: float = 0.0
    gpu_types: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.instances < 1:
            raise ValueError(f"a task needs at least 1 instance, got {self.instances}")
        for name in ("gpu", "cpu_cores", "mem_gib", "bandwidth_gbps"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.gpu > 1 and not float(self.gpu).is_integer():
            raise ValueError(f"gpu above 1 must be a whole number of GPUs, got {self.gpu}")
        if not math.isnan(self.gpu_mem_gib) and self.gpu_mem_gib < 0:
            raise ValueError(f"gpu_mem_gib must be >= 0, got {self.gpu_mem_gib}")

    @property
    def whole_gpus(self) -> int:
        """GPUs per instance when the task takes whole GPUs, else 0."""
        return int(self.gpu) if self.gpu >= 1 else 0

    @property
    def shares_gpu(self) -> bool:
        return 0 < self.gpu < 1


@dataclass(frozen=True)
class Job:
    """A job to place whole; ``duration_s`` is its (estimated) run time, for policies that use it."""

    job_id: str
    tasks: tuple[Task, ...]
    duration_s: float = math.nan
    priority: int = 0
    workload_class: str = ""
    """Which profiled workload the job behaves like (``placement.model.speed``); empty when unknown."""
    sync_curve: SyncCurve | None = None
    """The job's own iteration-time curve, predicted from the hyperparameters it stated; where given,
    Liquid's network term charges it rather than its class's."""

    def __post_init__(self) -> None:
        if not self.job_id:
            raise ValueError("a job needs an id")
        if not self.tasks:
            raise ValueError(f"job {self.job_id!r} has no tasks")

    @property
    def instances(self) -> int:
        return sum(t.instances for t in self.tasks)

    @property
    def gpus(self) -> float:
        """GPUs of the whole job (shares count as their fraction)."""
        return sum(t.gpu * t.instances for t in self.tasks)

    def instance_tasks(self) -> list[int]:
        """Task index of every instance, in order (instance i belongs to task ``instance_tasks()[i]``)."""
        return [i for i, t in enumerate(self.tasks) for _ in range(t.instances)]

    @property
    def has_ps(self) -> bool:
        return any(t.role is Role.PS for t in self.tasks)
