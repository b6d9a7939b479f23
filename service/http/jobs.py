"""``/v1/predict``, ``/v1/place`` and ``/v1/jobs``: estimate, place, release and complete jobs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool

from models.estimate import JobEstimate, JobRecord, job_estimate
from placement import Cluster, ClusterSnapshot, Decision, Job, OnlinePolicy, Verdict, batch_policy, violations
from service.codec import Json, allocation_to_json
from service.http.responses import (
    AllocationOut,
    BatchOut,
    CompletedOut,
    CompletionOut,
    DecisionOut,
    EstimateOut,
    JobOut,
    ReleasedOut,
    estimate_json,
)
from service.http.schemas import BatchIn, CompleteIn, JobId, JobIn, PlaceIn
from service.openapi import JOB_ID, linked, operation_id
from service.problems import ANYWHERE, problems
from service.runtime import ReadRuntime, Runtime, WriteRuntime
from service.store import COMPLETED, RELEASED, Completion, End, Ended, Place, Placed, Reason, Refused

router = APIRouter(prefix="/v1", tags=["jobs"], responses=problems(*ANYWHERE, 404, 409),
                   generate_unique_id_function=operation_id)


def estimate_many(rt: Runtime, jobs: list[JobIn]) -> list[JobEstimate]:
    """:func:`estimate_async` of several jobs, with one model call."""
    records = [job.records() for job in jobs]
    try:
        per_task = rt.estimator.predict([r for rs in records for r in rs])
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    out, start = [], 0
    for job, rs in zip(jobs, records, strict=True):
        out.append(job_estimate(job.job_id, per_task[start:start + len(rs)]))
        start += len(rs)
    return out


async def estimate_async(rt: Runtime, job: JobIn, records: Sequence[JobRecord] | None = None) -> JobEstimate:
    """Per-task estimates and the job's duration (:func:`models.estimate.job_estimate`). ``records``:
    ``job.records()``, if the caller has them already."""
    try:
        per_task = await rt.estimator.predict_async(job.records() if records is None else records)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    return job_estimate(job.job_id, per_task)


def job_to_place(body: JobIn, estimate: JobEstimate) -> Job:
    """The job to place: its expected duration the estimate's P50, its tasks' needs the estimate's."""
    duration_s = estimate.duration_s.p50 if estimate.duration_s else math.nan
    return body.to_job(duration_s, [task.needs for task in estimate.tasks])


@router.post("/predict")
async def predict(job: JobIn, rt: ReadRuntime) -> EstimateOut:
    """What the job will need: per task and resource a point estimate, P50 and P90, and its duration."""
    return EstimateOut.of(await estimate_async(rt, job))


@router.post("/place", responses=linked("get_job", "release_job", "complete_job", job_id=JOB_ID))
async def place(body: PlaceIn, rt: WriteRuntime) -> DecisionOut:
    """Estimate, then place the job (gang: every instance or none); ``dry_run`` stores nothing.

    The answer is sent after the allocation's transaction has committed (``service.cycle``: the
    placements and releases of the moment are decided in order and committed together)."""
    try:
        name, policy = rt.policy(body.policy)
    except KeyError as exc:
        raise HTTPException(422, str(exc.args[0])) from exc
    records = body.records()
    estimate = await estimate_async(rt, body, records)
    est = estimate_json(estimate)
    job = job_to_place(body, estimate)
    if body.dry_run:
        decision, cluster = await run_in_threadpool(_decide_only, rt, policy, job)
        committed = False
    else:
        details = {"estimate": est, "model_version": estimate.model_version, "records": records}
        match await rt.cycle.run(Place(job, policy, details)):
            case Placed(decision=decision, cluster=cluster):
                committed = True
            case Refused(reason=Reason.EXISTS, detail=detail):
                raise HTTPException(409, detail)
            case Refused(decision=Decision() as decision):
                committed, cluster = False, rt.store.cached().cluster
            case other:
                raise AssertionError(f"a placement came to {other!r}")
    rt.metrics.decisions.labels(name, decision.verdict.value, str(committed).lower()).inc()
    return _decision_out(cluster, decision, committed, est)


def _decide_only(rt: Runtime, policy: OnlinePolicy, job: Job) -> tuple[Decision, Cluster]:
    if rt.store.exists(job.job_id):
        raise HTTPException(409, f"job {job.job_id!r} already exists (job ids are never reused)")
    snapshot = rt.store.snapshot()
    return policy(snapshot, job), snapshot.cluster


def _decision_out(cluster: Cluster, decision: Decision, committed: bool, est: Json) -> DecisionOut:
    """The answer, validated in one pass from its JSON form (``est``: :func:`estimate_json`)."""
    allocation = allocation_to_json(cluster, decision.allocation) if decision.allocation else None
    return DecisionOut.model_validate({
        "job_id": decision.job_id, "verdict": decision.verdict, "committed": committed, "policy": decision.policy,
        "generation": decision.generation, "allocation": allocation, "score": dict(decision.score),
        "reasons": list(decision.reasons), "estimate": est})


@router.post("/place/batch", responses=linked("get_job", "release_job", "complete_job",
                                                  job_id="$response.body#/decisions/0/job_id"))
async def place_batch(body: BatchIn, rt: WriteRuntime) -> BatchOut:
    """Estimate every job, then place them together with a batch policy (``gga``, ``cpsat``, ``ffd``)
    within ``time_limit_s``; the solver runs in a worker thread, off the event loop. The placed jobs go
    through the cycle as one group, stored in one transaction: each still feasible on the state as
    committed (it may have moved while solving) is stored, the others are not."""
    existing = await run_in_threadpool(lambda: [j.job_id for j in body.jobs if rt.store.exists(j.job_id)])
    if existing:
        raise HTTPException(409, f"jobs already exist (job ids are never reused): {existing[:10]}")
    estimates = await run_in_threadpool(estimate_many, rt, body.jobs)
    answers = [estimate_json(e) for e in estimates]
    jobs = [job_to_place(j, e) for j, e in zip(body.jobs, estimates, strict=True)]
    snapshot = await run_in_threadpool(rt.store.snapshot)
    result = await run_in_threadpool(batch_policy(body.policy), snapshot, jobs, body.time_limit_s, body.seed)
    stored = [False] * len(jobs)
    if not body.dry_run:
        index = {d.job_id: i for i, d in enumerate(result.decisions)}
        order = [index[j] for j in result.applied_order]
        done = await rt.cycle.run_all([Place(jobs[i], StillFits(result.decisions[i]), {
            "batch": body.policy, "estimate": answers[i], "model_version": estimates[i].model_version,
            "records": body.jobs[i].records()}) for i in order])
        for i, outcome in zip(order, done, strict=True):
            stored[i] = isinstance(outcome, Placed)
    for decision, ok in zip(result.decisions, stored, strict=True):
        rt.metrics.decisions.labels(body.policy, decision.verdict.value, str(ok).lower()).inc()
    return BatchOut(policy=body.policy, stopped=result.stopped, solve_s=result.solve_s,
                    jobs_placed=result.jobs_placed, gpus_placed=result.gpus_placed,
                    network_cost=result.network_cost, machines_touched=result.machines_touched,
                    lower_bound_machines=result.lower_bound_machines, gap_to_bound=result.gap_to_bound,
                    notes=list(result.notes),
                    decisions=[_decision_out(snapshot.cluster, d, ok, e)
                               for d, ok, e in zip(result.decisions, stored, answers, strict=True)])


class StillFits:
    """The policy of a job a batch policy placed: its allocation, if it is still feasible on the state
    it is decided on; otherwise not placed."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision

    def __call__(self, snapshot: ClusterSnapshot, job: Job) -> Decision:
        allocation = self.decision.allocation
        problems = ["not placed"] if allocation is None else violations(snapshot, job, allocation)
        if problems:
            return Decision(job.job_id, self.decision.policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation,
                            reasons=(f"no longer fits: {problems[0]}",))
        return replace(self.decision, generation=snapshot.generation)


@router.get("/jobs/{job_id}", responses=linked("release_job", "complete_job", job_id=JOB_ID))
async def get_job(job_id: JobId, rt: ReadRuntime) -> JobOut:
    """The job as stored: its state, demand, allocation, what it was placed with, and its completion."""
    row = await run_in_threadpool(rt.store.job, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return JobOut.model_validate({
        "job_id": row.job_id, "state": row.state, "policy": row.policy, "demand": row.demand,
        "allocation": None if row.allocation is None else AllocationOut.model_validate(row.allocation),
        "details": row.details, "placed_generation": row.placed_generation, "placed_at": row.placed_at,
        "ended_at": row.ended_at,
        "completion": None if row.completion is None else CompletionOut.model_validate(row.completion),
        "queue": row.queue, "priority": row.priority, "mode": row.mode, "submitted_at": row.submitted_at,
        "requested_policy": row.requested_policy})


@router.post("/jobs/{job_id}/release", responses=linked("get_job", "complete_job", job_id=JOB_ID))
async def release_job(job_id: JobId, rt: WriteRuntime) -> ReleasedOut:
    """Free the job's resources. Idempotent: releasing a job that holds nothing changes nothing."""
    if isinstance(await rt.cycle.run(End(job_id)), Ended):
        return ReleasedOut(job_id=job_id, released=True, state=RELEASED)
    row = await run_in_threadpool(rt.store.job, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return ReleasedOut(job_id=job_id, released=False, state=row.state)


@router.post("/jobs/{job_id}/complete", responses=linked("get_job", "release_job", job_id=JOB_ID))
async def complete_job(job_id: JobId, body: CompleteIn, rt: WriteRuntime) -> CompletedOut:
    """The job finished: free its resources and keep its observed duration and usage for retraining.
    The estimate it was placed with is compared with them (``gpuplace_prediction_*`` in ``/metrics``)."""
    usage = {str(k): v for k, v in body.usage.items()}
    if isinstance(await rt.cycle.run(End(job_id, Completion(body.duration_s, usage))), Ended):
        done = await run_in_threadpool(rt.store.job, job_id)
        if done is not None and done.completion is not None:
            rt.metrics.observe_completion(done)
        return CompletedOut(job_id=job_id, state=COMPLETED, duration_s=body.duration_s)
    row = await run_in_threadpool(rt.store.job, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id!r}")
    raise HTTPException(409, f"job {job_id!r} is {row.state}, not running: nothing to complete")
