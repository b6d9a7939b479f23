"""The queue: ``POST /v1/jobs`` submits a job, ``GET /v1/jobs`` lists jobs, ``DELETE /v1/jobs/{id}``
cancels a pending one, ``GET /v1/jobs/{id}/events`` streams its state changes (server-sent events), and
``/v1/queues`` shows and sets the queues. Every change goes through the cycle (``service.cycle``), whose
scheduling pass starts the jobs that can start."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from placement import JobMode, Plan, QueueConfigError, queues_from_dict, queues_to_dict
from service.http.jobs import estimate_async, job_to_place
from service.http.responses import (
    AllocationOut,
    CancelledOut,
    JobsOut,
    JobSummaryOut,
    QueueOut,
    QueuesOut,
    SubmittedOut,
    estimate_json,
)
from service.http.schemas import EventsQuery, JobId, JobsQuery, QueuesIn, SubmitIn
from service.openapi import JOB_ID, linked, operation_id
from service.problems import ANYWHERE, MEDIA_TYPE, PROBLEMS, problems
from service.runtime import ReadRuntime, Runtime, WriteRuntime
from service.store import (
    CANCELLED,
    DEFAULT_QUEUES,
    ENDED,
    PENDING,
    RUNNING,
    Cancel,
    Cancelled,
    EventRow,
    JobRow,
    Refused,
    SetQueues,
    Submit,
    Submitted,
)

router = APIRouter(prefix="/v1", tags=["queue"], responses=problems(*ANYWHERE, 404, 409),
                   generate_unique_id_function=operation_id)
FOLLOW_S = 300.0
"""How long ``?follow=true`` streams a job's events at most (a client reconnects with ``Last-Event-ID``)."""
FOLLOW_POLL_S = 0.5
"""How often a followed stream looks for new events (another process may have written them)."""
_FINAL = {*ENDED, CANCELLED}


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


@router.post("/jobs", status_code=202, responses={
    202: linked("get_job", "cancel_job", "job_events", job_id=JOB_ID)[200]})
async def submit_job(body: SubmitIn, rt: WriteRuntime) -> SubmittedOut:
    """Estimate the job and store it in its queue (202). The scheduling pass of the same cycle may start
    it at once (``running``); otherwise it waits (``pending``) until a pass starts it, as jobs end, are
    cancelled or queues change (``GET /v1/jobs/{id}/events``)."""
    await _known_queue(rt, body.queue)
    records = body.records()
    estimate = await estimate_async(rt, body, records)
    est = estimate_json(estimate)
    job = replace(job_to_place(body, estimate), priority=body.priority)
    duration = estimate.duration_s
    p50, p90 = (duration.p50, duration.p90) if duration is not None else (math.nan, math.nan)
    details = {"estimate": est, "model_version": estimate.model_version, "records": records}
    match await rt.cycle.run(Submit(job, body.queue, JobMode(body.mode), p50, p90, details, body.policy)):
        case Submitted(state=state):
            pass
        case Refused(detail=detail):
            raise HTTPException(409, detail)
        case other:
            raise AssertionError(f"a submission came to {other!r}")
    allocation = None
    if state == RUNNING:
        row = await run_in_threadpool(rt.store.job, job.job_id)
        if row is not None and row.state == RUNNING:  # it may have ended already
            allocation = AllocationOut.model_validate(row.allocation)
    return SubmittedOut.model_validate({"job_id": job.job_id, "state": state, "queue": body.queue,
                                        "priority": body.priority, "mode": body.mode,
                                        "allocation": allocation, "estimate": est})


async def _known_queue(rt: Runtime, name: str) -> None:
    spec = await run_in_threadpool(rt.store.queue_spec)
    names = [q["name"] for q in (spec or DEFAULT_QUEUES)["queues"]]
    if name not in names:
        raise HTTPException(422, f"queue: unknown queue {name!r}; queues: {', '.join(names)}")


@router.get("/jobs")
async def list_jobs(rt: ReadRuntime, query: Annotated[JobsQuery, Query()]) -> JobsOut:
    """Jobs by id, ``limit`` a page from after ``after``: of one state (``ended``: released, completed or
    evicted) and one queue, if given. An unknown parameter is a 422 rather than a filter silently ignored."""
    state, limit = query.state, query.limit
    states: tuple[str, ...] = () if state is None else ENDED if state == "ended" else (state,)
    rows = await run_in_threadpool(rt.store.list_jobs, states, query.queue, query.after, limit)
    return JobsOut(jobs=[_summary(r) for r in rows], next=rows[-1].job_id if len(rows) == limit else None)


def _summary(row: JobRow) -> JobSummaryOut:
    return JobSummaryOut.model_validate({
        "job_id": row.job_id, "state": row.state, "queue": row.queue, "priority": row.priority, "mode": row.mode,
        "submitted_at": row.submitted_at, "placed_at": None if row.state == PENDING else row.placed_at,
        "ended_at": row.ended_at})


@router.delete("/jobs/{job_id}", responses=linked("get_job", "job_events", job_id=JOB_ID))
async def cancel_job(job_id: JobId, rt: WriteRuntime) -> CancelledOut:
    """Take a pending job out of its queue; 409 if it is not pending (running: release it instead)."""
    if isinstance(await rt.cycle.run(Cancel(job_id)), Cancelled):
        return CancelledOut(job_id=job_id, state="cancelled")
    row = await run_in_threadpool(rt.store.job, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id!r}")
    raise HTTPException(409, f"job {job_id!r} is {row.state}, not pending: nothing to cancel")


# a router of its own: the others' error answers would be documented in the stream's media type
_streams = APIRouter(prefix="/v1", tags=["queue"], generate_unique_id_function=operation_id)
_EVENT = {"type": "object", "description": "one server-sent event, its fields as text",
          "properties": {"id": {"type": "string"}, "event": {"type": "string"}, "data": {"type": "string"}}}
"""What each event of the stream is (schema checkers parse the stream and check every event against it)."""
_JSON_PROBLEM = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}


@_streams.get("/jobs/{job_id}/events", response_class=EventStream, responses={
    200: {"description": "server-sent events: one per state change, `id` its number, `event` the state it came "
                         "to, `data` JSON with job_id, state, reason, generation and at (Unix s)",
          "content": {"text/event-stream": {"schema": _EVENT}}},
    **{status: {"description": PROBLEMS[status], "content": _JSON_PROBLEM} for status in (*ANYWHERE, 404)}})
async def job_events(job_id: JobId, request: Request, rt: ReadRuntime, query: Annotated[EventsQuery, Query()],
                     last_event_id: Annotated[int | None, Header(ge=0)] = None) -> EventStream:
    """The state changes of a submitted job (pending, running, pending again when preempted and why,
    released, completed, evicted, cancelled) as server-sent events. ``follow``: keep the stream open
    until the job ends or is cancelled (at most 300 s; reconnect with ``Last-Event-ID`` to go on)."""
    row = await run_in_threadpool(rt.store.job, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return EventStream(_events(rt, request, job_id, last_event_id or 0, query.follow and row.queue is not None))


async def _events(rt: Runtime, request: Request, job_id: str, after: int, follow: bool) -> AsyncIterator[str]:
    deadline, last = time.monotonic() + FOLLOW_S, None
    while True:
        for event in await run_in_threadpool(rt.store.events, job_id, after):
            after, last = event.id, event.state
            yield _sse(event)
        if not follow or last in _FINAL or time.monotonic() > deadline or await request.is_disconnected():
            return
        await asyncio.sleep(FOLLOW_POLL_S)


def _sse(event: EventRow) -> str:
    data = json.dumps({"job_id": event.job_id, "state": event.state, "reason": event.reason,
                       "generation": event.generation, "at": event.at})
    return f"id: {event.id}\nevent: {event.state}\ndata: {data}\n\n"


@router.get("/queues", responses=linked("put_queues", body={"queues": "$response.body#/config/queues"}))
async def get_queues(rt: ReadRuntime) -> QueuesOut:
    """Each queue's quota, borrowing limit, usage (its guaranteed running jobs) and pending jobs."""
    return await run_in_threadpool(_queues_out, rt)


def _queues_out(rt: Runtime) -> QueuesOut:
    snapshot, queued = rt.store.queued()
    queues = rt.planner.queues(queued.spec, snapshot.cluster)
    usage = rt.planner.usage(snapshot, queued)
    waiting: dict[str, int] = {}
    for job in queued.pending:
        waiting[job.queue] = waiting.get(job.queue, 0) + 1
    upcoming = next_starts(rt.planner.latest(snapshot, queued), rt.planner.clock()) if queued.pending else {}
    out = [QueueOut(name=q.name, order=q.order, cohort=q.cohort, quota=dict(q.guarantee),
                    borrowing_limit=dict(q.borrowing_limit), usage=dict(usage.get(q.name, {})),
                    pending=waiting.pop(q.name, 0), next_start_in_s=upcoming.get(q.name, (None, None))[0],
                    next_wait_reason=upcoming.get(q.name, (None, None))[1]) for q in queues.queues.values()]
    config = json.loads(queued.spec) if queued.spec is not None else DEFAULT_QUEUES
    return QueuesOut(configured=queued.spec is not None, queues=out, config=config, other_pending=waiting)


@router.put("/queues", responses=linked("get_queues"))
async def put_queues(body: QueuesIn, rt: WriteRuntime) -> QueuesOut:
    """Set the queue configuration (the shape of a queues YAML file). It is checked against the cluster:
    a quota above its capacity, a cycle of cohorts, an unknown GPU type or order is a 422 naming the
    field. Pending jobs are scheduled again on it at once."""
    snapshot = await run_in_threadpool(rt.store.snapshot)
    try:
        queues = queues_from_dict(body.model_dump(exclude_none=True), snapshot.cluster, "request body")
    except QueueConfigError as exc:
        raise HTTPException(422, str(exc)) from exc
    await rt.cycle.run(SetQueues(queues_to_dict(queues)))
    return await run_in_threadpool(_queues_out, rt)


routes = [*router.routes, *_streams.routes]


def wake_from_thread(rt: Runtime) -> None:
    """A scheduling pass, asked from a request's worker thread (after a new cluster spec)."""
    anyio.from_thread.run(rt.cycle.wake)


def next_starts(plan: Plan, now: float | None = None) -> dict[str, tuple[float | None, str | None]]:
    """Per queue with a job starting or waiting in ``plan``: in how many seconds from ``now`` (default the
    plan's time) its next job is estimated to start, and why it waits. The plan lists each queue's waiting
    jobs in the order the pass took them, so a queue's first one is the next it would start."""
    now = plan.now if now is None else now
    out: dict[str, tuple[float | None, str | None]] = {start.queue: (0.0, None) for start in plan.starts}
    for waiting in plan.waiting:
        if waiting.queue not in out:
            at_s = waiting.reservation_at_s
            in_s = max(at_s - now, 0.0) if at_s is not None and math.isfinite(at_s) else None
            out[waiting.queue] = (in_s, waiting.reason.value)
    return out
