"""Rows of the state database and the domain values they hold (the JSON forms: :mod:`service.codec`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from placement import Allocation, Cluster, Decision, Job
from service.codec import Json, allocation_from_json, allocation_to_json, job_from_json, job_to_json
from service.store.schema import PENDING, RUNNING

__all__ = [
    "EventRow",
    "JobRow",
    "Json",
    "allocation_of",
    "completion_row",
    "dumps",
    "end_row",
    "event_row",
    "job_of",
    "job_row",
    "pending_row",
    "placed_row",
]


@dataclass(frozen=True)
class JobRow:
    """A job as stored: its row, and its completion if it has one."""

    job_id: str
    state: str
    demand: Json
    allocation: Json
    policy: str
    details: Json
    placed_generation: int
    placed_at: float
    ended_at: float | None
    completion: Json | None
    queue: str | None = None
    priority: int | None = None
    mode: str | None = None
    submitted_at: float | None = None
    requested_policy: str | None = None


@dataclass(frozen=True)
class EventRow:
    """One state change of a submitted job: ``state`` it came to at ``generation``, and why."""

    id: int
    job_id: str
    generation: int
    state: str
    reason: str
    at: float


_NOT_QUEUED = {"queue": None, "priority": None, "mode": None, "submitted_at": None, "p50_s": None, "p90_s": None,
               "requested_policy": None, "submitted_mode": None}


def dumps(value: Json) -> str:
    """``value`` as JSON text, as ``json.dumps`` writes it but for spaces (``NaN`` included), about four
    times faster: a placement stores three such documents, on the event loop. A value JSON cannot
    hold is a ``ValueError``."""
    return to_json(value).decode()


def placed_row(cluster: Cluster, decision: Decision, job: Job, details: Json | None, generation: int,
               now: float) -> dict[str, Any]:
    """The ``jobs`` row of a job placed by ``decision`` at ``generation``."""
    assert decision.allocation is not None
    return {"job_id": job.job_id, "state": RUNNING, "demand": dumps(job_to_json(job)),
            "allocation": dumps(allocation_to_json(cluster, decision.allocation)), "policy": decision.policy,
            "details": dumps(details or {}), "placed_generation": generation, "placed_at": now, "ended_at": None,
            "ended_generation": None, **_NOT_QUEUED}


def pending_row(job: Job, queue: str, mode: str, p50_s: float, p90_s: float, details: Json | None,
                generation: int, now: float, policy: str | None = None) -> dict[str, Any]:
    """The ``jobs`` row of a job submitted to ``queue`` at ``generation``: pending, holding nothing
    (allocation JSON ``null``); ``placed_*`` say when it was stored until it is placed; ``policy``: the
    placement policy it asked for (``requested_policy``; ``None``: the service's)."""
    return {"job_id": job.job_id, "state": PENDING, "demand": dumps(job_to_json(job)), "allocation": "null",
            "policy": "", "details": dumps(details or {}), "placed_generation": generation, "placed_at": now,
            "ended_at": None, "ended_generation": None, "queue": queue, "priority": job.priority, "mode": mode,
            "submitted_at": now, "p50_s": None if p50_s != p50_s else p50_s, "p90_s": None if p90_s != p90_s else p90_s,
            "requested_policy": policy, "submitted_mode": mode}


def event_row(job_id: str, generation: int, state: str, reason: str, now: float) -> dict[str, Any]:
    return {"job_id": job_id, "generation": generation, "state": state, "reason": reason, "at": now}


def end_row(job_id: str, state: str, generation: int, now: float) -> dict[str, Any]:
    """The parameters that end a running job's row (``ending``: its id; ``new_state``; ``ended``: the generation)."""
    return {"ending": job_id, "new_state": state, "now": now, "ended": generation}


def completion_row(job_id: str, duration_s: float, usage: Json, now: float) -> dict[str, Any]:
    return {"job_id": job_id, "duration_s": duration_s, "usage": json.dumps(usage), "completed_at": now}


def job_row(r: Any) -> JobRow:
    """A job row with its completion's columns (``duration_s``, ``usage``, ``completed_at``; ``None``
    without one), by attribute."""
    completion = None if r.completed_at is None else {
        "duration_s": float(r.duration_s), "usage": json.loads(r.usage), "completed_at": float(r.completed_at)}
    return JobRow(r.job_id, r.state, json.loads(r.demand), json.loads(r.allocation), r.policy, json.loads(r.details),
                  int(r.placed_generation), float(r.placed_at), r.ended_at, completion, r.queue, r.priority, r.mode,
                  r.submitted_at, r.requested_policy)


def job_of(demand: str) -> Job:
    """The job a row's ``demand`` describes."""
    return job_from_json(json.loads(demand))


def allocation_of(cluster: Cluster, job_id: str, allocation: str) -> Allocation:
    """A row's ``allocation`` on ``cluster`` (``OrphanedAllocation`` if it names what the cluster lacks)."""
    return allocation_from_json(cluster, job_id, json.loads(allocation))
