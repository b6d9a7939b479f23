"""The gpuplace REST service: ``create_app`` wires the state database, the estimator and the routes.

Routes: ``/v1/predict``, ``/v1/place``, ``/v1/jobs/...`` (``service.http.jobs``); the queue,
``POST``/``GET /v1/jobs``, ``DELETE /v1/jobs/{id}``, its events and ``/v1/queues``
(``service.http.queue``); ``/v1/cluster``,
``/v1/models``, ``/healthz``, ``/readyz``, ``/metrics`` (here); the dashboard at ``/ui/`` with the read
endpoints it needs (``service.http.ui``). Bad input is a 422 naming the field;
a request body above ``max_body_bytes`` (``extender_max_body_bytes`` on the extender's paths, whose
NodeLists are large) a 413; domain conflicts a 409; never a 500 for bad input.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import numpy as np
import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from placement import MILLI, InputError, compile_kernels, load_cluster
from service.codec import cluster_from_json
from service.estimator import EstimatorHolder, Registry, settle_heap
from service.http import errors
from service.http.jobs import router as jobs_router
from service.http.queue import routes as queue_routes
from service.http.queue import wake_from_thread
from service.http.responses import (
    ClusterLoadedOut,
    ClusterOut,
    HealthOut,
    MachineOut,
    ModelsOut,
    NotReadyOut,
    ReadyOut,
    RefusedOut,
)
from service.http.schemas import ClusterIn
from service.http.ui import routes as ui_routes
from service.k8s.extender import router as k8s_router
from service.k8s.gang import Gangs
from service.k8s.listener import PREFIX as EXTENDER_PREFIX
from service.openapi import linked, operation_id
from service.problems import ANYWHERE, problem, problems
from service.runtime import ReadRuntime, Runtime, RuntimeDep, WriteRuntime
from service.settings import Settings
from service.store import Refused, Replace, Replaced, open_store

log = logging.getLogger(__name__)
API_VERSION = "1"
Made = TypeVar("Made")


def build_runtime(settings: Settings) -> Runtime:
    """The store (creating the schema, loading the configured cluster into an empty database) and the
    estimator (the registry's alias, or the heuristic when there is none)."""
    from models.registry import ModelRegistry
    from training.pipeline.serving import RegisteredEstimators

    def registered() -> RegisteredEstimators:
        registry = ModelRegistry(settings.resolved_mlflow_uri(), settings.model_name)
        return RegisteredEstimators(registry, settings.prediction_cache_rows)

    store = _retrying(lambda: open_store(settings))
    registry: Registry | None
    try:  # several workers starting at once may race to create the registry's tables: the loser retries
        registry = _retrying(registered, errors=(Exception,))
    except Exception as exc:  # no registry: serve with the heuristic, /readyz says why
        log.warning("model registry unavailable", extra={"error": str(exc)})
        registry = None
    return Runtime(settings, store, EstimatorHolder(registry, settings.model_alias))


def _retrying(make: Callable[[], Made], attempts: int = 6, pause_s: float = 1.0,
              errors: tuple[type[Exception], ...] = (sa.exc.SQLAlchemyError,)) -> Made:
    """``make()``, retried on database errors (another process creating the same tables)."""
    for attempt in range(attempts):
        try:
            return make()
        except errors:
            if attempt == attempts - 1:
                raise
            time.sleep(pause_s * (attempt + 1))
    raise AssertionError("unreachable")


def create_app(settings: Settings | None = None, rt: Runtime | None = None) -> FastAPI:
    settings = settings or (rt.settings if rt else Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        current = rt or build_runtime(settings)
        compile_kernels()  # the fragmentation kernels, compiled or loaded from the disk cache before any request
        answering = current.estimator.reload()  # a model it loads settles the heap (``settle_heap``)
        current.estimator.start(settings.model_poll_s)
        if not settings.accepted_keys():
            log.warning("no API keys configured: mutating endpoints are open (set GPUPLACE_API_KEYS)")
        app.state.runtime = current
        gangs = app.state.gangs = Gangs(current)
        try:  # gangs placed before a restart: their members get a full wait again
            await gangs.adopt()
        except Exception as exc:  # the database: serve on, gangs placed again as their members come
            log.warning("gangs not adopted", extra={"error": str(exc)})
        current.metrics.publish(current.estimator)  # the model version this worker answers with
        if answering is None:  # no model loaded: what start-up loaded (the store) stays out of the passes too
            settle_heap()
        follower = None
        if settings.kube_follow:
            from service.k8s.follow import Follower
            follower = app.state.follower = Follower(current)
            follower.start()
        yield
        gangs.close()
        if follower is not None:
            await follower.stop()
        current.estimator.stop()
        current.cycle.stop()
        current.store.close()
        current.metrics.close()

    # FastAPI's OpenTelemetry bridge asks the global providers on every request even when none is set up,
    # a cost every placement pays: on only when asked for
    telemetry = None if settings.otel else TelemetryConfig(tracing=False, metrics=False, logs=False,
                                                           operation_spans=False)
    # One flat list of routes, the hot ones first: an included router stays a node of its own that
    # every request searches through
    app = FastAPI(title="gpuplace", version=API_VERSION, lifespan=lifespan, telemetry=telemetry,
                  description="Resource estimates and placement of deep-learning jobs on a GPU cluster.",
                  routes=[*jobs_router.routes, *queue_routes, *k8s_router.routes, *_router.routes, *ui_routes])
    app.add_middleware(LimitsAndMetrics, max_body=settings.max_body_bytes,
                       extender_max_body=settings.extender_max_body_bytes)
    errors.install(app)
    return app


class LimitsAndMetrics:
    """Pure ASGI middleware: 413 for a body larger than ``max_body`` (``extender_max_body`` on the extender's
    paths: kube-scheduler sends whole NodeLists unless node-cache capable), declared by Content-Length, or
    counted as a chunked body arrives; request latency by route."""

    def __init__(self, app: ASGIApp, max_body: int, extender_max_body: int | None = None) -> None:
        self.app, self.max_body = app, max_body
        self.extender_max_body = max_body if extender_max_body is None else extender_max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        limit = self.extender_max_body if scope["path"].startswith(EXTENDER_PREFIX) else self.max_body
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await self._too_large(scope, receive, send, limit)
            return
        if length is None and scope["method"] in ("POST", "PUT", "PATCH"):  # chunked: count as it arrives
            body = await self._read_at_most(receive, limit)
            if body is None:
                await self._too_large(scope, receive, send, limit)
                return
            receive = _replaying(body, receive)
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, sending)
        rt: Runtime | None = getattr(scope["app"].state, "runtime", None)
        if rt is not None:
            path = getattr(scope.get("route"), "path", "unmatched")
            rt.metrics.latency.labels(scope["method"], path, str(status)).observe(time.perf_counter() - started)
            if rt.metrics.multiprocess:  # this worker's part, whichever worker answers the next scrape
                rt.metrics.publish(rt.estimator)


    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        reply = problem(413, f"request body too large: limit {limit} bytes")
        await reply(scope, receive, send)

    async def _read_at_most(self, receive: Receive, limit: int) -> bytes | None:
        """The whole body, or ``None`` as soon as it passes ``limit`` bytes."""
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body`` (already read) first, then defers to the server's."""
    pending = True

    async def again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


_router = APIRouter(responses=problems(*ANYWHERE), generate_unique_id_function=operation_id)


@_router.get("/healthz", tags=["health"])
async def healthz() -> HealthOut:
    """The process is up."""
    return HealthOut(status="ok")


@_router.get("/readyz", tags=["health"], response_model=ReadyOut,
             responses={503: {"model": NotReadyOut, "description": "the database does not answer"}})
async def readyz(rt: RuntimeDep, request: Request) -> ReadyOut | JSONResponse:
    """Ready when the database answers; ``degraded`` when no registered model answers (heuristic), the
    last reload failed (the last good model keeps answering), or the Kubernetes cluster is followed and
    its watch is not running (``kubernetes`` says why)."""
    try:
        generation = await run_in_threadpool(rt.store.generation)
    except Exception as exc:  # the database is down: not ready
        return JSONResponse(NotReadyOut(status="unavailable", database=f"error: {exc}").model_dump(),
                            status_code=503)
    follower = getattr(request.app.state, "follower", None)
    behind = follower is not None and not follower.following
    return ReadyOut(status="degraded" if rt.estimator.degraded or behind else "ready", database="ok",
                    generation=generation, model_version=rt.estimator.version, model_error=rt.estimator.last_error,
                    auth="on" if rt.keys else "off", kubernetes=None if follower is None else follower.state)


@_router.get("/metrics", tags=["health"], response_class=PlainTextResponse)
def metrics(rt: RuntimeDep) -> Response:
    """Prometheus metrics (text format): requests, decisions, capacity and allocation per GPU type, queues,
    preemptions, the Kubernetes extender, prediction error, the processes (``docs/service.md``, "Metrics").
    With several workers, every worker's counts added up, whichever answers."""
    return Response(rt.metrics.scrape(rt.estimator), media_type=CONTENT_TYPE_LATEST)


@_router.get("/v1/cluster", tags=["cluster"], responses=linked("put_cluster", body={"name": "$response.body#/name"}))
async def get_cluster(rt: ReadRuntime) -> ClusterOut:
    """Summary and per-machine allocation. Linked to loading the cluster again by its name (a shipped
    cluster's spec, as shipped)."""
    return await run_in_threadpool(_cluster_out, rt)


def _cluster_out(rt: Runtime) -> ClusterOut:
    s = rt.store.snapshot()
    layout, cluster = s.layout, s.cluster
    milli = s.machine_gpu_milli
    racks = dict(cluster.topology.machine_racks)
    machines = [MachineOut(name=m.name, gpu_type=m.gpu_type, gpus=m.gpus, gpus_allocated=int(milli[i]) / MILLI,
                           cpu_cores=m.cpu_cores, cpu_cores_allocated=int(s.cpu_used[i]) / MILLI, mem_gib=m.mem_gib,
                           mem_gib_allocated=int(s.mem_used[i]) / 1024, rack=racks.get(m.name))
                for i, m in enumerate(cluster.machines)]
    return ClusterOut(name=cluster.name, generation=s.generation, machines=len(cluster), gpus=cluster.total_gpus,
                      gpus_allocated=float(np.sum(milli)) / MILLI, running_jobs=len(s.allocations),
                      gpu_types=list(layout.gpu_types), per_machine=machines)


@_router.put("/v1/cluster", tags=["cluster"], responses={**problems(409), **linked("get_cluster")})
def put_cluster(body: ClusterIn, rt: WriteRuntime) -> ClusterLoadedOut:
    """Load a cluster spec (a shipped name, or machines with optional racks and domains). Refused (409)
    while running jobs would not fit it, unless ``force``, which evicts those jobs. Written from this
    request's worker thread through the store's write path, not in a cycle on the event loop: fitting
    every running job to the new spec takes a while, and loading one is rare."""
    try:
        if body.machines is None:
            cluster = load_cluster(body.name)
        else:
            spec = body.model_dump()
            cluster = cluster_from_json({**spec, "machines": [m.model_dump() for m in body.machines]})
    except (InputError, ValueError) as exc:
        raise HTTPException(422, str(exc)) from exc
    match rt.store.write([Replace(cluster, force=body.force)]).results[0]:
        case Replaced(evicted=evicted, generation=generation):
            wake_from_thread(rt)  # pending jobs may fit the new cluster
            return ClusterLoadedOut(name=cluster.name, machines=len(cluster), gpus=cluster.total_gpus,
                                    evicted=list(evicted), generation=generation)
        case Refused(detail=detail):
            raise HTTPException(409, detail)
        case other:
            raise AssertionError(f"loading a cluster spec came to {other!r}")


@_router.get("/v1/models", tags=["models"])
async def get_models(rt: ReadRuntime) -> ModelsOut:
    """The model version answering, the alias it is loaded from, and why it is degraded if it is."""
    return _models_out(rt)


@_router.post("/v1/models/reload", tags=["models"], responses=linked("get_models"))
async def reload_models(rt: WriteRuntime) -> ModelsOut:
    """Load the version behind the alias now (atomically; on failure the last good model stays)."""
    await run_in_threadpool(rt.estimator.reload)
    return _models_out(rt)


def _models_out(rt: Runtime) -> ModelsOut:
    current, refusal = rt.estimator.current, rt.estimator.refusal
    refused = None if refusal is None else RefusedOut(version=refusal.version, reason=refusal.reason, at=refusal.at)
    return ModelsOut(answering=rt.estimator.version, alias=rt.estimator.alias, degraded=rt.estimator.degraded,
                     last_error=rt.estimator.last_error, loaded_at=current.loaded_at if current else None,
                     refused=refused)
