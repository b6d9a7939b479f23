"""The blocking client: :class:`Client`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from gpuplace.client.errors import ApiError, ServiceUnreachable
from gpuplace.client.operations import (
    DEFAULT_TIMEOUT_S,
    Answer,
    Body,
    Call,
    EventParser,
    JobEvent,
    JobsState,
    auth_headers,
    cluster_body,
    completion_body,
    events_headers,
    jobs_query,
    path_of,
    read,
)
from service.http.responses import (
    BatchOut,
    CancelledOut,
    ClusterGpusOut,
    ClusterLoadedOut,
    ClusterOut,
    CompletedOut,
    DecisionOut,
    EstimateOut,
    HealthOut,
    JobOut,
    JobsOut,
    JobSummaryOut,
    ModelErrorOut,
    ModelsOut,
    QueuesOut,
    ReadyOut,
    ReleasedOut,
    SubmittedOut,
    WaitingOut,
)

if TYPE_CHECKING:
    from service.http.schemas import BatchIn, ClusterIn, JobIn, PlaceIn, QueuesIn, SubmitIn


class Client:
    """The service's REST API at ``base_url``, one method per operation, each answering with the service's
    response model (``service.http.responses``).

    ``api_key``: sent as ``X-API-Key`` (the service asks for it on mutating endpoints, and on reads too
    with ``GPUPLACE_PROTECT_READS``). ``timeout``: seconds per request (``None``: wait for ever). Request
    bodies are the service's request models (``service.http.schemas``) or their JSON as dicts.

    An error status raises :class:`ApiError`; no answer at all raises :class:`ServiceUnreachable`. No
    request is retried: a placement or a submission is not idempotent, and only the caller knows whether
    to send it again (``ServiceUnreachable.sent`` says whether it may have arrived). ``connect_retries``
    retries connecting only, which sends nothing twice. ``transport``: an httpx transport of your own
    (it replaces ``connect_retries``)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float | None = DEFAULT_TIMEOUT_S, *,
                 connect_retries: int = 0, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.base_url, headers=auth_headers(api_key, headers), timeout=timeout,
                                  transport=transport or httpx.HTTPTransport(retries=connect_retries))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **options)
        except httpx.TransportError as exc:
            raise ServiceUnreachable.of(self.base_url, method, path, exc) from exc
        if response.is_error:
            raise ApiError.of(response)
        return response

    def _send(self, call: Call[Answer]) -> Answer:
        response = self._request(call.method, call.path, params=call.params, json=call.json())
        return read(call, response.content)

    # health

    def health(self) -> HealthOut:
        """``GET /healthz``: the process is up."""
        return self._send(Call("healthz", HealthOut))

    def ready(self) -> ReadyOut:
        """``GET /readyz``: the database answers (``ready``, or ``degraded`` while no registered model
        answers); an :class:`ApiError` with status 503 when it does not."""
        return self._send(Call("readyz", ReadyOut))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text page."""
        return self._request("GET", path_of("metrics")).text

    # estimates and placement

    def predict(self, job: JobIn | Body) -> EstimateOut:
        """``POST /v1/predict``: what the job will need, per task and resource, and its duration."""
        return self._send(Call("predict", EstimateOut, body=job))

    def place(self, job: PlaceIn | Body) -> DecisionOut:
        """``POST /v1/place``: estimate, then place the job (gang). A job that does not fit is an answer,
        not an error: ``verdict`` (``unschedulable-now``, ``can-never-fit``), ``committed`` false, and
        ``reasons``. ``dry_run`` in the body decides without storing."""
        return self._send(Call("place", DecisionOut, body=job))

    def place_batch(self, batch: BatchIn | Body) -> BatchOut:
        """``POST /v1/place/batch``: place jobs together with a batch policy (``gga``, ``cpsat``, ``ffd``)."""
        return self._send(Call("place_batch", BatchOut, body=batch))

    # jobs

    def get_job(self, job_id: str) -> JobOut:
        """``GET /v1/jobs/{job_id}``: the job as stored."""
        return self._send(Call("get_job", JobOut, {"job_id": job_id}))

    def release_job(self, job_id: str) -> ReleasedOut:
        """``POST /v1/jobs/{job_id}/release``: free its resources (idempotent)."""
        return self._send(Call("release_job", ReleasedOut, {"job_id": job_id}))

    def complete_job(self, job_id: str, duration_s: float, usage: Mapping[str, float] | None = None) -> CompletedOut:
        """``POST /v1/jobs/{job_id}/complete``: it finished after ``duration_s``, having used ``usage`` per
        instance (``gpu``, ``gpu_mem_gib``, ``cpu_cores``, ``mem_gib``, ``net_gbps``): free its resources
        and keep both for retraining."""
        body = completion_body(duration_s, usage)
        return self._send(Call("complete_job", CompletedOut, {"job_id": job_id}, body=body))

    # the queue

    def submit_job(self, job: SubmitIn | Body) -> SubmittedOut:
        """``POST /v1/jobs``: store the job in its queue; ``pending``, or ``running`` if it started at once."""
        return self._send(Call("submit_job", SubmittedOut, body=job))

    def list_jobs(self, state: JobsState | None = None, queue: str | None = None, after: str | None = None,
                  limit: int = 100) -> JobsOut:
        """``GET /v1/jobs``: a page of jobs by id, after ``after``; its ``next`` is the next page's ``after``."""
        return self._send(Call("list_jobs", JobsOut, params=jobs_query(state, queue, after, limit)))

    def iter_jobs(self, state: JobsState | None = None, queue: str | None = None,
                  page_size: int = 100) -> Iterator[JobSummaryOut]:
        """Every job :meth:`list_jobs` pages through, a page at a time."""
        after: str | None = None
        while True:
            page = self.list_jobs(state, queue, after, page_size)
            yield from page.jobs
            if page.next is None:
                return
            after = page.next

    def cancel_job(self, job_id: str) -> CancelledOut:
        """``DELETE /v1/jobs/{job_id}``: take a pending job out of its queue (409 if it is not pending)."""
        return self._send(Call("cancel_job", CancelledOut, {"job_id": job_id}))

    def job_events(self, job_id: str, *, follow: bool = False, last_event_id: int | None = None) -> Iterator[JobEvent]:
        """``GET /v1/jobs/{job_id}/events``: its state changes, after ``last_event_id``. ``follow``: until it
        ends or is cancelled (the server closes the stream after 300 s; resume with the last event's
        ``id``), waiting for each without a read timeout. The request is sent when iteration starts."""
        path = path_of("job_events", job_id=job_id)
        timeout = httpx.Timeout(self.timeout, read=None) if follow else httpx.Timeout(self.timeout)
        try:
            with self._http.stream("GET", path, params={"follow": str(follow).lower()},
                                   headers=events_headers(last_event_id), timeout=timeout) as response:
                if response.is_error:
                    response.read()
                    raise ApiError.of(response)
                parser = EventParser()
                for line in response.iter_lines():
                    if (event := parser.feed(line)) is not None:
                        yield event
        except httpx.TransportError as exc:
            raise ServiceUnreachable.of(self.base_url, "GET", path, exc) from exc

    def get_queues(self) -> QueuesOut:
        """``GET /v1/queues``: each queue's quota, borrowing limit, usage and pending jobs."""
        return self._send(Call("get_queues", QueuesOut))

    def get_waiting(self) -> WaitingOut:
        """``GET /v1/queues/waiting``: why each pending job waits, from a scheduling pass that commits nothing."""
        return self._send(Call("get_waiting", WaitingOut))

    def set_queues(self, config: QueuesIn | Body) -> QueuesOut:
        """``PUT /v1/queues``: set the queue configuration (the shape of a queues YAML file)."""
        return self._send(Call("put_queues", QueuesOut, body=config))

    # the cluster and the model

    def get_cluster(self) -> ClusterOut:
        """``GET /v1/cluster``: the cluster and its allocation, in total and per machine."""
        return self._send(Call("get_cluster", ClusterOut))

    def get_cluster_gpus(self) -> ClusterGpusOut:
        """``GET /v1/cluster/gpus``: every machine's GPUs with their allocated share, by job."""
        return self._send(Call("get_cluster_gpus", ClusterGpusOut))

    def load_cluster(self, spec: ClusterIn | Body | str) -> ClusterLoadedOut:
        """``PUT /v1/cluster``: load a cluster spec, or a shipped cluster by its name (409 while running jobs
        would not fit it, unless the spec says ``force``)."""
        return self._send(Call("put_cluster", ClusterLoadedOut, body=cluster_body(spec)))

    def get_models(self) -> ModelsOut:
        """``GET /v1/models``: the model version answering and why it is degraded, if it is."""
        return self._send(Call("get_models", ModelsOut))

    def get_model_error(self) -> ModelErrorOut:
        """``GET /v1/models/error``: the recent error and drift of the estimates, per target and model version."""
        return self._send(Call("get_model_error", ModelErrorOut))

    def reload_models(self) -> ModelsOut:
        """``POST /v1/models/reload``: load the version behind the alias now."""
        return self._send(Call("reload_models", ModelsOut))
