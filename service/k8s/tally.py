"""What following the Kubernetes cluster does to the state: the nodes and pods seen, and the ops, all
through the scheduling cycle, that keep the state database in line with them.

* **Nodes.** The readable nodes make the cluster (``service.k8s.nodes``). When the machines, their
  capacity, racks or zones change, the new cluster is loaded in one write: first every pod's
  reservation on a node that is gone is released, then the cluster is replaced with ``force``, which
  evicts any other running job it no longer holds (a job placed through ``/v1/place`` on a removed
  node, or a pod a node that shrank can no longer hold; evicted jobs are logged). With no readable node
  at all, the cluster is left as it is.
* **Pods.** A pod that succeeded, failed or was deleted (default-scheduler preemption deletes its
  victims) has its reservation released (``End``, a no-op for a pod that held none). A pod bound to a
  node (``spec.nodeName`` set, not ended) that holds no reservation and asks for something is counted:
  its effective request placed on its node (``place_on``; a share asked as ``aliyun.com/gpu-mem``
  worked out on the node's GPUs; GPU type annotations ignored: the pod is where it is). One that cannot
  be counted yet (its node is not known, or is full in gpuplace's books) waits, and is tried again
  after each change of the cluster. A pod's job id is ``pod-<uid>``, as the extender's.
* **Gangs.** A member of a gang bound through the extender carries its gang's job id (annotation
  ``gpuplace.io/job``) and is counted by that job; once its last live member has ended, the gang's
  reservation is released. A bound member whose gang holds no reservation (released meanwhile) is
  counted as a pod of its own.
* **Objects that cannot be read** are logged (once per object and problem) and skipped: a node keeps
  its last readable state; a pod whose resources cannot be read is still released when it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.k8s.gang import JOB_ANNOTATION
from service.k8s.nodes import NodeError, NodeSpec, cluster_of, node_name, node_spec
from service.k8s.on_node import OnNode
from service.k8s.pod import PodDemand, PodError, object_at, pod_demand
from service.runtime import Runtime
from service.store import End, Ended, Place, Placed, Reason, Refused, Replace, Replaced

log = logging.getLogger(__name__)
JOB_PREFIX = "pod-"
ENDED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodView:
    """What gpuplace takes of a pod."""

    uid: str
    own: str
    """Its job id as a pod of its own: ``pod-<uid>``."""
    held: str | None
    """The job that counts it, if another (a gang's: the ``gpuplace.io/job`` annotation)."""
    name: str
    """``namespace/name``."""
    node: str
    """``spec.nodeName``; empty while unbound."""
    ended: bool
    """It succeeded or failed."""
    demand: PodDemand | None
    """What it asks for (GPU types left out); ``None`` if its resources cannot be read (``problem``)."""
    scheduler: str
    problem: str = ""

    def counted(self, held: Mapping[str, object]) -> bool:
        return self.own in held or (self.held is not None and self.held in held)


def pod_view(pod: Any) -> PodView:
    """``pod`` as gpuplace sees it; :class:`PodError` if it has no UID (nothing can be done with it)."""
    pod = object_at(pod, "Pod")
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise PodError(f"Pod.metadata.uid: expected a UID, got {str(uid)[:80]!r}")
    job = object_at(meta.get("annotations"), "Pod.metadata.annotations").get(JOB_ANNOTATION)
    spec = object_at(pod.get("spec"), "Pod.spec")
    phase = object_at(pod.get("status"), "Pod.status").get("phase")
    node = spec.get("nodeName") or ""
    demand, problem = None, ""
    try:
        demand = dataclasses.replace(pod_demand(pod), gpu_types=frozenset())
    except (PodError, ValueError) as exc:
        problem = str(exc)
    own = f"{JOB_PREFIX}{uid}"
    return PodView(uid, own, job if isinstance(job, str) and job and job != own else None,
                   f"{meta.get('namespace')}/{meta.get('name')}", node if isinstance(node, str) else "",
                   phase in ENDED_PHASES, demand, str(spec.get("schedulerName") or ""), problem)


class Tally:
    """The nodes and pods seen, and what they came to in the state (see module docstring)."""

    def __init__(self, rt: Runtime, gpu_type_label: str) -> None:
        self.rt, self.gpu_type_label = rt, gpu_type_label
        self.nodes: dict[str, NodeSpec] = {}
        self.pods: dict[str, PodView] = {}
        """Pods not ended, by UID."""
        self.waiting: dict[str, PodView] = {}
        """Bound pods not counted yet, by UID."""
        self._problems: dict[str, str] = {}

    def _skip(self, key: str, problem: str) -> None:
        """Log ``problem`` with ``key``'s object, unless it was the last one logged for it."""
        if self._problems.get(key) != problem:
            self._problems[key] = problem
            log.warning("Kubernetes object skipped: %s", problem)

    # nodes

    def node_seen(self, kind: str, node: Any) -> bool:
        """A node listed, added, modified or deleted; whether the cluster changed."""
        try:
            name = node_name(node)
        except NodeError as exc:
            self._skip(repr(node)[:200], str(exc))
            return False
        if kind == "DELETED":
            self._problems.pop(f"node/{name}", None)
            return self.nodes.pop(name, None) is not None
        try:
            spec = node_spec(node, self.gpu_type_label)
        except NodeError as exc:
            self._skip(f"node/{name}", str(exc))
            return False
        self._problems.pop(f"node/{name}", None)
        if self.nodes.get(name) == spec:
            return False
        self.nodes[name] = spec
        return True

    def nodes_listed(self, nodes: Iterable[Any]) -> None:
        """The nodes as listed: those not listed are gone; one listed that cannot be read now keeps its
        last readable state."""
        before, self.nodes = self.nodes, {}
        for node in nodes:
            if not self.node_seen("ADDED", node):
                with contextlib.suppress(NodeError):
                    name = node_name(node)
                    if name not in self.nodes and name in before:
                        self.nodes[name] = before[name]

    async def sync_cluster(self) -> None:
        """Load the cluster of the nodes seen, if it is not the one the state holds."""
        if not self.nodes:
            self._skip("nodes", "no readable node: the cluster is left as it is")
            return
        self._problems.pop("nodes", None)
        cluster = cluster_of(self.nodes.values())
        snapshot = self.rt.store.cached()
        if snapshot.cluster != cluster:
            gone = set(snapshot.cluster.index) - set(cluster.index)
            machines, pods = snapshot.cluster.machines, self._jobs()
            ends = [End(job_id) for job_id, allocation in snapshot.allocations.items()
                    if (job_id.startswith(JOB_PREFIX) or job_id in pods)
                    and any(machines[p.machine].name in gone for p in allocation.instances)]
            results = await self.rt.cycle.run_all([*ends, Replace(cluster, force=True)])
            released = [r.job_id for r in results if isinstance(r, Ended)]
            match results[-1]:
                case Replaced(evicted=evicted, generation=generation):
                    log.info("cluster of %d node(s) loaded at generation %d; released %s", len(cluster),
                             generation, released)
                    if evicted:
                        log.warning("the new nodes do not hold %d running job(s), evicted: %s", len(evicted),
                                    list(evicted)[:20])
                case other:
                    raise AssertionError(f"loading the nodes came to {other!r}")
            held = self.rt.store.cached().allocations  # a gang released with a node: its other members
            self.waiting = {v.uid: v for v in self.pods.values() if v.node and not v.counted(held)}
        await self.count_waiting()

    def _jobs(self) -> set[str]:
        """The jobs that count the live pods."""
        return {v.own for v in self.pods.values()} | {v.held for v in self.pods.values() if v.held}

    # pods

    def _view(self, pod: Any) -> PodView | None:
        try:
            return pod_view(pod)
        except PodError as exc:
            self._skip(repr(pod)[:200], str(exc))
            return None

    async def pods_listed(self, pods: Iterable[Any], held_before: set[str]) -> None:
        """The pods as listed; ``held_before``: the jobs running in the state before the list was asked
        for. A pod's job whose pod is gone or ended is released, and a gang's whose listed members have
        all ended (one running since then may belong to a pod the list predates: left alone); bound pods
        not counted are counted."""
        views = [v for v in map(self._view, pods) if v is not None]
        self.pods = {v.uid: v for v in views if not v.ended}
        ended_gangs = {v.held for v in views if v.ended and v.held}
        ends = [End(job_id) for job_id in sorted(held_before - self._jobs())
                if job_id.startswith(JOB_PREFIX) or job_id in ended_gangs]
        if ends:
            results = await self.rt.cycle.run_all(ends)
            log.info("released %s: their pods are gone or ended",
                     [r.job_id for r in results if isinstance(r, Ended)])
        self.waiting = {v.uid: v for v in self.pods.values() if v.node}
        await self.count_waiting()

    async def pod_seen(self, kind: str, pod: Any) -> None:
        """A pod added, modified or deleted."""
        view = self._view(pod)
        if view is None:
            return
        if kind == "DELETED" or view.ended:
            self.pods.pop(view.uid, None)
            self.waiting.pop(view.uid, None)
            self._problems.pop(f"pod/{view.uid}", None)
            last = view.held is not None and view.held not in self._jobs()  # its gang's last live member
            ops = [End(view.own), *([End(view.held)] if last and view.held else [])]
            for result in await self.rt.cycle.run_all(ops):
                if isinstance(result, Ended):
                    log.info("released %s: pod %s %s", result.job_id, view.name,
                             "deleted" if kind == "DELETED" else "ended")
            return
        self.pods[view.uid] = view
        if view.node and not view.counted(self.rt.store.cached().allocations):
            self.waiting[view.uid] = view
            await self.count_waiting()

    async def count_waiting(self) -> None:
        """Count the bound pods that hold no reservation, where they are bound."""
        held = self.rt.store.cached().allocations
        todo, places = [], []
        for uid, view in list(self.waiting.items()):
            if view.counted(held):
                del self.waiting[uid]
                continue
            demand = view.demand
            if demand is not None and not (demand.gpus or demand.shares_gpu or demand.cpu_cores or demand.mem_gib):
                del self.waiting[uid]  # asks for nothing: nothing to count
                continue
            try:
                if view.demand is None:
                    raise PodError(view.problem)
                spec = self.nodes.get(view.node)
                job = view.demand.job(spec.machine.gpu_mem_gib if spec else math.nan)
            except PodError as exc:
                self._skip(f"pod/{uid}", f"pod {view.name} bound to {view.node} cannot be counted: {exc}")
                continue
            todo.append(view)
            places.append(Place(job, OnNode(view.node, "k8s-bound"), {"node": view.node, "pod": view.name,
                                                        "scheduler": view.scheduler}))
        if not todo:
            return
        for view, result in zip(todo, await self.rt.cycle.run_all(places), strict=True):
            match result:
                case Placed():
                    self.waiting.pop(view.uid, None)
                    log.info("counted %s: pod %s bound to %s by %s", view.own, view.name, view.node,
                             view.scheduler or "another scheduler")
                case Refused(reason=Reason.EXISTS):  # counted meanwhile, or ended before (ids are never reused)
                    self.waiting.pop(view.uid, None)
                case Refused(detail=detail):
                    self._skip(f"pod/{view.uid}", f"pod {view.name} bound to {view.node} not counted yet: {detail}")
                case other:
                    raise AssertionError(f"counting a pod came to {other!r}")
