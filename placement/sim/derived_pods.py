"""Workloads derived from a shipped pod list (one-pod jobs, ``placement.sim.pod_list``), so that a policy is
judged on more than the traces it was looked at with. Each variant changes one property of the list and
keeps everything else (CPU, memory, the order of the pods, their names):

* ``share:P`` - the share of GPU pods that ask for a fraction of one GPU becomes ``P``. Raising it: pods that
  take one whole GPU, picked at random, ask instead for a fraction drawn from the fractions the list's
  shared pods ask for (all of them, so common fractions stay common). Lowering it: shared pods, picked at
  random, take one whole GPU.
* ``multi:P`` - the share of GPU pods that take more than one GPU becomes ``P``. Raising it: one-GPU pods
  (whole or shared), picked at random, take a number of whole GPUs drawn from the numbers the list's
  multi-GPU pods take (2, 2 if there are none). Lowering it: multi-GPU pods, picked at random, take one
  whole GPU.
* ``types:P`` - a share ``P`` of the GPU pods, picked at random among those without a GPU type, is restricted
  to one GPU type: the type is drawn in proportion to the cluster's GPUs of each type, among the types with
  a machine that has GPUs enough for the pod (so every restricted pod fits an empty cluster).
* ``cpu:P`` - the share of all pods that ask for no GPU becomes ``P``. Raising it: GPU pods, picked at random,
  ask for no GPU (and no GPU type). Lowering it: CPU-only pods, picked at random, ask for a number of GPUs drawn
  from what the list's GPU pods ask for (1 if there are none).

``P`` is a share in [0, 1]. Pods are picked and values drawn by one random stream seeded by ``seed``: the same
list, variant and seed give the same pods. The number of pods changed is ``round(P x GPU pods)``
(``round(P x pods)`` for ``cpu``) minus the number that already have the property (nothing changes when they
already are as many or more, for ``types``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from placement.model.cluster import Cluster
from placement.model.demand import Job, Task

KINDS = ("share", "multi", "types", "cpu")
"""The properties a variant changes (see the module docstring)."""


def parse_variant(text: str) -> tuple[str, float]:
    """``share:0.4`` as ``("share", 0.4)``; ``ValueError`` naming the text otherwise."""
    kind, _, value = text.partition(":")
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if kind not in KINDS or not 0.0 <= share <= 1.0:
        raise ValueError(f"a derived workload is KIND:SHARE with KIND one of {', '.join(KINDS)} and SHARE in "
                         f"[0, 1], e.g. share:0.4; got {text!r}")
    return kind, share


def _task(job: Job) -> Task:
    if len(job.tasks) != 1 or job.tasks[0].instances != 1:
        raise ValueError(f"job {job.job_id!r} is not one pod: derived workloads change pod lists")
    return job.tasks[0]


def _with(job: Job, **changes: object) -> Job:
    return replace(job, tasks=(replace(job.tasks[0], **changes),))  # type: ignore[arg-type]


def derive(pods: Sequence[Job], variant: str, cluster: Cluster, seed: int = 0) -> tuple[Job, ...]:
    """``pods`` changed as ``variant`` (``KIND:SHARE``) says, on ``cluster`` (for ``types``); see the module
    docstring."""
    kind, share = parse_variant(variant)
    tasks = [_task(p) for p in pods]
    rng = random.Random(seed)
    gpu_pods = [i for i, t in enumerate(tasks) if t.gpu > 0]
    goal = round(share * len(gpu_pods))
    out = list(pods)
    if kind == "share":
        shared = [i for i in gpu_pods if tasks[i].gpu < 1]
        fractions = [tasks[i].gpu for i in shared] or [0.5]
        if goal > len(shared):
            whole = [i for i in gpu_pods if tasks[i].gpu == 1]
            for i in rng.sample(whole, min(goal - len(shared), len(whole))):
                out[i] = _with(pods[i], gpu=rng.choice(fractions))
        else:
            for i in rng.sample(shared, len(shared) - goal):
                out[i] = _with(pods[i], gpu=1.0)
    elif kind == "multi":
        multi = [i for i in gpu_pods if tasks[i].gpu > 1]
        counts = [tasks[i].gpu for i in multi] or [2.0]
        if goal > len(multi):
            single = [i for i in gpu_pods if tasks[i].gpu <= 1]
            for i in rng.sample(single, min(goal - len(multi), len(single))):
                out[i] = _with(pods[i], gpu=rng.choice(counts))
        else:
            for i in rng.sample(multi, len(multi) - goal):
                out[i] = _with(pods[i], gpu=1.0)
    elif kind == "types":
        out = _restrict(pods, tasks, gpu_pods, goal, cluster, rng)
    else:
        out = _cpu_only(pods, tasks, gpu_pods, round(share * len(pods)), rng)
    return tuple(out)


def _cpu_only(pods: Sequence[Job], tasks: list[Task], gpu_pods: list[int], goal: int,
              rng: random.Random) -> list[Job]:
    """``goal`` pods in all asking for no GPU (``cpu`` in the module docstring)."""
    out = list(pods)
    cpu_pods = [i for i, t in enumerate(tasks) if t.gpu == 0]
    if goal > len(cpu_pods):
        for i in rng.sample(gpu_pods, min(goal - len(cpu_pods), len(gpu_pods))):
            out[i] = _with(pods[i], gpu=0.0, gpu_types=frozenset())
    else:
        asked = [tasks[i].gpu for i in gpu_pods] or [1.0]
        for i in rng.sample(cpu_pods, len(cpu_pods) - goal):
            out[i] = _with(pods[i], gpu=rng.choice(asked))
    return out


def _restrict(pods: Sequence[Job], tasks: list[Task], gpu_pods: list[int], goal: int, cluster: Cluster,
              rng: random.Random) -> list[Job]:
    """``goal`` GPU pods restricted to one type each (``types`` in the module docstring)."""
    gpus: Counter[str] = Counter()
    widest: Counter[str] = Counter()
    for machine in cluster.machines:
        if machine.gpus:
            gpus[machine.gpu_type] += machine.gpus
            widest[machine.gpu_type] = max(widest[machine.gpu_type], machine.gpus)
    out = list(pods)
    restricted = [i for i in gpu_pods if tasks[i].gpu_types]
    free = [i for i in gpu_pods if not tasks[i].gpu_types]
    for i in rng.sample(free, max(0, min(goal - len(restricted), len(free)))):
        fits = sorted(t for t in gpus if widest[t] >= max(tasks[i].gpu, 1.0))
        if fits:
            chosen = rng.choices(fits, weights=[gpus[t] for t in fits])[0]
            out[i] = _with(pods[i], gpu_types=frozenset({chosen}))
    return out
