"""Why a job could not be placed, in words a person can act on.

The reasons are for the instance that found no machine: how many machines each rule ruled out
(in the order type, GPUs, CPU, memory), with the best the cluster could offer, e.g.
"no machine has 8 free V100 GPUs (most free on one allowed machine: 6)" or
"needs 30 GiB of GPU memory on one GPU; largest free is 16 GiB".
"""

from __future__ import annotations

import numpy as np

from placement.demand import Job
from placement.feasibility import need_of
from placement.snapshot import MIB_PER_GIB, MILLI, ClusterSnapshot
from placement.working import FEW_CPU, FEW_GPUS, FEW_MEM, NO_SHARED_GPU, WRONG_TYPE, Candidates


def failure_reasons(snapshot: ClusterSnapshot, job: Job, task_index: int, candidates: Candidates,
                    placed_before: int) -> tuple[str, ...]:
    """Top reasons: what is short on the allowed machines (most machines first), then the type rule."""
    task = job.tasks[task_index]
    need = need_of(task)
    layout = snapshot.layout
    allowed = candidates.reason != WRONG_TYPE
    types = "/".join(sorted(task.gpu_types)) + " " if task.gpu_types and task.gpu else ""
    counts = {code: int(np.count_nonzero(candidates.reason == code)) for code in
              (WRONG_TYPE, FEW_GPUS, NO_SHARED_GPU, FEW_CPU, FEW_MEM)}
    reasons: list[tuple[int, str]] = []
    if counts[FEW_GPUS]:
        best = int(candidates.free_whole[allowed].max()) if allowed.any() else 0
        reasons.append((counts[FEW_GPUS], f"no machine has {need.whole_gpus} free {types}GPUs "
                        f"(most free on one allowed machine: {best})"))
    if counts[NO_SHARED_GPU]:
        reasons.append((counts[NO_SHARED_GPU], _shared_reason(snapshot, need.gpu_milli, need.gpu_mem_mib, allowed)))
    if counts[FEW_CPU]:
        free = (layout.cpu_cap - snapshot.cpu_used)[allowed]
        most = float(free.max()) / MILLI if free.size else 0.0
        reasons.append((counts[FEW_CPU], f"{counts[FEW_CPU]:,} machines lack {need.cpu_milli / MILLI:g} free CPU "
                        f"cores (most free: {most:g})"))
    if counts[FEW_MEM]:
        free = (layout.mem_cap - snapshot.mem_used)[allowed]
        most = float(free.max()) / MIB_PER_GIB if free.size else 0.0
        reasons.append((counts[FEW_MEM], f"{counts[FEW_MEM]:,} machines lack {need.mem_mib / MIB_PER_GIB:g} GiB free "
                        f"memory (most free: {most:g} GiB)"))
    ordered = [text for _, text in sorted(reasons, key=lambda r: -r[0])]
    if counts[WRONG_TYPE]:  # a standing fact about the cluster: after what is short among allowed machines
        ordered.append(f"{counts[WRONG_TYPE]:,} machines have no {types.strip()} GPUs")
    if placed_before:
        ordered.append(f"gang: {placed_before} of {job.instances} instances fitted, the next did not; none placed")
    return tuple(ordered[:4])


def _shared_reason(snapshot: ClusterSnapshot, milli: int, mem_mib: int, allowed: np.ndarray) -> str:
    layout = snapshot.layout
    on_allowed = allowed[layout.gpu_machine]
    free_share = (MILLI - snapshot.gpu_milli_used)[on_allowed]
    free_mem = (layout.gpu_mem_cap - snapshot.gpu_mem_used)[on_allowed]
    share = f"{milli / MILLI:g} of a GPU"
    if mem_mib >= 0:
        biggest = float(free_mem.max()) / MIB_PER_GIB if free_mem.size else 0.0
        return (f"needs {share} with {mem_mib / MIB_PER_GIB:g} GiB GPU memory on one GPU; largest free share "
                f"{(free_share.max() if free_share.size else 0) / MILLI:g}, largest free GPU memory {biggest:g} GiB")
    return f"no GPU has {share} free (largest free share {(free_share.max() if free_share.size else 0) / MILLI:g})"
