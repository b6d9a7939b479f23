"""Every operation of the service's ``/openapi.json`` (by its operation id) and the client method that
calls it; what both clients share to build a request and read its answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from service.http.responses import JobState

Answer = TypeVar("Answer", bound=BaseModel)
Body = BaseModel | Mapping[str, Any]
"""A request body: the service's request model (``service.http.schemas``) or its JSON as a mapping."""
JobsState = Literal["pending", "running", "ended", "cancelled"]
DEFAULT_TIMEOUT_S = 60.0
"""Long enough for a batch placement at its longest time limit (60 s) to answer."""


class Operation(NamedTuple):
    method: str
    path: str
    client_method: str


OPERATIONS: Mapping[str, Operation] = {
    "healthz": Operation("GET", "/healthz", "health"),
    "readyz": Operation("GET", "/readyz", "ready"),
    "metrics": Operation("GET", "/metrics", "metrics"),
    "predict": Operation("POST", "/v1/predict", "predict"),
    "place": Operation("POST", "/v1/place", "place"),
    "place_batch": Operation("POST", "/v1/place/batch", "place_batch"),
    "get_job": Operation("GET", "/v1/jobs/{job_id}", "get_job"),
    "release_job": Operation("POST", "/v1/jobs/{job_id}/release", "release_job"),
    "complete_job": Operation("POST", "/v1/jobs/{job_id}/complete", "complete_job"),
    "submit_job": Operation("POST", "/v1/jobs", "submit_job"),
    "list_jobs": Operation("GET", "/v1/jobs", "list_jobs"),
    "cancel_job": Operation("DELETE", "/v1/jobs/{job_id}", "cancel_job"),
    "job_events": Operation("GET", "/v1/jobs/{job_id}/events", "job_events"),
    "get_queues": Operation("GET", "/v1/queues", "get_queues"),
    "get_waiting": Operation("GET", "/v1/queues/waiting", "get_waiting"),
    "put_queues": Operation("PUT", "/v1/queues", "set_queues"),
    "get_cluster": Operation("GET", "/v1/cluster", "get_cluster"),
    "get_cluster_gpus": Operation("GET", "/v1/cluster/gpus", "get_cluster_gpus"),
    "put_cluster": Operation("PUT", "/v1/cluster", "load_cluster"),
    "get_models": Operation("GET", "/v1/models", "get_models"),
    "get_model_error": Operation("GET", "/v1/models/error", "get_model_error"),
    "reload_models": Operation("POST", "/v1/models/reload", "reload_models"),
}
"""The operation id of each operation the clients call, its method and path, and the method calling it."""

NOT_CALLED: Mapping[str, str] = {
    name: "kube-scheduler's own call, with Kubernetes' ExtenderArgs (docs/service.md)"
    for name in ("extender_filter", "extender_prioritize", "extender_bind")}
"""Operations of ``/openapi.json`` no client method calls, and why."""


@dataclass(frozen=True)
class Call(Generic[Answer]):
    """One request: the operation, its path parameters, query and body, and the model its answer is."""

    operation: str
    answer: type[Answer]
    path_params: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str | int] | None = None
    body: Body | None = None

    @property
    def method(self) -> str:
        return OPERATIONS[self.operation].method

    @property
    def path(self) -> str:
        return path_of(self.operation, **self.path_params)

    def json(self) -> Any:
        return body_json(self.body)


def path_of(operation: str, **path_params: str) -> str:
    return OPERATIONS[operation].path.format(**{k: quote(v, safe="") for k, v in path_params.items()})


def body_json(body: Body | None) -> Any:
    """The JSON of ``body``: a request model as the caller set it (the service fills in its defaults)."""
    if isinstance(body, BaseModel):
        return body.model_dump(mode="json", exclude_unset=True)
    return None if body is None else dict(body)


def read(call: Call[Answer], content: bytes) -> Answer:
    """The answer as the service's model: validated as strictly as the service writes it (an answer that
    does not match is a server of another version, and raises pydantic's ``ValidationError``)."""
    return call.answer.model_validate_json(content)


def auth_headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    return {**(headers or {}), **({"X-API-Key": api_key} if api_key else {})}


def jobs_query(state: JobsState | None, queue: str | None, after: str | None, limit: int) -> dict[str, str | int]:
    given = {"state": state, "queue": queue, "after": after}
    return {**{k: v for k, v in given.items() if v is not None}, "limit": limit}


def cluster_body(spec: Body | str) -> Body:
    return {"name": spec} if isinstance(spec, str) else spec


def completion_body(duration_s: float, usage: Mapping[str, float] | None) -> dict[str, Any]:
    return {"duration_s": duration_s, **({"usage": dict(usage)} if usage else {})}


def events_headers(last_event_id: int | None) -> dict[str, str]:
    return {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}


class JobEvent(BaseModel):
    """One state change of a submitted job, as ``GET /v1/jobs/{job_id}/events`` streams it: its number
    (``Last-Event-ID`` resumes after it), the state it came to, why, at which state generation and when."""

    model_config = ConfigDict(extra="forbid")

    id: int
    job_id: str
    state: JobState
    reason: str
    generation: int
    at: float


class EventParser:
    """Server-sent events, fed one line at a time: each event complete at its blank line."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> JobEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> JobEvent | None:
        data, self._data = "\n".join(self._data), []
        if not data:
            return None
        return JobEvent.model_validate({**json.loads(data), "id": int(self._id or 0)})
