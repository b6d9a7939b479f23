"""Gangs: the pods of a coscheduling pod group placed as one job, all or nothing, and bound together.

A pod labelled ``scheduling.x-k8s.io/pod-group: <group>`` is a member of the gang ``<namespace>/<group>``
of ``minMember`` pods: the annotation ``gpuplace.io/gang-size`` if the pod has it, else the PodGroup's
``spec.minMember`` (``scheduling.x-k8s.io/v1alpha1``, read from the API server).

* **Placed whole, once.** When a member is filtered (or bound) and the gang holds no reservation, the
  extender reads that pod from the API server (filter takes no key: nothing a caller says is reserved)
  and places the gang as ONE job through the scheduling cycle: one task of ``minMember`` instances, each
  what the pod asks for, with the service's policy (liquid: network-aware), every instance or none. Its
  job id is ``gang:<namespace>:<group>:<nonce>`` (ids are never reused: a gang placed again gets a new
  one); its details name the gang. If it does not fit, nothing is reserved.
* **One instance per member.** Filtering a member sets one of the free instances aside for it (the first
  whose node kube-scheduler passed) and passes that node only: the next member's filter, which
  kube-scheduler may ask before this member's bind arrives, cannot be offered the same instance. A pod
  is taken for a member once the API server says so (its UID and label), as filter takes no key.
* **Bound together.** A member's bind takes its instance on the node kube-scheduler chose (or a free one
  there; a node without one is refused, naming the nodes that have one), then is held: no member's
  Binding is created until every instance is taken. Then each held bind writes its pod's annotations
  (``gpuplace.io/job``, ``gpuplace.io/gang-instance``, a share's GPU) and creates its Binding.
* **Timeout.** A gang whose members have not all arrived ``wait_s`` after it was placed (the PodGroup's
  ``spec.scheduleTimeoutSeconds``, at most ``GPUPLACE_GANG_WAIT_S``) releases its reservation and answers
  its held binds with an Error: nobody is bound, and the next member filtered places the gang anew. If
  members are bound already (a Binding that failed after the others succeeded, or a restart between two
  Bindings), the reservation stays for them and only the held binds are answered.

**State.** The reservation is a running job of the store: durable like every placement. Which member took
which instance lives in this process while binds are held, and in the API server once a member is
bound (its ``spec.nodeName`` and annotations). The binds meet in one process: a gang asked of a server
with several workers is refused (the extender's listener runs with one anyway).

**A restart in the middle of a gang.** Held binds die with the process; kube-scheduler sees them fail
and queues the pods again. At start, every running gang job of the store is adopted with a full wait
from then on; its members bound before the restart are found through the API server (the group's pods
annotated with its job id). Members that come back take the free instances and the gang completes; if
they do not come back within the wait, the reservation is released as above.

Members beyond ``minMember`` (once every instance is taken) are scheduled as pods of their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi.concurrency import run_in_threadpool

from placement import Job, Task
from service.codec import allocation_to_json, job_from_json
from service.k8s import kube
from service.k8s.pod import GANG_SIZE, PodDemand, PodError, gang_size, object_at
from service.runtime import Runtime
from service.store import End, Place, Placed, Refused

log = logging.getLogger(__name__)
GangKey = tuple[str, str]
"""``(namespace, pod group)``."""
JOB_PREFIX = "gang:"
JOB_ANNOTATION = "gpuplace.io/job"
"""Written on each member before its Binding: the gang's job id."""
INSTANCE_ANNOTATION = "gpuplace.io/gang-instance"
"""Written on each member before its Binding: the index of its instance in the gang's allocation."""
MAX_SIZE = 10_000


class GangError(ValueError):
    """A gang that cannot be formed (its size, its GPU memory), in words."""


def shown(nodes: Sequence[str], most: int = 8) -> str:
    """Node names for a message: distinct, sorted, the first ``most`` of them."""
    listed = sorted(set(nodes))
    more = f" and {len(listed) - most} more" if len(listed) > most else ""
    return ", ".join(listed[:most]) + more


def gang_name(key: GangKey) -> str:
    return f"{key[0]}/{key[1]}"


def new_job_id(key: GangKey) -> str:
    """A job id for a placement of the gang: ``gang:<namespace>:<group>:<nonce>`` (a digest of the two
    where they are too long for a job id)."""
    base = f"{key[0]}:{key[1]}"
    if len(base) > 96:
        base = hashlib.sha256(gang_name(key).encode()).hexdigest()[:32]
    return f"{JOB_PREFIX}{base}:{uuid.uuid4().hex[:12]}"


@dataclass
class Gang:
    """A gang's reservation, and which members took which of its instances."""

    key: GangKey
    job: Job
    """One task, an instance per member."""
    instances: list[dict[str, Any]]
    """The allocation's instances as stored (``machine``, ``gpus`` within it, ``gpu_mem_mib``, ...)."""
    gpu_mem_of_gpu: float
    """The GPU memory the members' shares were worked out on (NaN unless they ask ``aliyun.com/gpu-mem``)."""
    wait_s: float
    members: set[str] = field(default_factory=set)
    """UIDs of the pods the API server says are members."""
    assigned: dict[str, int] = field(default_factory=dict)
    """UID of a member filtered -> the instance set aside for it."""
    claims: dict[int, str] = field(default_factory=dict)
    """Instance -> UID of the member whose bind is held."""
    bound: dict[int, str] = field(default_factory=dict)
    """Instance -> UID of the member bound to it."""
    waiters: dict[int, asyncio.Future[str]] = field(default_factory=dict)
    synced: bool = True
    """Whether the members bound are known (not yet for a gang adopted at start)."""
    met: bool = False
    """Every instance is taken: the held binds go on."""
    closing: bool = False
    timer: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return gang_name(self.key)

    @property
    def size(self) -> int:
        return len(self.instances)

    @property
    def task(self) -> Task:
        return self.job.tasks[0]

    def node(self, instance: int) -> str:
        return str(self.instances[instance]["machine"])

    def free(self) -> list[int]:
        """Instances nobody holds: not set aside for a member, claimed or bound."""
        aside = set(self.assigned.values())
        return [i for i in range(self.size) if i not in self.claims and i not in self.bound and i not in aside]

    def held_by(self, uid: str) -> int | None:
        """The instance ``uid`` holds (claimed or bound), if any."""
        for taken in (self.claims, self.bound):
            for instance, holder in taken.items():
                if holder == uid:
                    return instance
        return None

    def mine(self, uid: str) -> int | None:
        """The instance ``uid`` holds or has set aside, if any."""
        held = self.held_by(uid)
        return held if held is not None else self.assigned.get(uid)

    def claim_of(self, uid: str) -> int | None:
        return next((i for i, holder in self.claims.items() if holder == uid), None)

    def takes(self, demand: PodDemand) -> str | None:
        """Why a member asking ``demand`` cannot be one of this gang's instances, or ``None``."""
        try:
            asked = demand.job(self.gpu_mem_of_gpu, instances=self.size, job_id=self.job.job_id).tasks[0]
        except PodError as exc:
            return str(exc)
        if not _same(asked, self.task):
            return (f"the pod asks {_described(asked)} but gang {self.name} was placed for {_described(self.task)} "
                    "per member: the members of a gang must ask the same")
        return None


def _same(a: Task, b: Task) -> bool:
    """Equal tasks, NaN GPU memory equal to NaN."""
    mem = (math.isnan(a.gpu_mem_gib) and math.isnan(b.gpu_mem_gib)) or a.gpu_mem_gib == b.gpu_mem_gib
    return mem and (a.role, a.instances, a.gpu, a.cpu_cores, a.mem_gib, a.bandwidth_gbps, a.gpu_types) == (
        b.role, b.instances, b.gpu, b.cpu_cores, b.mem_gib, b.bandwidth_gbps, b.gpu_types)


def _described(task: Task) -> str:
    mem = "" if math.isnan(task.gpu_mem_gib) else f" ({task.gpu_mem_gib:g} GiB of GPU memory)"
    return f"{task.gpu:g} GPU{mem}, {task.cpu_cores:g} cores, {task.mem_gib:g} GiB"


class Gangs:
    """The gangs of this process (module docstring): their reservations, claims and timers."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._gangs: dict[GangKey, Gang] = {}
        self._placing = asyncio.Lock()

    def live(self, key: GangKey) -> Gang | None:
        """The gang's reservation, if it still runs (a job released through the API is forgotten here)."""
        gang = self._gangs.get(key)
        if gang is not None and gang.job.job_id not in self.rt.store.cached().allocations:
            self._forget(gang)
            return None
        return gang

    async def adopt(self) -> int:
        """Take on the gangs the store holds running (placed before a restart): a full wait each, from
        now. How many."""
        snapshot = await run_in_threadpool(self.rt.store.snapshot)
        ids = sorted(j for j in snapshot.allocations if j.startswith(JOB_PREFIX))
        for job_id in ids:
            row = await run_in_threadpool(self.rt.store.job, job_id)
            about = (row.details or {}).get("gang") if row is not None else None
            if row is None or not isinstance(about, dict):
                continue
            key = (str(about["namespace"]), str(about["name"]))
            mem = about.get("gpu_mem_of_gpu")
            gang = Gang(key, job_from_json({**row.demand, "job_id": job_id}),
                        allocation_to_json(snapshot.cluster, snapshot.allocations[job_id])["instances"],
                        math.nan if mem is None else float(mem), float(about["wait_s"]), synced=False)
            self._gangs[key] = gang
            self._arm(gang)
            log.info("gang %s adopted: reservation %s of %d instances, %g s for its members", gang.name, job_id,
                     gang.size, gang.wait_s)
        return len(ids)

    async def form(self, key: GangKey, pod: dict[str, Any], demand: PodDemand) -> tuple[int, float, float]:
        """The gang's size and wait (from the pod's annotation or the PodGroup) and the GPU memory its
        shares are worked out on; :class:`GangError` if they cannot be known."""
        settings = self.rt.settings
        size, wait_s = gang_size(pod), settings.gang_wait_s
        group = await run_in_threadpool(kube.read_pod_group, settings, *key) if size is None else None
        if size is None:
            if group is None:
                raise GangError(f"pod group {gang_name(key)}: no PodGroup in the API server and no {GANG_SIZE} "
                                "annotation on the pod")
            spec = object_at(group.get("spec"), "PodGroup.spec")
            size = spec.get("minMember")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise GangError(f"PodGroup {gang_name(key)}: spec.minMember {size!r} is not a number of pods >= 1")
            timeout = spec.get("scheduleTimeoutSeconds")
            if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
                wait_s = min(wait_s, float(timeout))
        if size > MAX_SIZE:
            raise GangError(f"pod group {gang_name(key)}: {size} members; at most {MAX_SIZE}")
        return size, wait_s, self._gpu_memory(key, demand)

    def _gpu_memory(self, key: GangKey, demand: PodDemand) -> float:
        """The GPU memory a gang asking GPU memory of one GPU (``aliyun.com/gpu-mem``) has its shares worked
        out on: that of the cluster's GPUs that can hold it, if they all have the same."""
        if not demand.per_node:
            return math.nan
        sizes = {m.gpu_mem_gib for m in self.rt.store.cached().cluster.machines
                 if m.gpus and (not demand.gpu_types or m.gpu_type in demand.gpu_types)
                 and demand.misfit(m.gpu_mem_gib) is None}
        if len(sizes) != 1:
            found = ", ".join(f"{s:g}" for s in sorted(sizes)) or "none"
            raise GangError(f"gang {gang_name(key)} asks {demand.shared_gib:g} GiB of one GPU's memory: its share of "
                            f"a GPU depends on the GPU, and the GPUs that can hold it have {found} GiB; give "
                            "gpuplace.io/gpu-share, or gpuplace.io/gpu-types of one memory size")
        return sizes.pop()

    async def place(self, key: GangKey, demand: PodDemand, size: int, wait_s: float,
                    gpu_mem_of_gpu: float) -> Gang | Refused:
        """The gang's reservation: the one it holds, or a new one of ``size`` instances of ``demand``
        (:class:`Refused` if they do not all fit)."""
        async with self._placing:
            held = self.live(key)
            if held is not None:
                return held
            job = demand.job(gpu_mem_of_gpu, instances=size, job_id=new_job_id(key))
            _, policy = self.rt.policy(None)
            details = {"gang": {"namespace": key[0], "name": key[1], "size": size, "wait_s": wait_s,
                                "gpu_mem_of_gpu": None if math.isnan(gpu_mem_of_gpu) else gpu_mem_of_gpu}}
            result = await self.rt.cycle.run(Place(job, policy, details))
            match result:
                case Placed(decision=decision, cluster=cluster) if decision.allocation is not None:
                    gang = Gang(key, job, allocation_to_json(cluster, decision.allocation)["instances"],
                                gpu_mem_of_gpu, wait_s)
                    self._gangs[key] = gang
                    self._arm(gang)
                    log.info("gang %s placed: %s, %d instances on %d node(s)", gang.name, job.job_id, size,
                             len({gang.node(i) for i in range(size)}))
                    return gang
                case Refused():
                    return result
                case other:
                    raise AssertionError(f"placing gang {gang_name(key)} came to {other!r}")

    async def sync(self, gang: Gang) -> None:
        """Learn which members of an adopted gang are bound (the group's pods annotated with its job)."""
        if gang.synced:
            return
        pods = await run_in_threadpool(kube.group_pods, self.rt.settings, *gang.key)
        for pod in pods:
            meta = object_at(pod.get("metadata"), "Pod.metadata")
            annotations = object_at(meta.get("annotations"), "Pod.metadata.annotations")
            node = object_at(pod.get("spec"), "Pod.spec").get("nodeName")
            phase = object_at(pod.get("status"), "Pod.status").get("phase")
            if annotations.get(JOB_ANNOTATION) != gang.job.job_id or not node or phase in ("Succeeded", "Failed"):
                continue
            try:
                instance = int(annotations.get(INSTANCE_ANNOTATION, ""))
            except ValueError:
                continue
            if 0 <= instance < gang.size and instance not in gang.bound and gang.node(instance) == node:
                uid = str(meta.get("uid"))
                gang.claims.pop(instance, None)
                gang.assigned = {u: i for u, i in gang.assigned.items() if u != uid and i != instance}
                gang.bound[instance] = uid
        gang.synced = True
        if len(gang.bound) == gang.size:
            self._met(gang)

    def assign(self, gang: Gang, uid: str, nodes: Sequence[str]) -> int | None:
        """The instance of member ``uid``: the one it holds or has set aside if its node is among ``nodes``,
        else a free one whose node is (set aside for it); ``None`` if there is none."""
        allowed = set(nodes)
        held = gang.held_by(uid)
        if held is not None:
            return held if gang.node(held) in allowed else None
        aside = gang.assigned.pop(uid, None)
        if aside is not None and gang.node(aside) in allowed:
            gang.assigned[uid] = aside
            return aside
        instance = next((i for i in gang.free() if gang.node(i) in allowed), None)
        if instance is not None:
            gang.assigned[uid] = instance
        return instance

    def claim(self, gang: Gang, uid: str, node: str) -> int | str:
        """The instance on ``node`` of the member ``uid``: the one set aside for it, or a free one (its own,
        if it claimed one there before: a bind asked again); or why there is none."""
        if gang.closing:
            return f"gang {gang.name} is being released: its members did not all arrive within {gang.wait_s:g} s"
        mine = gang.claim_of(uid)
        if mine is not None:
            self._settle(gang, mine, f"a later bind of the same pod took its place in gang {gang.name}")
        aside = gang.assigned.pop(uid, None)
        choices = [i for i in ([aside] if aside is not None else []) + gang.free() if gang.node(i) == node]
        if not choices:
            if aside is not None:
                gang.assigned[uid] = aside
            free = [gang.node(i) for i in gang.free()]
            where = f"the nodes with free instances are {shown(free)}" if free else "it has no free instance"
            if all(gang.node(i) != node for i in range(gang.size)):
                return f"node {node} is not in gang {gang.name}'s plan: {where}"
            return f"gang {gang.name}'s instances on node {node} are taken: {where}"
        instance = choices[0]
        gang.claims[instance] = uid
        gang.waiters[instance] = asyncio.get_running_loop().create_future()
        if len(gang.claims) + len(gang.bound) == gang.size:
            self._met(gang)
        else:
            self._arm(gang)
        return instance

    async def held(self, gang: Gang, instance: int) -> str:
        """Wait for the rest of the gang: empty once every instance is taken, else why the bind fails."""
        waiter = gang.waiters.get(instance)
        if waiter is None:
            return f"gang {gang.name}: instance {instance} is no longer held"
        try:
            return await waiter
        finally:
            if gang.waiters.get(instance) is waiter:
                del gang.waiters[instance]

    def bound(self, gang: Gang, instance: int, uid: str) -> None:
        """The member's Binding was created."""
        gang.claims.pop(instance, None)
        gang.bound[instance] = uid
        if len(gang.bound) == gang.size:
            log.info("gang %s bound whole: %s", gang.name, gang.job.job_id)

    def unclaim(self, gang: Gang, instance: int) -> None:
        """The member's bind failed after the gang met: its instance is free for it to come back to."""
        gang.claims.pop(instance, None)
        gang.met = False
        self._arm(gang)

    def close(self) -> None:
        """The service stops: timers cancelled, held binds answered (the reservations stay in the store)."""
        for gang in list(self._gangs.values()):
            self._disarm(gang)
            for instance in list(gang.claims):
                self._settle(gang, instance, f"gang {gang.name}: the service is stopping")
        self._gangs.clear()

    def _met(self, gang: Gang) -> None:
        gang.met = True
        self._disarm(gang)
        for instance in list(gang.waiters):
            waiter = gang.waiters[instance]
            if not waiter.done():
                waiter.set_result("")

    def _settle(self, gang: Gang, instance: int, why: str) -> None:
        """Answer the held bind of ``instance`` with ``why`` and free the instance."""
        gang.claims.pop(instance, None)
        waiter = gang.waiters.pop(instance, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(why)

    def _arm(self, gang: Gang) -> None:
        if gang.timer is None and not gang.met:
            gang.timer = asyncio.get_running_loop().create_task(self._expire(gang))

    def _disarm(self, gang: Gang) -> None:
        if gang.timer is not None and gang.timer is not asyncio.current_task():
            gang.timer.cancel()
        gang.timer = None

    def _forget(self, gang: Gang) -> None:
        self._disarm(gang)
        for instance in list(gang.claims):
            self._settle(gang, instance, f"gang {gang.name}'s reservation {gang.job.job_id} is no longer running")
        if self._gangs.get(gang.key) is gang:
            del self._gangs[gang.key]

    async def _expire(self, gang: Gang) -> None:
        await asyncio.sleep(gang.wait_s)
        gang.timer = None
        if gang.met or self._gangs.get(gang.key) is not gang:
            return
        try:
            await self.sync(gang)
        except Exception as exc:  # the API server does not answer: whether members are bound is unknown
            log.warning("gang %s: its members bound cannot be read (%s): waiting again", gang.name, exc)
            self._arm(gang)
            return
        if gang.met:
            return
        arrived = len(gang.claims) + len(gang.bound)
        why = f"gang {gang.name}: {arrived} of {gang.size} members arrived within {gang.wait_s:g} s"
        if gang.bound:
            why += f"; {len(gang.bound)} bound already: its reservation {gang.job.job_id} stays for them"
            for instance in list(gang.claims):
                self._settle(gang, instance, why)
        else:
            gang.closing = True
            for instance in list(gang.claims):
                self._settle(gang, instance, why + f"; its reservation {gang.job.job_id} is released")
            try:
                await self.rt.cycle.run(End(gang.job.job_id))
            except Exception:  # the database: kept closing, tried again after another wait
                log.exception("gang %s: releasing %s failed", gang.name, gang.job.job_id)
                self._arm(gang)
                return
            why += f"; its reservation {gang.job.job_id} is released"
            self._forget(gang)
        log.warning("%s", why)

