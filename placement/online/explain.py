"""Why a job could not be placed, in words a person can act on.

The reasons are for the instance that found no machine: how many machines each filter ruled out, in
the filters' words (``placement.filters``), most machines first, with the best the cluster could offer,
e.g. "no machine has 8 free V100 GPUs (most free on one allowed machine: 6)" or "needs 30 GiB of GPU
memory on one GPU; largest free is 16 GiB". What standing filters (the GPU type) rule out comes after
what is short on the allowed machines: a fact about the cluster, not about what runs on it.
"""

from __future__ import annotations

import numpy as np

from placement.filters.base import SnapshotUsage
from placement.filters.chain import CODED
from placement.model.demand import Job
from placement.model.feasibility import need_of
from placement.model.snapshot import ClusterSnapshot
from placement.online.working import Candidates

MOST_REASONS = 4


def failure_reasons(snapshot: ClusterSnapshot, job: Job, task_index: int, candidates: Candidates,
                    placed_before: int) -> tuple[str, ...]:
    """Top reasons: what is short on the allowed machines (most machines first), then the standing rules."""
    need = need_of(job.tasks[task_index])
    # The figures are the cluster's as the job found it, but the free whole GPUs are counted after the
    # job's instances placed before this one: those took them, and that is what ruled the machines out.
    # With none placed before, the figures are the snapshot's alone: what the summaries work out from them
    # (``placement.filters.base.largest``) is kept with the snapshot, in one table of plain numbers (it holds no
    # reference back), for every demand asked about there.
    found = (SnapshotUsage(snapshot, kept=snapshot.remember(("reasons' figures",), dict)) if not placed_before
             else SnapshotUsage(snapshot, free_whole=candidates.free_whole))
    codes = candidates.reason
    allowed = np.ones(len(codes), dtype=bool)
    for code, f in CODED:
        if f.standing:
            allowed &= codes != code
    short: list[tuple[int, str]] = []
    facts: list[str] = []
    counts = np.bincount(codes, minlength=len(CODED) + 1).tolist()
    for code, f in CODED:
        rejected = counts[code]
        if not rejected:
            continue
        text = f.summary(found, need, rejected, allowed)
        if f.standing:
            facts.append(text)
        else:
            short.append((rejected, text))
    ordered = [text for _, text in sorted(short, key=lambda r: -r[0])] + facts
    if placed_before:
        ordered.append(f"gang: {placed_before} of {job.instances} instances fitted, the next did not; none placed")
    return tuple(ordered[:MOST_REASONS])
