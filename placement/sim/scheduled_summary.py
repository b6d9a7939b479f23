"""The figures of a replay on the scheduler core (``placement.sim.scheduled``).

Over the jobs that finished (each once, after its last start):

* JCT = end - submit, wait = start of the run that finished - submit (queueing and any runs lost to
  preemption), so JCT = wait + the real duration; mean and p95 of JCT, mean wait overall and per queue.
* slowdown of a job = JCT / max(real duration, 1 s); fairness = Jain's index over the queues (those with a
  finished job) of each queue's mean slowdown, ``(sum x)^2 / (n sum x^2)``: 1 when every queue's jobs are
  slowed alike, 1/n when one queue takes all the slowdown.

Over the replay: quota violations (a queue's guaranteed usage above its guarantee + borrowing limit after a
pass, counted per pass, queue and resource: 0 is the scheduler's promise), GPU-hours preempted (work lost),
GPU-hours idle while jobs waited (free GPUs x time while at least one job was pending), the jobs never
started by why, the passes and their wall time.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from placement.scheduling.jobs import JobMode
from placement.sim.scheduled import ReplayResult


def jain(values: list[float]) -> float | None:
    """Jain's fairness index of ``values`` (``None`` for none; 1 where all are 0)."""
    if not values:
        return None
    x = np.asarray(values, dtype=np.float64)
    squares = float((x * x).sum())
    return 1.0 if squares == 0 else float(x.sum() ** 2 / (len(x) * squares))


def summarise_replay(result: ReplayResult) -> dict[str, Any]:
    outcomes = result.outcomes
    finished = [o for o in outcomes if o.end_s is not None and o.start_s is not None]
    jct = np.array([o.end_s - o.submit_s for o in finished if o.end_s is not None])
    wait = np.array([o.start_s - o.submit_s for o in finished if o.start_s is not None])
    by_queue: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for o, w, j in zip(finished, wait.tolist(), jct.tolist(), strict=True):
        by_queue[o.queue].append((w, j / max(o.duration_s, 1.0)))
    slowdowns = {q: float(np.mean([s for _, s in v])) for q, v in sorted(by_queue.items())}
    never = Counter(o.never_started for o in outcomes if o.never_started is not None)
    walls = np.array(result.pass_wall_s) * 1e3
    out: dict[str, Any] = {
        "jobs": len(outcomes), "finished": len(finished), "never_started": sum(never.values()),
        "never_started_by_reason": dict(sorted(never.items())),
        "opportunistic_submitted": sum(o.mode is JobMode.OPPORTUNISTIC for o in outcomes),
        "jct_mean_s": float(jct.mean()) if len(jct) else None,
        "jct_p95_s": float(np.percentile(jct, 95)) if len(jct) else None,
        "wait_mean_s": float(wait.mean()) if len(wait) else None,
        "wait_sum_s": float(wait.sum()),
        "wait_mean_s_by_queue": {q: float(np.mean([w for w, _ in v])) for q, v in sorted(by_queue.items())},
        "finished_by_queue": {q: len(v) for q, v in sorted(by_queue.items())},
        "slowdown_mean_by_queue": slowdowns,
        "fairness_jain_slowdown": jain(list(slowdowns.values())),
        "quota_violations": len(result.violations),
        "preemptions": sum(o.preemptions for o in outcomes),
        "preemptions_by_reason": dict(sorted(result.preemptions_by_reason.items())),
        "preempted_gpu_h": result.preempted_gpu_s / 3600.0,
        "idle_gpu_h_while_waiting": result.idle_gpu_s_waiting / 3600.0,
        "upgrades": result.upgrades,
        "passes": result.passes,
        "timed_wakes": result.timed_wakes,
        "stale_ends": result.stale_ends,
        "pass_ms_mean": float(walls.mean()) if len(walls) else None,
        "pass_ms_p95": float(np.percentile(walls, 95)) if len(walls) else None,
        "pass_ms_max": float(walls.max()) if len(walls) else None,
        "wall_s": result.wall_s,
        "span_s": result.span_s,
        "total_gpus": result.total_gpus,
    }
    return out
