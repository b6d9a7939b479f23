"""Response bodies of the REST API (pydantic): what every endpoint answers, as ``/openapi.json`` shows it.

Floats are floats and counts are integers, as the answers carry them; a key a model leaves out of an
answer (``mean``, ``sources``, ``needs``) is left out of the JSON rather than sent as ``null``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.json_schema import SkipJsonSchema

from models.estimate import JobEstimate, Quantiles, TaskEstimate
from placement import Verdict, WaitReason

JobState = Literal["pending", "running", "released", "completed", "evicted", "cancelled"]


def _left_out(value: object) -> bool:
    return value is None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuantilesOut(_Answer):
    """One estimate in its target's unit (seconds, GPUs, cores, GiB, Gbit/s)."""

    point: float
    p50: float
    p90: float
    mean: float | SkipJsonSchema[None] = Field(None, exclude_if=_left_out,
                               description="the expected value, where the model gives one; absent otherwise")



class TaskEstimateOut(BaseModel):
    """One task's estimate: per target the model knows (``duration``, ``gpu_request``, ``cpu_request``,
    ``mem_request``, ``bandwidth_request``, ...) its quantities, or ``null`` where it is unknown."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, QuantilesOut | None] = Field(init=False)

    sources: dict[str, str] | SkipJsonSchema[None] = Field(None, exclude_if=_left_out, description=(
        "the trace each target was trained on; absent when the heuristic answers"))
    needs: dict[str, JsonValue] | SkipJsonSchema[None] = Field(None, exclude_if=_left_out, description=(
        "what the task's stated hyperparameters answer, per need its P50, P90, unit and source "
        "measurements (docs/needs.md); absent when it states none"))



class EstimateOut(_Answer):
    """What a job will need: per task and target a point estimate, P50 and P90, and the job's duration
    (its longest task's, per quantity; ``null`` when unknown), with the model version that answered."""

    job_id: str
    model_version: str
    duration_s: QuantilesOut | None
    tasks: list[TaskEstimateOut]

    @classmethod
    def of(cls, estimate: JobEstimate) -> EstimateOut:
        return cls.model_validate(estimate_json(estimate))


def estimate_json(estimate: JobEstimate) -> dict[str, Any]:
    """``estimate`` as :class:`EstimateOut` writes it in JSON. Validated into a response in one pass (a
    model per nested value, each built on its own, took more than the placement's own decision), and
    stored as it is with a placement."""
    return {"job_id": estimate.job_id, "model_version": estimate.model_version,
            "duration_s": _quantiles_json(estimate.duration_s), "tasks": [_task_json(t) for t in estimate.tasks]}


def _quantiles_json(quantiles: Quantiles | None) -> dict[str, float] | None:
    if quantiles is None:
        return None
    out = {"point": quantiles.point, "p50": quantiles.p50, "p90": quantiles.p90}
    if quantiles.mean is not None:
        out["mean"] = quantiles.mean
    return out


def _task_json(task: TaskEstimate) -> dict[str, Any]:
    out: dict[str, Any] = {name: _quantiles_json(q) for name, q in task.targets.items()}
    if task.sources is not None:
        out["sources"] = dict(task.sources)
    if task.needs is not None:
        out["needs"] = dict(task.needs)
    return out


class InstanceOut(_Answer):
    """Where one instance runs: the machine by name, its GPUs by index within that machine, and what it
    holds there in integer units."""

    task: int
    machine: str
    gpus: list[int]
    gpu_milli: int
    gpu_mem_mib: int
    cpu_milli: int
    mem_mib: int


class AllocationOut(_Answer):
    instances: list[InstanceOut]


class DecisionOut(_Answer):
    """A placement decision: its verdict, whether it was stored, where, and why (the score breakdown, or
    the reasons it does not fit), with the estimate it was decided on."""

    job_id: str
    verdict: Verdict
    committed: bool = Field(description="stored: the answer was sent after its transaction committed")
    policy: str
    generation: int = Field(description="the state generation the decision was made on")
    allocation: AllocationOut | None
    score: dict[str, float]
    reasons: list[str]
    estimate: EstimateOut


class BatchOut(_Answer):
    """A batch policy's decisions (in the order of the jobs asked) and its objective terms."""

    policy: str
    stopped: str = Field(description="why the solver stopped: optimal, bound, time, stall, generations, "
                                     "complete (a greedy finished) or fallback")
    solve_s: float
    jobs_placed: int
    gpus_placed: float
    network_cost: float
    machines_touched: int
    lower_bound_machines: int | None
    gap_to_bound: float | None
    notes: list[str]
    decisions: list[DecisionOut]


class CompletionOut(_Answer):
    duration_s: float
    usage: dict[str, float] = Field(description="observed usage per instance, as reported")
    completed_at: float


class JobOut(_Answer):
    """A job as stored."""

    job_id: str
    state: JobState
    policy: str
    demand: dict[str, JsonValue] = Field(description="the job as placed: its tasks and expected duration")
    allocation: AllocationOut | None = Field(description="null while it holds nothing (pending)")
    details: dict[str, JsonValue] = Field(description="what it was placed with: the estimate and the task "
                                                      "records the estimator saw, the batch or node")
    placed_generation: int
    placed_at: float
    ended_at: float | None
    completion: CompletionOut | None
    queue: str | None = Field(None, description="the queue it was submitted to; null if placed directly")
    priority: int | None = None
    mode: Literal["guaranteed", "opportunistic"] | None = None
    submitted_at: float | None = Field(None, description="when it was submitted (Unix time, s)")
    requested_policy: str | None = Field(None, description="the online policy it was submitted to be placed by; "
                                                           "null: the service's (``policy`` is the one that placed it)")


class SubmittedOut(_Answer):
    """A job stored in its queue: pending, or running if the scheduling pass of its own cycle started it."""

    job_id: str
    state: Literal["pending", "running"]
    queue: str
    priority: int
    mode: Literal["guaranteed", "opportunistic"]
    allocation: AllocationOut | None = Field(description="where it runs, if it started")
    estimate: EstimateOut


class JobSummaryOut(_Answer):
    job_id: str
    state: JobState
    queue: str | None
    priority: int | None
    mode: Literal["guaranteed", "opportunistic"] | None
    submitted_at: float | None
    placed_at: float | None = Field(description="when it last started (null while pending)")
    ended_at: float | None


class JobsOut(_Answer):
    """A page of jobs, by id; ``next``: the ``after`` of the next page (null on the last)."""

    jobs: list[JobSummaryOut]
    next: str | None


class CancelledOut(_Answer):
    job_id: str
    state: Literal["cancelled"]


class QueueOut(_Answer):
    name: str
    order: str
    cohort: str | None
    quota: dict[str, float] = Field(description="guaranteed amount per resource (gpus, gpus:<TYPE>, cpu_cores, "
                                                "mem_gib)")
    borrowing_limit: dict[str, float]
    usage: dict[str, float] = Field(description="what its guaranteed running jobs use, per resource")
    pending: int = Field(description="jobs waiting in it")
    next_start_in_s: float | None = Field(
        description="estimated seconds until its next waiting job starts: 0 if the scheduler would start one "
                    "now, else the time its reservation comes due (when the running jobs in the reserved "
                    "place are estimated to end, by their P50); null with nothing waiting or no reservation "
                    "(see next_wait_reason)")
    next_wait_reason: str | None = Field(
        description="why its next job waits: over-quota, does-not-fit-now, waiting-for-reservation, "
                    "would-delay-a-reservation, can-never-fit; null when nothing waits or it starts now")


class QueuesOut(_Answer):
    """Each queue's quota, usage and pending jobs, and the configuration as stored."""

    configured: bool = Field(description="false: no configuration set; the one queue 'default' is used")
    queues: list[QueueOut]
    config: dict[str, JsonValue] = Field(description="the configuration in the shape PUT /v1/queues takes")
    other_pending: dict[str, int] = Field(description="pending jobs of queues the configuration does not have")


class ReleasedOut(_Answer):
    job_id: str
    released: bool = Field(description="false when the job held nothing (already released or ended)")
    state: JobState


class CompletedOut(_Answer):
    job_id: str
    state: Literal["completed"]
    duration_s: float


class HealthOut(_Answer):
    status: Literal["ok"]


class ReadyOut(_Answer):
    status: Literal["ready", "degraded"] = Field(description="degraded: no registered model answers (the "
                                                             "heuristic does), the last reload failed, or the "
                                                             "Kubernetes cluster is followed and not watched now")
    database: Literal["ok"]
    generation: int
    model_version: str
    model_error: str | None
    auth: Literal["on", "off"]
    kubernetes: str | None = Field(None, description="following the Kubernetes cluster (GPUPLACE_KUBE_FOLLOW): "
                                                     "starting, listing, following N nodes, M pods, or retrying "
                                                     "in S s: why; null when not following")


class NotReadyOut(_Answer):
    """The database does not answer (status 503)."""

    status: Literal["unavailable"]
    database: str


class MachineOut(_Answer):
    name: str
    gpu_type: str
    gpus: int
    gpus_allocated: float
    cpu_cores: float
    cpu_cores_allocated: float
    mem_gib: float
    mem_gib_allocated: float
    rack: str | None


class ClusterOut(_Answer):
    """The cluster and its allocation, in total and per machine."""

    name: str
    generation: int
    machines: int
    gpus: int
    gpus_allocated: float
    running_jobs: int
    gpu_types: list[str]
    per_machine: list[MachineOut]


class ClusterLoadedOut(_Answer):
    name: str
    machines: int
    gpus: int
    evicted: list[str] = Field(description="running jobs the new spec could not hold (with force)")
    generation: int


class RefusedOut(_Answer):
    """A version behind the alias that was loaded but failed its probe, so it never answered."""

    version: str
    reason: str = Field(description="what predicting the probe jobs gave: what it raised, or the estimate "
                                    "that was malformed, negative or not finite")
    at: float = Field(description="when it was refused (Unix time, s)")


class ModelsOut(_Answer):
    answering: str = Field(description="the model version answering; heuristic when none is loaded")
    alias: str
    degraded: bool
    last_error: str | None
    loaded_at: float | None = Field(description="when the answering version was loaded (Unix time, s)")
    refused: RefusedOut | None = Field(description=(
        "the last version behind the alias that failed its probe (the last good model, or the heuristic, "
        "answers instead), until a version is swapped in or the alias is back on the one answering; "
        "the poller does not load it again, a reload request does"))


class GpuShareOut(_Answer):
    """What one running job holds of one GPU."""

    gpu: int = Field(description="the GPU's index within its machine")
    job_id: str
    milli: int = Field(description="thousandths of the GPU (1000: all of it)")


class MachineGpusOut(_Answer):
    name: str
    rack: str
    domain: str
    gpu_type: str
    gpu_mem_gib: float = Field(description="the memory of one of its GPUs")
    gpu_milli: list[int] = Field(description="per GPU, by index: the thousandths allocated (0 to 1000)")
    gpu_mem_mib: list[int] = Field(description="per GPU, by index: the GPU memory allocated, MiB")
    shares: list[GpuShareOut] = Field(description="who holds what of each GPU, by GPU index then job id")
    jobs: list[str] = Field(description="the running jobs with an instance on it, GPUs or not, by id")
    cpu_cores: float
    cpu_cores_allocated: float
    mem_gib: float
    mem_gib_allocated: float


class ClusterGpusOut(_Answer):
    """Every GPU's allocation and the running jobs sharing it, machine by machine in the topology's order
    (domain, rack, machine)."""

    name: str
    generation: int
    running_jobs: int
    machines: list[MachineGpusOut]


class TargetErrorOut(_Answer):
    """One target's recent error for one model version, against what the version measured on its holdout
    at training (``null`` where the registry does not say: the heuristic, or a registry that is down)."""

    target: str
    model_version: str
    jobs: int = Field(description="completed jobs with an estimate and a measurement of this target")
    recent_male: float | None = Field(description="mean absolute log error of the point estimates")
    recent_p90_coverage: float | None = Field(description="share of the jobs measured at or under their P90")
    train_male: float | None
    train_p90_coverage: float | None
    male_ratio: float | None = Field(description="recent over training MALE")
    drifted: bool | None = Field(description="the MALE ratio above the limit, or the coverage fallen by more "
                                             "than the allowed drop; null without training metrics")
    rolling_male: list[float] = Field(description="MALE over a window of 50 jobs sliding along the completions, "
                                                  "oldest first (one value while fewer)")


class ModelErrorOut(_Answer):
    """The error of the estimates completed jobs were placed with, per target and model version, over the
    most recent completions (the comparison ``gpuplace models drift`` makes)."""

    answering: str = Field(description="the model version answering now")
    completions: int = Field(description="completed jobs read (the most recent, at most ``window``)")
    window: int
    ratio_limit: float
    coverage_drop: float
    targets: list[TargetErrorOut]


class WaitingJobOut(_Answer):
    job_id: str
    queue: str
    reason: WaitReason
    details: list[str] = Field(description="what the scheduler found, in words (what is short, and where)")
    reservation_at_s: float | None = Field(description="when the place reserved for it is due (Unix time, s)")


class WaitingOut(_Answer):
    """Why each pending job waits, from a scheduling pass on the current state that commits nothing."""

    generation: int
    waiting: list[WaitingJobOut]
    starting: list[str] = Field(description="pending jobs that pass would start (the next cycle starts them)")
