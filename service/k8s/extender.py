"""Kubernetes scheduler extender: ``POST /k8s/extender/filter``, ``/prioritize`` and ``/bind``.

kube-scheduler's wire format (Go field names, ``k8s.io/kube-scheduler/extender/v1``): filter and
prioritize receive ``{"Pod", "Nodes", "NodeNames"}``; filter answers ``{"Nodes", "NodeNames",
"FailedNodes", "FailedAndUnresolvableNodes", "Error"}``, prioritize ``[{"Host", "Score"}]`` with
scores 0..10, bind receives ``{"PodName", "PodNamespace", "PodUID", "Node"}`` and answers
``{"Error"}``. Always HTTP 200: business errors go in ``Error``.

Filter: can the node host the pod now (``placement.filter_nodes``: the filters every placement uses);
a node that could not host it even empty, or that gpuplace does not manage, is unresolvable
(preemption cannot help). Prioritize: the liquid policy's score bounded to 0..1 over the nodes asked
about that can host the pod (``placement.score_nodes``: packing, scarce GPU types kept), times 10. A
pod asking GPU memory of one GPU (``aliyun.com/gpu-mem``) is judged on each node as the share of that
node's GPUs it asks for, and scored among the nodes whose GPUs have the same memory.
Bind: reserves the pod's resources on the node in the state database (a placement through the
scheduling cycle, whose policy is the node kube-scheduler chose: ``placement.place_on``); for a pod
that shares a GPU, writes the chosen GPU into the pod's annotations (a JSON merge patch: the
annotations of Alibaba's gpushare device plugin, which reads them when the kubelet allocates the
pod's devices, and ``gpuplace.io/gpu-index``); then creates the Binding through the Kubernetes API
(``GPUPLACE_KUBE_API``). If the patch or the Binding fails, the reservation is released. Bind reads
the pod's demand from the pod the API server holds, never from what a caller said at filter time:
filter and prioritize are unauthenticated (kube-scheduler sends no key), so anyone may call them with
any pod.

Pods of a gang (label ``scheduling.x-k8s.io/pod-group``) are placed as one job and bound together
(``service.k8s.gang``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from placement import ClusterSnapshot, Job, Verdict, filter_nodes, score_nodes
from service.codec import allocation_to_json
from service.k8s import kube
from service.k8s.gang import INSTANCE_ANNOTATION, JOB_ANNOTATION, Gang, GangError, GangKey, Gangs, shown
from service.k8s.on_node import OnNode
from service.k8s.pod import PodDemand, PodError, gang_of, object_at, pod_demand, pod_uid
from service.k8s.wire import ExtenderBindingResult, ExtenderFilterResult, HostPriority
from service.openapi import operation_id
from service.problems import ANYWHERE, problems
from service.runtime import ReadRuntime, Runtime, WriteRuntime
from service.store import End, Place, Placed, Reason, Refused

router = APIRouter(prefix="/k8s/extender", tags=["kubernetes"], responses=problems(*ANYWHERE),
                   generate_unique_id_function=operation_id)

GPU_INDEX = "gpuplace.io/gpu-index"
"""Written on a pod that shares a GPU, before its Binding: the GPU's index on its node."""
GPUSHARE_INDEX, GPUSHARE_POD = "ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD"
GPUSHARE_ASSIGNED, GPUSHARE_ASSUMED = "ALIYUN_COM_GPU_MEM_ASSIGNED", "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
"""The annotations Alibaba's gpushare device plugin reads at Allocate: the GPU's index on the node, the
pod's GiB, not yet assigned, when the scheduler chose (ns)."""


async def _gangs(request: Request) -> Gangs:
    """The gangs of this process (made at start by the app, which adopts those the store holds)."""
    gangs: Gangs | None = getattr(request.app.state, "gangs", None)
    if gangs is None:
        gangs = request.app.state.gangs = Gangs(request.app.state.runtime)
    return gangs


GangsDep = Annotated[Gangs, Depends(_gangs)]


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


def _counted(rt: Runtime, verb: str, outcome: str) -> None:
    """One call of ``verb`` came to ``outcome`` (``gpuplace_extender_requests_total``)."""
    rt.metrics.extender.labels(verb, outcome).inc()


@dataclass(frozen=True)
class Judged:
    """Filter's verdict per node asked about."""

    passing: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


def _answer(args: dict[str, Any], judged: Judged) -> dict[str, Any]:
    """Filter's answer in the form it was asked: names, or the NodeList of the nodes that pass."""
    if args.get("NodeNames") is not None:
        nodes: Any = None
        node_names: Any = judged.passing
    else:
        keep = set(judged.passing)
        items = (args.get("Nodes") or {}).get("items") or []
        nodes = {**(args.get("Nodes") or {}),
                 "items": [n for n in items if (n.get("metadata") or {}).get("name") in keep]}
        node_names = None
    return {"Nodes": nodes, "NodeNames": node_names, "FailedNodes": judged.failed,
            "FailedAndUnresolvableNodes": judged.unresolvable, "Error": ""}


def _error(text: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": text}


def _none_pass(names: Sequence[str], why: str) -> Judged:
    """Every node unresolvable, for the same reason (a gang: no single node's preemption helps)."""
    return Judged([], {}, dict.fromkeys(names, why))


@router.post("/filter", response_model=ExtenderFilterResult)
async def extender_filter(args: dict[str, Any], rt: ReadRuntime, gangs: GangsDep) -> dict[str, Any]:
    """ok: some node passes; refused: none does; error: the pod or the nodes cannot be read (or, for a
    gang, the Kubernetes API cannot be)."""
    try:
        answer = await _filter(args, rt, gangs)
    except Exception:
        _counted(rt, "filter", "error")
        raise
    passing = answer["NodeNames"] if answer["Nodes"] is None else answer["Nodes"]["items"]
    _counted(rt, "filter", "error" if answer["Error"] else "ok" if passing else "refused")
    return answer


async def _filter(args: dict[str, Any], rt: Runtime, gangs: Gangs) -> dict[str, Any]:
    names = _node_names(args)
    try:
        pod = object_at(args.get("Pod"), "Pod")
        demand = pod_demand(pod)
        key = gang_of(pod)
    except (PodError, ValueError) as exc:
        return _error(str(exc))
    if key is not None:
        judged = await _gang_filter(rt, gangs, key, pod, demand, names)
        if isinstance(judged, str):
            return _error(judged)
        if judged is not None:
            return _answer(args, judged)
    return _answer(args, await run_in_threadpool(_judge, rt, demand, names))


def _by_memory(snapshot: ClusterSnapshot, demand: PodDemand,
               names: Sequence[str]) -> tuple[dict[float | None, list[tuple[str, int]]], dict[str, str]]:
    """The nodes asked about that gpuplace knows, grouped by the GPU memory the pod's share is worked out
    on (one group, ``None``, unless it asks GPU memory of one GPU); and why the others are not judged."""
    index, machines = snapshot.cluster.index, snapshot.cluster.machines
    groups: dict[float | None, list[tuple[str, int]]] = {}
    unknown: dict[str, str] = {}
    for name in names:
        machine = index.get(name)
        if machine is None:
            unknown[name] = f"node {name} is not a machine of gpuplace's cluster {snapshot.cluster.name}"
            continue
        memory = machines[machine].gpu_mem_gib if demand.per_node else None
        problem = demand.misfit(memory) if memory is not None else None
        if problem is not None:
            unknown[name] = problem
        else:
            groups.setdefault(memory, []).append((name, machine))
    return groups, unknown


def _job_on(demand: PodDemand, memory: float | None) -> Job:
    return demand.job(math.nan if memory is None else memory)


def _judge(rt: Runtime, demand: PodDemand, names: Sequence[str]) -> Judged:
    """Filter's verdict for a pod of its own on each node asked about."""
    snapshot = rt.store.snapshot()
    groups, unresolvable = _by_memory(snapshot, demand, names)
    ok: set[str] = set()
    failed: dict[str, str] = {}
    for memory, nodes in groups.items():
        checked = filter_nodes(snapshot, _job_on(demand, memory))
        for name, machine in nodes:
            if checked.ok[machine]:
                ok.add(name)
            elif not checked.ok_when_empty[machine]:
                unresolvable[name] = f"{checked.reason_when_empty(machine)} (even with nothing running)"
            else:
                failed[name] = checked.reason(machine)
    return Judged([n for n in names if n in ok], failed, unresolvable)


async def _gang_filter(rt: Runtime, gangs: Gangs, key: GangKey, pod: dict[str, Any], demand: PodDemand,
                       names: Sequence[str]) -> Judged | str | None:
    """Filter's verdict for a member of a gang (placing the gang if it holds no reservation): the node of
    the instance set aside for it; a string if it cannot be judged; ``None`` for a member beyond the
    gang's size (judged as a pod of its own)."""
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    namespace, name, uid = str(meta.get("namespace") or "default"), str(meta.get("name") or ""), pod_uid(pod)
    gang = gangs.live(key)
    if gang is None:
        placed = await _place_gang(rt, gangs, key, namespace, name, uid)
        if isinstance(placed, _NoGang):
            return placed.reason if placed.error else _none_pass(names, placed.reason)
        gang = placed
    try:
        await gangs.sync(gang)
        if uid not in gang.members:  # filter takes no key: a pod is a member if the API server says so
            held = await run_in_threadpool(kube.read_pod, rt.settings, namespace, name, uid)
            if gang_of(held) != key:
                return f"the API server's pod {namespace}/{name} is not a member of gang {gang.name}"
            gang.members.add(uid)
    except (httpx.HTTPError, PodError) as exc:
        return f"reading gang {gang.name}'s members from the Kubernetes API failed: {exc}"
    problem = gang.takes(demand)
    if problem is not None:
        return _none_pass(names, problem)
    instance = gangs.assign(gang, uid, names)
    if instance is None:
        free = [gang.node(i) for i in gang.free()]
        if not free and gang.mine(uid) is None:
            return None
        return _none_pass(names, f"gang {gang.name}'s instance for this pod is on a node not asked about; its "
                                 f"free instances are on {shown(free) or 'none'}")
    node = gang.node(instance)
    why = f"gang {gang.name} ({gang.job.job_id}) holds this pod's instance on node {node}"
    return Judged([n for n in names if n == node], {}, {n: why for n in names if n != node})


@dataclass(frozen=True)
class _NoGang:
    """Why a gang holds no reservation: it does not fit (``error`` false), or it could not be asked for."""

    reason: str
    error: bool


async def _place_gang(rt: Runtime, gangs: Gangs, key: GangKey, namespace: str, name: str,
                      uid: str) -> Gang | _NoGang:
    """The gang's reservation, placed for the pod ``namespace/name`` as the API server holds it."""
    if rt.metrics.multiprocess:
        return _NoGang("gangs are bound together in one process: run the extender with --workers 1", True)
    if not rt.settings.kube_api:
        return _NoGang("gangs need the Kubernetes API: set GPUPLACE_KUBE_API (and its token file)", True)
    try:
        pod = await run_in_threadpool(kube.read_pod, rt.settings, namespace, name, uid)
        demand = pod_demand(pod)
        size, wait_s, memory = await gangs.form(key, pod, demand)
    except (httpx.HTTPError, PodError) as exc:
        return _NoGang(f"reading pod {namespace}/{name} or its PodGroup from the Kubernetes API failed: {exc}", True)
    except GangError as exc:
        return _NoGang(str(exc), False)
    if gang_of(pod) != key:
        return _NoGang(f"the API server's pod {namespace}/{name} is not a member of gang {key[0]}/{key[1]}", True)
    placed = await gangs.place(key, demand, size, wait_s, memory)
    if isinstance(placed, Refused):
        decision = placed.decision
        never = decision is not None and decision.verdict is Verdict.CAN_NEVER_FIT
        reasons = "; ".join(decision.reasons) if decision is not None and decision.reasons else placed.detail
        return _NoGang(f"gang {key[0]}/{key[1]} ({size} pods) cannot be placed whole "
                       f"{'on this cluster' if never else 'now'}: {reasons}", False)
    placed.members.add(uid)
    return placed


@router.post("/prioritize", response_model=list[HostPriority])
async def extender_prioritize(args: dict[str, Any], rt: ReadRuntime, gangs: GangsDep) -> list[dict[str, Any]]:
    """ok: scored; error: the pod or the nodes cannot be read (every node scores 0)."""
    try:
        names = _node_names(args)
    except HTTPException:
        _counted(rt, "prioritize", "error")
        raise
    try:
        pod = object_at(args.get("Pod"), "Pod")
        demand = pod_demand(pod)
        key = gang_of(pod)
    except (PodError, ValueError):
        _counted(rt, "prioritize", "error")
        return [{"Host": n, "Score": 0} for n in names]
    gang = gangs.live(key) if key is not None else None
    instance = gang.mine(pod_uid(pod)) if gang is not None else None
    if gang is not None and instance is not None:  # a member filtered: the node of its instance
        _counted(rt, "prioritize", "ok")
        return [{"Host": name, "Score": 10 if name == gang.node(instance) else 0} for name in names]
    try:
        scores = await run_in_threadpool(_scores, rt, demand, names)
    except Exception:
        _counted(rt, "prioritize", "error")
        raise
    _counted(rt, "prioritize", "ok")
    return [{"Host": name, "Score": round(10 * scores[name]) if name in scores else 0} for name in names]


def _scores(rt: Runtime, demand: PodDemand, names: Sequence[str]) -> dict[str, float]:
    """The liquid policy's bounded score of each node gpuplace knows (among those of the same GPU memory
    for a pod asking GPU memory of one GPU)."""
    snapshot = rt.store.snapshot()
    groups, _ = _by_memory(snapshot, demand, names)
    scores: dict[str, float] = {}
    for memory, nodes in groups.items():
        known = [machine for _, machine in nodes]
        values = score_nodes(snapshot, _job_on(demand, memory), "liquid", machines=known).tolist()
        scores.update(zip([name for name, _ in nodes], values, strict=True))
    return scores


@router.post("/bind", response_model=ExtenderBindingResult)
async def extender_bind(args: dict[str, Any], rt: WriteRuntime, gangs: GangsDep) -> dict[str, str]:
    """ok: reserved and bound; refused: the reservation does not fit the node (or the pod is bound
    already, or the node is not its gang's); error: the pod cannot be read or the Kubernetes API fails."""
    try:
        outcome, answer = await _bind(args, rt, gangs)
    except Exception:
        _counted(rt, "bind", "error")
        raise
    _counted(rt, "bind", outcome)
    return answer


@dataclass(frozen=True)
class _Target:
    """The pod a bind is about, as the API server holds it, and the node kube-scheduler chose."""

    namespace: str
    name: str
    uid: str
    node: str
    demand: PodDemand


async def _bind(args: dict[str, Any], rt: Runtime, gangs: Gangs) -> tuple[str, dict[str, str]]:
    uid, node = str(args.get("PodUID", "")), str(args.get("Node", ""))
    name, namespace = str(args.get("PodName", "")), str(args.get("PodNamespace", "default"))
    if not rt.settings.kube_api:
        return "error", {"Error": "binding needs the Kubernetes API: set GPUPLACE_KUBE_API (and its token file)"}
    try:
        pod = await run_in_threadpool(kube.read_pod, rt.settings, namespace, name, uid)
        target = _Target(namespace, name, uid, node, pod_demand(pod))
        key = gang_of(pod)
    except (httpx.HTTPError, PodError) as exc:
        return "error", {"Error": f"reading pod {namespace}/{name} from the Kubernetes API failed: {exc}"}
    if key is not None:
        answered = await _bind_member(rt, gangs, key, target)
        if answered is not None:
            return answered
    return await _bind_alone(rt, target)


async def _bind_alone(rt: Runtime, target: _Target) -> tuple[str, dict[str, str]]:
    """Bind a pod of its own: reserve it on the node, write its GPU share's annotations, bind it."""
    demand, node = target.demand, target.node
    memory = None
    if demand.per_node:
        cluster = rt.store.cached().cluster
        machine = cluster.index.get(node)
        if machine is None:
            return "refused", {"Error": f"node {node} is not a machine of gpuplace's cluster"}
        memory = cluster.machines[machine].gpu_mem_gib
        problem = demand.misfit(memory)
        if problem is not None:
            return "refused", {"Error": f"pod does not fit node {node}: {problem}"}
    job = _job_on(demand, memory)
    match await rt.cycle.run(Place(job, OnNode(node), {"node": node})):
        case Placed(decision=decision, cluster=cluster) if decision.allocation is not None:
            instance = allocation_to_json(cluster, decision.allocation)["instances"][0]
        case Refused(reason=Reason.EXISTS):
            return "refused", {"Error": f"pod {job.job_id} is already bound"}
        case Refused(detail=detail):
            return "refused", {"Error": detail}
        case other:
            raise AssertionError(f"a bind came to {other!r}")
    failure = await _finish(rt, target, instance, {})
    if failure is not None:
        await rt.cycle.run(End(job.job_id))
        return "error", {"Error": failure}
    return "ok", {"Error": ""}


async def _bind_member(rt: Runtime, gangs: Gangs, key: GangKey,
                       target: _Target) -> tuple[str, dict[str, str]] | None:
    """Bind a member of a gang: take its instance on the node, wait for the rest of the gang, then write
    its annotations and bind it. ``None`` for a member beyond the gang's size (bound as a pod of its own)."""
    who = f"pod {target.namespace}/{target.name}"
    gang = gangs.live(key)
    if gang is None:
        placed = await _place_gang(rt, gangs, key, target.namespace, target.name, target.uid)
        if isinstance(placed, _NoGang):
            return ("error" if placed.error else "refused"), {"Error": placed.reason}
        gang = placed
    try:
        await gangs.sync(gang)
    except (httpx.HTTPError, PodError) as exc:
        return "error", {"Error": f"reading the members of gang {gang.name} from the Kubernetes API failed: {exc}"}
    problem = gang.takes(target.demand)
    if problem is not None:
        return "refused", {"Error": f"{who}: {problem}"}
    if target.uid in gang.bound.values():
        return "refused", {"Error": f"{who} is already bound (gang {gang.name})"}
    if not gang.free() and gang.mine(target.uid) is None:
        return None
    instance = gangs.claim(gang, target.uid, target.node)
    if isinstance(instance, str):
        return "refused", {"Error": f"{who} of gang {gang.name} cannot be bound to node {target.node}: {instance}"}
    why = await gangs.held(gang, instance)
    if why:
        return "refused", {"Error": f"{who} not bound: {why}"}
    if gang.job.job_id not in rt.store.cached().allocations:
        gangs.unclaim(gang, instance)
        return "error", {"Error": f"{who} not bound: gang {gang.name}'s reservation {gang.job.job_id} was released"}
    failure = await _finish(rt, target, gang.instances[instance],
                            {JOB_ANNOTATION: gang.job.job_id, INSTANCE_ANNOTATION: str(instance)})
    if failure is not None:
        gangs.unclaim(gang, instance)
        return "error", {"Error": failure}
    gangs.bound(gang, instance, target.uid)
    return "ok", {"Error": ""}


def share_annotations(demand: PodDemand, instance: dict[str, Any]) -> dict[str, str]:
    """What a pod sharing a GPU is told of it: the GPU's index on the node and the GiB it holds there
    (gpushare's annotations, and gpuplace's own)."""
    gpus = [int(g) for g in instance["gpus"]]
    gib = demand.shared_gib or math.ceil(int(instance["gpu_mem_mib"]) / 1024)
    return {GPUSHARE_INDEX: str(gpus[0]), GPUSHARE_POD: str(int(gib)), GPUSHARE_ASSIGNED: "false",
            GPUSHARE_ASSUMED: str(time.time_ns()), GPU_INDEX: ",".join(map(str, gpus))}


async def _finish(rt: Runtime, target: _Target, instance: dict[str, Any], notes: dict[str, str]) -> str | None:
    """Write the pod's annotations (``notes``, and its GPU share's), then create its Binding; why not, if
    either fails."""
    where = f"{target.namespace}/{target.name}"
    annotations = {**notes, **(share_annotations(target.demand, instance) if target.demand.shares_gpu else {})}
    if annotations:
        try:
            await run_in_threadpool(kube.annotate, rt.settings, target.namespace, target.name, target.uid,
                                    annotations)
        except httpx.HTTPError as exc:
            return f"writing the annotations of {where} (its GPU on {target.node}) failed: {exc}"
    try:
        await run_in_threadpool(kube.bind, rt.settings, target.namespace, target.name, target.uid, target.node)
    except httpx.HTTPError as exc:
        return f"creating the Binding of {where} on {target.node} failed: {exc}"
    return None


