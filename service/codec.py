"""JSON forms of core values, as the state database stores them.

* A cluster: its name, machines and topology (``machine_racks``, ``rack_domains``).
* A job's demand: its tasks (NaN GPU memory = ``null``, proportional to the GPU).
* An allocation: per instance the machine by *name* and its GPUs by index *within that machine*, so
  a stored allocation means the same thing on any cluster spec that has the machine, whatever the
  order of machines; :func:`allocation_from_json` maps it onto a cluster or says why it cannot.
"""

from __future__ import annotations

import math
from typing import Any

from placement import (
    MILLI,
    Allocation,
    Cluster,
    InstancePlacement,
    Job,
    Machine,
    Role,
    Task,
    Topology,
    build_cluster,
    layout_of,
)

Json = dict[str, Any]


def placeable_share(gpu: float) -> float:
    """``gpu`` (GPUs per instance), with a share of a GPU below one milli-GPU asked as one milli-GPU.

    Placement counts GPU shares in milli-GPUs, rounding a share up: it charges one for 0.0004 already.
    A share so small (below about 1e-12) that it rounds to none would still need a GPU of its own,
    which no allocation can give it: the policy raises, and the request got a 500."""
    return 1 / MILLI if 0 < gpu < 1 / MILLI else gpu


def cluster_to_json(cluster: Cluster) -> Json:
    return {
        "name": cluster.name,
        "machines": [{"name": m.name, "gpu_type": m.gpu_type, "gpus": m.gpus, "cpu_cores": m.cpu_cores,
                      "mem_gib": m.mem_gib, "gpu_mem_gib": None if math.isnan(m.gpu_mem_gib) else m.gpu_mem_gib}
                     for m in cluster.machines],
        "machine_racks": [list(p) for p in cluster.topology.machine_racks],
        "rack_domains": [list(p) for p in cluster.topology.rack_domains],
    }


def cluster_from_json(spec: Json) -> Cluster:
    machines = [Machine(m["name"], m["gpu_type"], int(m["gpus"]), float(m["cpu_cores"]), float(m["mem_gib"]),
                        math.nan if m.get("gpu_mem_gib") is None else float(m["gpu_mem_gib"]))
                for m in spec["machines"]]
    racks = spec.get("machine_racks")
    topology = (Topology(tuple((a, b) for a, b in racks), tuple((a, b) for a, b in spec["rack_domains"]))
                if racks else None)
    return build_cluster(spec["name"], machines, topology)


def task_to_json(task: Task) -> Json:
    return {"role": task.role.value, "instances": task.instances, "gpu": task.gpu, "cpu_cores": task.cpu_cores,
            "mem_gib": task.mem_gib, "gpu_mem_gib": None if math.isnan(task.gpu_mem_gib) else task.gpu_mem_gib,
            "bandwidth_gbps": task.bandwidth_gbps, "gpu_types": sorted(task.gpu_types)}


def job_to_json(job: Job) -> Json:
    return {"job_id": job.job_id, "tasks": [task_to_json(t) for t in job.tasks],
            "duration_s": None if math.isnan(job.duration_s) else job.duration_s}


def job_from_json(data: Json) -> Job:
    tasks = tuple(Task(Role(t["role"]), int(t["instances"]), float(t["gpu"]), float(t["cpu_cores"]),
                       float(t["mem_gib"]), math.nan if t.get("gpu_mem_gib") is None else float(t["gpu_mem_gib"]),
                       float(t["bandwidth_gbps"]), frozenset(t.get("gpu_types", ())))
                  for t in data["tasks"])
    duration = data.get("duration_s")
    return Job(data["job_id"], tasks, math.nan if duration is None else float(duration))


def allocation_to_json(cluster: Cluster, allocation: Allocation) -> Json:
    layout = layout_of(cluster)
    return {"instances": [
        {"task": p.task, "machine": cluster.machines[p.machine].name,
         "gpus": [g - int(layout.gpu_first[p.machine]) for g in p.gpus], "gpu_milli": p.gpu_milli,
         "gpu_mem_mib": p.gpu_mem_mib, "cpu_milli": p.cpu_milli, "mem_mib": p.mem_mib}
        for p in allocation.instances]}


class OrphanedAllocation(ValueError):
    """A stored allocation names a machine or GPU the cluster does not have."""


def allocation_from_json(cluster: Cluster, job_id: str, data: Json) -> Allocation:
    layout = layout_of(cluster)
    index = cluster.index
    instances = []
    for p in data["instances"]:
        machine = index.get(p["machine"])
        if machine is None:
            raise OrphanedAllocation(f"job {job_id}: machine {p['machine']!r} is not in cluster {cluster.name!r}")
        count = int(layout.gpu_count[machine])
        if any(not 0 <= g < count for g in p["gpus"]):
            raise OrphanedAllocation(f"job {job_id}: machine {p['machine']!r} has {count} GPU(s), "
                                     f"the allocation uses {p['gpus']}")
        first = int(layout.gpu_first[machine])
        instances.append(InstancePlacement(int(p["task"]), machine, tuple(first + g for g in p["gpus"]),
                                           int(p["gpu_milli"]), int(p["gpu_mem_mib"]), int(p["cpu_milli"]),
                                           int(p["mem_mib"])))
    return Allocation(job_id, tuple(instances))
