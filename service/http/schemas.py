"""Request and response bodies of the REST API (pydantic, with limits: bad input is a 422 naming the field)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from models.estimate import NeedsAnswer, RecordValue
from placement import ONLINE_POLICY_NAMES, Job, Role, Task
from service.codec import placeable_share
from training.needs.estimator import curve_of
from training.needs.vocabulary import validate as validate_hyperparams

JobId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
# printable: no control characters (PostgreSQL text cannot hold NUL); pydantic's own string check
# already refuses lone surrogates (not UTF-8)
Name = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]{1,128}$")]
GpuType = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,32}$")]


def _integral(value: object) -> object:
    """A number without a fraction (``2.0``) as the integer it is: JSON Schema's ``integer`` is every such
    number, so a client may send one. ``2.5``, ``true`` and ``"2"`` reach the strict check and are refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Count = Annotated[int, BeforeValidator(_integral)]


def _known_policy(name: str) -> str:
    if name not in ONLINE_POLICY_NAMES:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(ONLINE_POLICY_NAMES)}")
    return name


OnlinePolicyName = Annotated[str, AfterValidator(_known_policy),
                             WithJsonSchema({"type": "string", "enum": list(ONLINE_POLICY_NAMES)})]


MAX_INSTANCES_PER_JOB = 4096
"""Instances of one job, over all its tasks: more than the largest cluster shipped has GPUs would take,
and few enough that placing one stays within tens of milliseconds on the event loop."""
MAX_INSTANCES_PER_BATCH = 20_000
"""Instances of one batch placement, over all its jobs."""


def _amount(limit: float, description: str, **schema: Any) -> Any:
    # strict: ``true`` is not one GPU, nor ``"4"`` four cores
    return Field(0.0, ge=0.0, le=limit, allow_inf_nan=False, strict=True, description=description,
                 json_schema_extra=schema or None)


def _printable(text: str) -> bool:
    """No control characters, and encodable as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


class TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role = Role.WORKER
    instances: Count = Field(1, ge=1, le=MAX_INSTANCES_PER_JOB, strict=True)
    gpu: float = _amount(64, "GPUs per instance: a whole count, or a share of one GPU below 1",
                         anyOf=[{"maximum": 1}, {"multipleOf": 1}])  # what ``_whole`` checks, for clients
    cpu_cores: float = _amount(4096, "CPU cores per instance")
    mem_gib: float = _amount(65_536, "host memory per instance, GiB")
    gpu_mem_gib: float | None = Field(None, ge=0.0, le=1024, allow_inf_nan=False, strict=True,
                                      description="GPU memory per GPU used, GiB; null = proportional to the share")
    bandwidth_gbps: float = _amount(1_000, "network bandwidth per instance, Gbit/s")
    gpu_types: list[GpuType] = Field(default_factory=list, max_length=16, description="any-of; empty = any")

    @model_validator(mode="after")
    def _whole(self) -> TaskIn:
        if self.gpu > 1 and not float(self.gpu).is_integer():
            raise ValueError(f"gpu above 1 must be a whole number of GPUs, got {self.gpu}")
        return self

    def to_task(self) -> Task:
        return Task(self.role, self.instances, placeable_share(self.gpu), self.cpu_cores, self.mem_gib,
                    math.nan if self.gpu_mem_gib is None else self.gpu_mem_gib, self.bandwidth_gbps,
                    frozenset(self.gpu_types))


class JobIn(BaseModel):
    """A job as submitted: who runs it, what it is, and its tasks."""

    model_config = ConfigDict(extra="forbid")

    job_id: JobId
    user: Name | None = None
    group: Name | None = Field(None, description="recurrence tag: jobs of the same group are reruns")
    workload: Name | None = None
    app: Name | None = None
    qos: Name | None = None
    hyperparams: dict[Annotated[str, StringConstraints(max_length=64)],
                      int | float | Annotated[str, StringConstraints(max_length=256)]] | None = Field(
        None, max_length=64, description="what the job trains, in the vocabulary of training.needs.vocabulary "
                                         "(model_family, parameters, activations, layers, batch_size, precision, "
                                         "optimizer, ...); unknown keys and wrong types are refused")
    tasks: list[TaskIn] = Field(min_length=1, max_length=64)

    @field_validator("tasks")
    @classmethod
    def _bounded(cls, tasks: list[TaskIn]) -> list[TaskIn]:
        total = sum(t.instances for t in tasks)
        if total > MAX_INSTANCES_PER_JOB:
            raise ValueError(f"tasks: {total:,} instances in all; a job has at most {MAX_INSTANCES_PER_JOB:,}")
        return tasks

    @field_validator("hyperparams", mode="before")
    @classmethod
    def _vocabulary(cls, value: object) -> object:
        if isinstance(value, dict):
            for key, stated in value.items():  # before any message quotes them: pydantic's cannot hold these
                for text in (key, stated):
                    if isinstance(text, str) and not _printable(text):
                        raise ValueError(f"hyperparams: {text!r} has a control character or is not valid UTF-8")
            return validate_hyperparams(value)
        return value

    def records(self) -> list[dict[str, RecordValue]]:
        """One estimator record per task (canonical job fields)."""
        base: dict[str, RecordValue] = {
            "job_id": self.job_id, "user": self.user, "group": self.group, "workload": self.workload,
            "app": self.app, "qos": self.qos, "hyperparams": json.dumps(self.hyperparams) if self.hyperparams else None}
        return [{**base, "task_id": str(i), "role": t.role.value, "instances": t.instances, "req_gpu": t.gpu,
                 "req_cpu_cores": t.cpu_cores, "req_mem_gib": t.mem_gib, "req_gpu_mem_gib": t.gpu_mem_gib,
                 "req_net_gbps": t.bandwidth_gbps, "req_gpu_type": "|".join(t.gpu_types) or None}
                for i, t in enumerate(self.tasks)]

    def to_job(self, duration_s: float = math.nan, needs: Sequence[NeedsAnswer | None] = ()) -> Job:
        """The job to place. ``needs``: per task, what its stated hyperparameters answer
        (``training.needs``): a task on a share of a GPU that states no GPU memory is packed by its
        predicted P90 peak, and the job is charged its predicted iteration-time curve for spread."""
        tasks = []
        for i, t in enumerate(self.tasks):
            task = t.to_task()
            p90 = _peak_gpu_mem_p90_gib(needs[i] if i < len(needs) else None)
            if task.shares_gpu and t.gpu_mem_gib is None and p90 is not None:
                task = replace(task, gpu_mem_gib=p90)
            tasks.append(task)
        curve = next((c for c in map(curve_of, needs) if c is not None), None)
        return Job(self.job_id, tuple(tasks), duration_s, sync_curve=curve)


def _peak_gpu_mem_p90_gib(answer: NeedsAnswer | None) -> float | None:
    peak = (answer or {}).get("gpu_mem_peak_gib")
    p90 = peak.get("p90") if isinstance(peak, dict) else None
    return float(p90) if isinstance(p90, int | float) else None


class PlaceIn(JobIn):
    dry_run: bool = Field(False, strict=True, description="decide and explain, store nothing")
    policy: OnlinePolicyName | None = Field(None, description="online policy; default the service's")


UsageKey = Literal["gpu", "gpu_mem_gib", "cpu_cores", "mem_gib", "net_gbps"]
"""The keys of :data:`training.pipeline.feedback.USAGE_COLUMNS` (a test keeps them equal)."""


class CompleteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    duration_s: float = Field(ge=0.0, le=365 * 86_400, allow_inf_nan=False, strict=True)
    usage: dict[UsageKey, Annotated[float, Field(ge=0.0, allow_inf_nan=False, strict=True)]] = Field(
        default_factory=dict, description="observed usage per instance: gpu (share of one GPU), gpu_mem_gib, "
                                          "cpu_cores, mem_gib, net_gbps")


class MachineIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    gpu_type: GpuType
    gpus: Count = Field(ge=0, le=10_000, strict=True)
    cpu_cores: float = Field(gt=0.0, le=100_000, allow_inf_nan=False, strict=True)
    mem_gib: float = Field(gt=0.0, le=1e7, allow_inf_nan=False, strict=True)
    gpu_mem_gib: float | None = Field(None, ge=0.0, le=1024, allow_inf_nan=False, strict=True,
                                      description="per GPU; 0 only on a machine without GPUs (as the cluster's own "
                                                  "description shows one)")

    @model_validator(mode="after")
    def _memory_with_gpus(self) -> MachineIn:
        if self.gpu_mem_gib == 0 and self.gpus > 0:
            raise ValueError(f"gpu_mem_gib: 0 GiB on a machine with {self.gpus} GPUs; "
                             "leave it out for the GPU type's own")
        return self


class ClusterIn(BaseModel):
    """A cluster spec: a shipped cluster by name, or machines (and optionally racks/domains)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    machines: list[MachineIn] | None = Field(None, max_length=100_000)
    machine_racks: list[tuple[Name, Name]] | None = None
    rack_domains: list[tuple[Name, Name]] | None = None
    force: bool = Field(False, strict=True, description="evict running jobs that would not fit the new spec")

    @model_validator(mode="after")
    def _topology_whole(self) -> ClusterIn:
        if (self.machine_racks is None) != (self.rack_domains is None):
            raise ValueError("machine_racks and rack_domains go together: give both or neither")
        if self.machine_racks is not None and self.machines is None:
            raise ValueError("machine_racks needs machines: a shipped cluster brings its own topology")
        return self


class BatchIn(BaseModel):
    """A window of jobs placed together by a batch policy."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobIn] = Field(min_length=1, max_length=500)
    policy: Annotated[str, StringConstraints(pattern=r"^(gga|cpsat|ffd)$")] = "gga"
    time_limit_s: float = Field(1.0, gt=0.0, le=60.0, allow_inf_nan=False, strict=True)
    seed: Count = Field(0, ge=0, le=2**31 - 1, strict=True)
    dry_run: bool = Field(False, strict=True)

    @model_validator(mode="after")
    def _distinct(self) -> BatchIn:
        ids = [j.job_id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("jobs: job ids must be distinct within a batch")
        total = sum(t.instances for j in self.jobs for t in j.tasks)
        if total > MAX_INSTANCES_PER_BATCH:
            raise ValueError(f"jobs: {total:,} instances in all; a batch has at most {MAX_INSTANCES_PER_BATCH:,}")
        return self


class SubmitIn(JobIn):
    """A job for the queue: the body of ``/v1/place`` (without ``dry_run``: a queued job is stored), plus where
    it waits and how it runs."""

    policy: OnlinePolicyName | None = Field(None, description="the online policy that places it when the "
                                                              "scheduler starts it; default the service's")
    queue: Name = Field("default", description="the queue it waits in (PUT /v1/queues); 'default' until "
                                               "queues are configured")
    priority: int = Field(0, ge=-1_000_000, le=1_000_000, strict=True,
                          description="higher goes first within its queue and may preempt lower")
    mode: Literal["guaranteed", "opportunistic"] = Field(
        "guaranteed", description="guaranteed: within its queue's quota; opportunistic: on idle GPUs outside "
                                  "any quota, preempted first")


def _quota_amount(description: str) -> Any:
    return Field(None, ge=0.0, le=1e9, allow_inf_nan=False, strict=True, description=description)


class AmountsIn(BaseModel):
    """Amounts of the resources a quota counts; a resource not named is not limited."""

    model_config = ConfigDict(extra="forbid")

    gpus: float | None = _quota_amount("GPUs of any type (a share counts as its fraction)")
    gpus_by_type: dict[GpuType, Annotated[float, Field(ge=0.0, le=1e9, allow_inf_nan=False, strict=True)]] | None = \
        Field(None, max_length=64, description="GPUs of each type")
    cpu_cores: float | None = _quota_amount("CPU cores")
    mem_gib: float | None = _quota_amount("host memory, GiB")


class CohortIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    parent: Name | None = None


class QueueIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    cohort: Name | None = Field(None, description="borrows idle guarantee from the queues of its cohort's tree")
    order: Name = Field("fifo", description="fifo, sjf (estimated duration) or priority")
    quota: AmountsIn = Field(description="guaranteed amounts")
    borrowing_limit: AmountsIn | None = Field(None, description="how much beyond its guarantee it may borrow "
                                                                "(needs a cohort)")


class QueuesIn(BaseModel):
    """The queue configuration, the shape of a queues YAML file (docs/scheduling.md)."""

    model_config = ConfigDict(extra="forbid")

    cohorts: list[CohortIn] = Field(default_factory=list, max_length=1000)
    queues: list[QueueIn] = Field(min_length=1, max_length=1000)


class JobsQuery(BaseModel):
    """The parameters of ``GET /v1/jobs``."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["pending", "running", "ended", "cancelled"] | None = None
    queue: Name | None = None
    after: JobId | None = Field(None, description="the last job id of the previous page")
    limit: int = Field(100, ge=1, le=1000)


class EventsQuery(BaseModel):
    """The parameters of ``GET /v1/jobs/{job_id}/events``."""

    model_config = ConfigDict(extra="forbid")

    follow: bool = Field(False, description="keep the stream open until the job ends (at most 300 s)")
