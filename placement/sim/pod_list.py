"""Reading a pod list in the openb v2023 format (the FGD paper's traces) as jobs of one pod each.

Columns ``POD_COLUMNS``; the ones read: ``name``, ``cpu_milli`` (milli-cores), ``memory_mib`` (MiB),
``num_gpu`` (GPUs), ``gpu_milli`` (milli-GPUs per GPU, at most 1000) and ``gpu_spec`` (an any-of GPU type
constraint, ``V100M16|V100M32``; empty: any type). A pod with one GPU asks for ``gpu_milli / 1000`` of
it (a share, or the whole GPU at 1000); a pod with more GPUs takes that many whole GPUs, so its
``gpu_milli`` must be 1000. The list states no GPU memory: a share is bounded by its share of the GPU
alone (``gpu_mem_gib`` 0), as in the simulator the traces were published with. Every problem raises
``PodListError`` naming the file, line, column and value.
"""

from __future__ import annotations

from pathlib import Path

from placement.model.csv_rows import Row, csv_rows
from placement.model.demand import Job, Role, Task
from placement.model.errors import PodListError
from placement.model.gpu_types import GPU_MEM_GIB
from placement.model.layout import MIB_PER_GIB, MILLI

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
               "creation_time", "deletion_time", "scheduled_time")
"""Header of the openb ``openb_pod_list_*.csv`` files."""


def load_openb_pods(path: str | Path) -> tuple[Job, ...]:
    """One job of one instance per pod of the pod list at ``path``, in file order, named as the pod."""
    pods = tuple(_pod(row) for row in csv_rows(path, POD_COLUMNS, True, PodListError))
    if not pods:
        raise PodListError(str(path), "the file lists no pods")
    if not any(pod.gpus > 0 for pod in pods):  # a fill to a share of the GPUs would never end
        raise PodListError(str(path), "no pod asks for a GPU (num_gpu and gpu_milli are 0 on every row)")
    return pods


def _pod(row: Row) -> Job:
    name = row.fields["name"]
    if not name:
        raise row.error("name", "the pod name is empty")
    gpus, milli = row.count("num_gpu"), row.count("gpu_milli")
    if milli > MILLI:
        raise row.error("gpu_milli", f"gpu_milli must be at most {MILLI}", row.fields["gpu_milli"])
    if gpus > 1 and milli != MILLI:
        raise row.error("gpu_milli", f"a pod with {gpus} GPUs takes whole GPUs: gpu_milli must be {MILLI}",
                        row.fields["gpu_milli"])
    gpu = float(gpus) if gpus > 1 else gpus * milli / MILLI
    task = Task(Role.WORKER, 1, gpu=gpu, cpu_cores=row.amount("cpu_milli") / MILLI,
                mem_gib=row.amount("memory_mib") / MIB_PER_GIB, gpu_mem_gib=0.0, gpu_types=_gpu_types(row))
    return Job(name, (task,))


def _gpu_types(row: Row) -> frozenset[str]:
    text = row.fields["gpu_spec"]
    types = frozenset(t.strip() for t in text.split("|")) if text else frozenset()
    unknown = sorted(t for t in types if t not in GPU_MEM_GIB)
    if unknown:
        known = ", ".join(sorted(GPU_MEM_GIB))
        raise row.error("gpu_spec", f"unknown GPU type {unknown[0]!r} (known: {known})", text)
    return types
