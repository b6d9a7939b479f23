"""The dashboard at ``/ui/`` (static HTML, JavaScript and CSS in ``static/``, no build step) and the read-only
endpoints it needs beyond the rest of the API: every GPU's allocation with the job shares on it
(``GET /v1/cluster/gpus``), the recent error and drift of the estimates (``GET /v1/models/error``), and why
each pending job waits (``GET /v1/queues/waiting``). The page reads these and the other read endpoints
with the API key the user gives it, when reads need one (``docs/dashboard.md``)."""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from placement import MILLI
from service.estimator import HEURISTIC
from service.http.responses import ClusterGpusOut, ModelErrorOut, WaitingOut
from service.metrics import RECENT_COMPLETIONS
from service.openapi import operation_id
from service.problems import ANYWHERE, problems
from service.runtime import ReadRuntime, Runtime
from training.pipeline.drift import COVERAGE_DROP, RATIO_LIMIT, Pair, drift_report, pairs

STATIC = Path(__file__).resolve().parent / "static"
PATH = "/ui"
SECURITY_HEADERS = {
    # the page loads nothing but its own files and talks to nothing but this service
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # revalidated on every load (ETag): a new version of the service serves its new page at once
    "Cache-Control": "no-cache",
}
TRAINING_RETRY_S = 300.0
"""How long a version whose training metrics the registry did not give is left before asking again: the
page polls every few seconds, and a registry that is down takes tens of seconds to fail each time."""

router = APIRouter(prefix="/v1", responses=problems(*ANYWHERE), generate_unique_id_function=operation_id)


@router.get("/cluster/gpus", tags=["cluster"])
async def get_cluster_gpus(rt: ReadRuntime) -> ClusterGpusOut:
    """Every GPU's allocated thousandths and GPU memory, machine by machine with its rack and domain, and
    the share each running job holds of each GPU (what the dashboard draws)."""
    return await run_in_threadpool(_cluster_gpus, rt)


def _cluster_gpus(rt: Runtime) -> ClusterGpusOut:
    s = rt.store.snapshot()
    cluster, layout = s.cluster, s.layout
    held: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # global GPU -> job -> milli
    hosting: dict[int, set[str]] = defaultdict(set)  # machine -> jobs
    for job_id, allocation in s.allocations.items():
        for p in allocation.instances:
            hosting[p.machine].add(job_id)
            for g in p.gpus:
                held[g][job_id] += p.gpu_milli
    milli, mem = s.gpu_milli_used.tolist(), s.gpu_mem_used.tolist()
    first, count = layout.gpu_first.tolist(), layout.gpu_count.tolist()
    cpu, host_mem = s.cpu_used.tolist(), s.mem_used.tolist()
    index, topology = cluster.index, cluster.topology
    machines = []
    for name in topology.machines:
        i = index[name]
        m, gpus = cluster.machines[i], range(first[i], first[i] + count[i])
        machines.append({
            "name": name, "rack": topology.rack_of(name), "domain": topology.domain_of(name), "gpu_type": m.gpu_type,
            "gpu_mem_gib": m.gpu_mem_gib, "gpu_milli": [milli[g] for g in gpus], "gpu_mem_mib": [mem[g] for g in gpus],
            "shares": [{"gpu": g - first[i], "job_id": job_id, "milli": amount}
                       for g in gpus if g in held for job_id, amount in sorted(held[g].items())],
            "jobs": sorted(hosting.get(i, ())),
            "cpu_cores": m.cpu_cores, "cpu_cores_allocated": cpu[i] / MILLI, "mem_gib": m.mem_gib,
            "mem_gib_allocated": host_mem[i] / 1024})
    # validated in one pass from plain values: a model built per machine and GPU took longer than the read
    return ClusterGpusOut.model_validate({"name": cluster.name, "generation": s.generation,
                                           "running_jobs": len(s.allocations), "machines": machines})


@router.get("/models/error", tags=["models"])
async def get_model_error(rt: ReadRuntime) -> ModelErrorOut:
    """Per target and model version, the mean absolute log error and P90 coverage of the estimates the most
    recently completed jobs were placed with, against those the version measured at training, and whether
    the target drifted (the comparison ``gpuplace models drift`` makes, over the 200 most recent completions)."""
    return await run_in_threadpool(_model_error, rt)


def _model_error(rt: Runtime) -> ModelErrorOut:
    rows = rt.store.completions(newest=RECENT_COMPLETIONS)
    completed = [{"details": r.details, "completion": r.completion} for r in rows
                 if isinstance(r.details, dict) and isinstance(r.completion, dict)]
    found = [p for p in pairs(completed) if _usable(p)]
    trained = _training_metrics(rt)
    report = drift_report(found, trained)
    targets = [{**{key: _finite(entry[key]) for key in ("recent_male", "recent_p90_coverage", "train_male",
                                                        "train_p90_coverage", "male_ratio")},
                "target": entry["target"], "model_version": entry["model_version"], "jobs": entry["jobs"],
                "drifted": entry["drifted"], "rolling_male": [v for v in entry["rolling_male"] if math.isfinite(v)]}
               for entry in report.values()]
    return ModelErrorOut.model_validate({
        "answering": rt.estimator.version, "completions": len(rows), "window": RECENT_COMPLETIONS,
        "ratio_limit": RATIO_LIMIT, "coverage_drop": COVERAGE_DROP, "targets": targets})


def _usable(pair: Pair) -> bool:
    return all(math.isfinite(v) for v in (pair.point, pair.p90, pair.observed))


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


@runtime_checkable
class _Versions(Protocol):
    """A model registry that tells the metrics a version's training run logged (``models.registry``)."""

    def run_info(self, version: str) -> Any: ...


class _TrainingMetrics:
    """The metrics each version logged at training, asked of the registry once per version (they never
    change), a failure asked again after ``TRAINING_RETRY_S``."""

    def __init__(self, versions: _Versions) -> None:
        self.versions = versions
        self._known: dict[str, dict[str, float]] = {}
        self._failed_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, version: str) -> dict[str, float]:
        with self._lock:
            if version in self._known:
                return self._known[version]
            failed = self._failed_at.get(version)
            if failed is not None and time.monotonic() - failed < TRAINING_RETRY_S:
                return {}
        try:
            logged = {str(k): float(v) for k, v in dict(self.versions.run_info(version).metrics).items()}
        except KeyError:  # a version of another registry: it will not appear later
            logged = {}
        except Exception:  # the registry is down: asked again later
            with self._lock:
                self._failed_at[version] = time.monotonic()
            return {}
        with self._lock:
            self._known[version] = logged
        return logged


_BY_REGISTRY: weakref.WeakKeyDictionary[object, _TrainingMetrics] = weakref.WeakKeyDictionary()
_BY_REGISTRY_LOCK = threading.Lock()


def _training_metrics(rt: Runtime) -> Any:
    """What ``drift_report`` asks of each version: its training metrics where the service's registry tells
    them (the registered estimators hold the registry as ``registry``), none for the heuristic."""
    holder = rt.estimator.registry
    versions = getattr(holder, "registry", None)
    if holder is None or not isinstance(versions, _Versions):
        return lambda version: {}
    with _BY_REGISTRY_LOCK:
        metrics = _BY_REGISTRY.get(holder)
        if metrics is None:
            metrics = _BY_REGISTRY[holder] = _TrainingMetrics(versions)
    return lambda version: {} if version == HEURISTIC else metrics(version)


@router.get("/queues/waiting", tags=["queue"])
async def get_waiting(rt: ReadRuntime) -> WaitingOut:
    """Why each pending job waits (over its queue's quota, no place for it now, a place reserved, never
    fits), from a scheduling pass on the current state with the service's settings; nothing is committed."""
    return await run_in_threadpool(_waiting, rt)


def _waiting(rt: Runtime) -> WaitingOut:
    snapshot, queued = rt.store.queued()
    plan = rt.planner.latest(snapshot, queued, worded=True)
    return WaitingOut.model_validate({
        "generation": plan.generation, "starting": [s.job_id for s in plan.starts],
        "waiting": [{"job_id": w.job_id, "queue": w.queue, "reason": w.reason, "details": list(w.details),
                     "reservation_at_s": w.reservation_at_s} for w in plan.waiting]})


class _Assets(StaticFiles):
    """The page's files, with headers that keep it to this service's own files and requests."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


async def _to_page() -> RedirectResponse:
    # the page's relative links (app.js, style.css) resolve under /ui/ only
    return RedirectResponse(f"{PATH}/", status_code=308)


_page = APIRouter(include_in_schema=False)
_page.add_api_route(PATH, _to_page, methods=["GET"])

routes: list[BaseRoute] = [*router.routes, *_page.routes,
                           Mount(PATH, app=_Assets(directory=STATIC, html=True), name="ui")]
"""The dashboard's endpoints, its address without the slash, and its files."""
