"""Kubernetes scheduler extender: ``POST /k8s/extender/filter``, ``/prioritize`` and ``/bind``.

kube-scheduler's wire format (Go field names, ``k8s.io/kube-scheduler/extender/v1``): filter and
prioritize receive ``{"Pod", "Nodes", "NodeNames"}``; filter answers ``{"Nodes", "NodeNames",
"FailedNodes", "FailedAndUnresolvableNodes", "Error"}``, prioritize ``[{"Host", "Score"}]`` with
scores 0..10, bind receives ``{"PodName", "PodNamespace", "PodUID", "Node"}`` and answers
``{"Error"}``. Always HTTP 200: business errors go in ``Error``.

Filter: can the node host the pod now (``placement.filter_nodes``: the filters every placement uses);
a node that could not host it even empty, or that gpuplace does not manage, is unresolvable
(preemption cannot help). Prioritize: the liquid policy's score bounded to 0..1 over the nodes asked
about that can host the pod (``placement.score_nodes``: packing, scarce GPU types kept), times 10.
Bind: reserves the pod's resources on the node in the state database (a placement through the
scheduling cycle, whose policy is the node kube-scheduler chose: ``placement.place_on``), then creates
the Binding through the Kubernetes API (``GPUPLACE_KUBE_API``); if that fails the reservation is
released. Bind reads the pod's demand from the pod the API server holds, never from what a caller said
at filter time: filter and prioritize are unauthenticated (kube-scheduler sends no key), so anyone may
call them with any pod.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool

from placement import ClusterSnapshot, Decision, Job, Verdict, filter_nodes, place_on, score_nodes
from service.k8s.pod import PodError, job_of_pod, object_at
from service.k8s.wire import ExtenderBindingResult, ExtenderFilterResult, HostPriority
from service.openapi import operation_id
from service.problems import ANYWHERE, problems
from service.runtime import ReadRuntime, Runtime, WriteRuntime
from service.store import End, Place, Placed, Reason, Refused

router = APIRouter(prefix="/k8s/extender", tags=["kubernetes"], responses=problems(*ANYWHERE),
                   generate_unique_id_function=operation_id)


def _node_names(args: dict[str, Any]) -> list[str]:
    """The nodes asked about: ``NodeNames``, else the names of ``Nodes.items``; :class:`HTTPException`
    422 naming the field if neither can be read."""
    try:
        names = args.get("NodeNames")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise PodError(f"NodeNames: expected a list of node names, got {str(names)[:80]!r}")
            return names
        items = object_at(args.get("Nodes"), "Nodes").get("items")
        nodes = [object_at(n, f"Nodes.items[{i}]") for i, n in enumerate(items if isinstance(items, list) else [])]
        return [str(object_at(n.get("metadata"), "Nodes.items[].metadata").get("name", "")) for n in nodes]
    except PodError as exc:
        raise HTTPException(422, str(exc)) from exc


def _job_of(value: Any) -> Job:
    return job_of_pod(object_at(value, "Pod"))


def _counted(rt: Runtime, verb: str, outcome: str) -> None:
    """One call of ``verb`` came to ``outcome`` (``gpuplace_extender_requests_total``)."""
    rt.metrics.extender.labels(verb, outcome).inc()


@router.post("/filter", response_model=ExtenderFilterResult)
def extender_filter(args: dict[str, Any], rt: ReadRuntime) -> dict[str, Any]:
    """ok: some node passes; refused: none does; error: the pod or the nodes cannot be read."""
    try:
        answer, passing = _filter(args, rt)
    except Exception:
        _counted(rt, "filter", "error")
        raise
    _counted(rt, "filter", "error" if answer["Error"] else "ok" if passing else "refused")
    return answer


def _filter(args: dict[str, Any], rt: Runtime) -> tuple[dict[str, Any], bool]:
    """The filter's answer, and whether some node passes."""
    names = _node_names(args)
    try:
        job = _job_of(args.get("Pod"))
    except (PodError, ValueError) as exc:
        return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                "Error": str(exc)}, False
    snapshot = rt.store.snapshot()
    checked = filter_nodes(snapshot, job)
    index = snapshot.cluster.index
    passing, failed, unresolvable = [], {}, {}
    for name in names:
        machine = index.get(name)
        if machine is None:
            unresolvable[name] = f"node {name} is not a machine of gpuplace's cluster {snapshot.cluster.name}"
        elif checked.ok[machine]:
            passing.append(name)
        elif not checked.ok_when_empty[machine]:
            unresolvable[name] = f"{checked.reason_when_empty(machine)} (even with nothing running)"
        else:
            failed[name] = checked.reason(machine)
    if args.get("NodeNames") is not None:
        nodes: Any = None
        node_names: Any = passing
    else:
        keep = set(passing)
        items = (args.get("Nodes") or {}).get("items") or []
        nodes = {**(args.get("Nodes") or {}),
                 "items": [n for n in items if (n.get("metadata") or {}).get("name") in keep]}
        node_names = None
    return {"Nodes": nodes, "NodeNames": node_names, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": ""}, bool(passing)


@router.post("/prioritize", response_model=list[HostPriority])
def extender_prioritize(args: dict[str, Any], rt: ReadRuntime) -> list[dict[str, Any]]:
    """ok: scored; error: the pod or the nodes cannot be read (every node scores 0)."""
    try:
        names = _node_names(args)
    except HTTPException:
        _counted(rt, "prioritize", "error")
        raise
    try:
        job = _job_of(args.get("Pod"))
    except (PodError, ValueError):
        _counted(rt, "prioritize", "error")
        return [{"Host": n, "Score": 0} for n in names]
    try:
        snapshot = rt.store.snapshot()
        index = snapshot.cluster.index
        known = [index[n] for n in names if n in index]
        scores = dict(zip(known, score_nodes(snapshot, job, "liquid", machines=known).tolist(), strict=True))
    except Exception:
        _counted(rt, "prioritize", "error")
        raise
    _counted(rt, "prioritize", "ok")
    return [{"Host": name, "Score": round(10 * scores[index[name]]) if name in index else 0} for name in names]


@router.post("/bind", response_model=ExtenderBindingResult)
async def extender_bind(args: dict[str, Any], rt: WriteRuntime) -> dict[str, str]:
    """ok: reserved and bound; refused: the reservation does not fit the node (or the pod is bound
    already); error: the pod cannot be read or the Kubernetes API fails."""
    try:
        outcome, answer = await _bind(args, rt)
    except Exception:
        _counted(rt, "bind", "error")
        raise
    _counted(rt, "bind", outcome)
    return answer


async def _bind(args: dict[str, Any], rt: Runtime) -> tuple[str, dict[str, str]]:
    uid, node = str(args.get("PodUID", "")), str(args.get("Node", ""))
    name, namespace = str(args.get("PodName", "")), str(args.get("PodNamespace", "default"))
    if not rt.settings.kube_api:
        return "error", {"Error": "binding needs the Kubernetes API: set GPUPLACE_KUBE_API (and its token file)"}
    try:
        job = job_of_pod(await run_in_threadpool(_held_pod, rt, namespace, name, uid))
    except (httpx.HTTPError, PodError) as exc:
        return "error", {"Error": f"reading pod {namespace}/{name} from the Kubernetes API failed: {exc}"}
    match await rt.cycle.run(Place(job, OnNode(node), {"node": node})):
        case Placed():
            pass
        case Refused(reason=Reason.EXISTS):
            return "refused", {"Error": f"pod {job.job_id} is already bound"}
        case Refused(detail=detail):
            return "refused", {"Error": detail}
        case other:
            raise AssertionError(f"a bind came to {other!r}")
    try:
        await run_in_threadpool(_post_binding, rt, namespace, name, uid, node)
    except httpx.HTTPError as exc:
        await rt.cycle.run(End(job.job_id))
        return "error", {"Error": f"creating the Binding of {namespace}/{name} on {node} failed: {exc}"}
    return "ok", {"Error": ""}


@dataclass(frozen=True)
class OnNode:
    """The policy of a bind: the pod on ``node``, as kube-scheduler chose, if it fits there now."""

    node: str

    def __call__(self, snapshot: ClusterSnapshot, job: Job) -> Decision:
        machine = snapshot.cluster.index.get(self.node)
        if machine is None:
            return Decision(job.job_id, "k8s-bind", Verdict.CAN_NEVER_FIT, snapshot.generation,
                            reasons=(f"node {self.node} is not a machine of gpuplace's cluster",))
        decision = place_on(snapshot, job, machine, "k8s-bind")
        if not decision.placed:
            return replace(decision, reasons=(f"pod does not fit node {self.node}: {decision.reasons[0]}",))
        return decision


def _kube_api(rt: Runtime) -> httpx.Client:
    settings = rt.settings
    token_file = Path(settings.kube_token_file)
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.is_file() else {}
    verify: Any = settings.kube_ca_file if Path(settings.kube_ca_file).is_file() else True
    return httpx.Client(base_url=settings.kube_api.rstrip("/"), headers=headers, verify=verify, timeout=10)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def _held_pod(rt: Runtime, namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The pod as the API server holds it; :class:`PodError` if it is another pod of the same name (a
    pod deleted and created again since kube-scheduler asked)."""
    with _kube_api(rt) as api:
        reply = api.get(_pod_path(namespace, name))
        reply.raise_for_status()
    pod = object_at(reply.json(), "Pod")
    held = object_at(pod.get("metadata"), "Pod.metadata").get("uid")
    if held != uid:
        raise PodError(f"the API server's pod {namespace}/{name} has uid {held!r}, not {uid!r}")
    return pod


def _post_binding(rt: Runtime, namespace: str, name: str, uid: str, node: str) -> None:
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    with _kube_api(rt) as api:
        api.post(f"{_pod_path(namespace, name)}/binding", json=body).raise_for_status()
