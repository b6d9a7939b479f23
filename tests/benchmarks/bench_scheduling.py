"""Benchmark (not a timed test): one scheduling cycle with thousands of jobs waiting, on the real PAI cluster.

Cluster: the shipped PAI v2020 machine list (1,897 machines, 6,742 GPUs). Jobs: rows of the shipped
``data/pai2020/pai_job_duration_estimate_100K_head.csv`` (real), mapped as ``bench_placement.py`` maps
them; the trace's ``duration`` is the job's estimate (P50, and 1.5x that as P90: the benchmark measures
the cycle, not the estimator).

Queues: four, each guaranteed a quarter of the cluster's GPUs, in one cohort so that they borrow each
other's idle quota; jobs go to queues by their PAI user (hashed). Orders: fifo, sjf, priority, fifo.

Setup: rows from the top start through ``schedule`` until at least 90% of the GPUs are allocated; the next
``--pending`` rows (default 10,000) are submitted and wait. Then, ``--cycles`` times: the running job that started
earliest ends, and one cycle runs (the service runs one after every end): its latency (thread CPU and wall), how
many jobs it started, and how many it left waiting. Target: p99 under 50 ms for a cycle that places one job
(printed apart: the first cycle starts every waiting job that fits). Then ``--submissions`` times: the next row is
submitted and one cycle runs (the service runs one after every submission): their latency, and how many
submissions a second ``schedule`` takes so (the submissions over the cycles' wall time). The rows not used are
dropped before the cycles are timed (they are the benchmark's, not the scheduler's, and would only lengthen the
collector's sweeps).

Policy: ``liquid`` without explanations, as the replay runs it; with ``--explain``, with them, and every waiting job
told the filters' reasons, as a reader of why jobs wait gets them from the service (its dashboard); with ``--service``,
the service's own passes: the policy explains (a job it places or refuses directly is told why), and the passes ask
for no words where a job fits nowhere (``SchedulingSettings.explain_waits``; the same plan, less those words).

``--parts`` also prints where the cycles that started at most one job spent their time, part by part
(``tests/benchmarks/cycle_parts.py``); ``--without preemption,reservations`` turns those off
(``SchedulingSettings.preemption``, ``reserve_heads``), to see what the rest costs alone.

    python tests/benchmarks/bench_scheduling.py [--fast] [--explain | --service] [--pending N] [--cycles N]
        [--submissions N] [--parts] [--without preemption,reservations] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import sys
import time
import zlib
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement import (  # noqa: E402
    ClusterSnapshot,
    DurationEstimate,
    PendingJob,
    RunningJob,
    SchedulingSettings,
    apply_plan,
    load_cluster,
    online_policy,
    queues_from_dict,
    release,
    schedule,
)
from placement.model.snapshot import MILLI  # noqa: E402
from tests.benchmarks.bench_placement import JOBS_CSV, job_from_row  # noqa: E402
from tests.benchmarks.cycle_parts import CycleParts, parts_lines  # noqa: E402

QUEUES = ("team-a", "team-b", "team-c", "team-d")
ORDERS = ("fifo", "sjf", "priority", "fifo")
FILLED = 0.90


def queue_config(total_gpus: int) -> dict[str, object]:
    share = total_gpus // len(QUEUES)
    return {"cohorts": [{"name": "all"}],
            "queues": [{"name": name, "cohort": "all", "order": order, "quota": {"gpus": share}}
                       for name, order in zip(QUEUES, ORDERS, strict=True)]}


def pending_of(row: dict[str, str], submit_s: float) -> PendingJob:
    job = job_from_row(row)
    duration = job.duration_s if job.duration_s == job.duration_s else 600.0
    queue = QUEUES[zlib.crc32((row["user"] or "").encode()) % len(QUEUES)]
    return PendingJob(job, queue, submit_s, estimate=DurationEstimate(duration, 1.5 * duration))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="1,000 waiting, 30 cycles (CI)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--explain", action="store_true",
                      help="the policy explains failures, and every wait is worded (the service's dashboard view)")
    mode.add_argument("--service", action="store_true",
                      help="the policy explains failures, the waits of jobs that fit nowhere are not worded (the "
                           "service's passes)")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--submissions", type=int, default=50)
    parser.add_argument("--parts", action="store_true", help="time the cycles' parts (tests/benchmarks/cycle_parts.py)")
    parser.add_argument("--without", default="", help="comma-separated: preemption, reservations (head reservations)")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "scheduling.json")
    args = parser.parse_args()
    without = {w for w in args.without.split(",") if w}
    if without - set(WITHOUT):
        parser.error(f"--without: {', '.join(sorted(without - set(WITHOUT)))} unknown; known: {', '.join(WITHOUT)}")
    pending_count, cycles, submissions = (1_000, 30, 10) if args.fast else (args.pending, args.cycles,
                                                                            args.submissions)
    cluster = load_cluster("pai")
    queues = queues_from_dict(queue_config(cluster.total_gpus), cluster)
    explains = args.explain or args.service
    policy = online_policy("liquid", explain=explains)
    settings = SchedulingSettings(explain_waits=not args.service, **{WITHOUT[w]: False for w in without})
    with open(JOBS_CSV, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))

    snapshot, running, now, used = ClusterSnapshot.empty(cluster), dict[str, RunningJob](), 0.0, 0
    target = FILLED * cluster.total_gpus * MILLI
    started = time.perf_counter()
    while snapshot.gpu_milli_used.sum() < target and used < len(rows):
        batch = [pending_of(rows[used + k], now) for k in range(min(200, len(rows) - used))]
        used += len(batch)
        plan = schedule(snapshot, batch, list(running.values()), queues, now, policy, settings)
        snapshot = apply_plan(snapshot, plan)
        for preempted in plan.preemptions:  # set-up only fills the cluster: a preempted job is not resubmitted
            del running[preempted.job_id]
        for start in plan.starts:
            job = next(p for p in batch if p.job_id == start.job_id)
            running[job.job_id] = RunningJob(job.job, job.queue, now, estimate=job.estimate)
        now += 1.0
    pending = {p.job_id: p for p in (pending_of(rows[used + k], now) for k in range(pending_count))}
    spare = rows[used + pending_count:used + pending_count + submissions]
    del rows
    gc.collect()
    print(f"set-up: {len(running):,} running ({snapshot.gpu_milli_used.sum() / MILLI / cluster.total_gpus:.0%} "
          f"of GPUs) and {len(pending):,} waiting in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    cpu_ms, wall_ms, starts = [], [], []
    parts = CycleParts()
    for _ in range(cycles):
        ending = min(running.values(), key=lambda r: (r.started_s, r.job_id))
        snapshot = release(snapshot, ending.job_id)
        del running[ending.job_id]
        now += 10.0
        t_cpu, t_wall = time.thread_time(), time.perf_counter()
        with parts.timing() if args.parts else contextlib.nullcontext():
            plan = parts.cycle(partial(schedule, snapshot, list(pending.values()), list(running.values()), queues,
                                       now, policy, settings), lambda made: len(made.starts))
        print(f"cycle {len(cpu_ms) + 1}: {(time.perf_counter() - t_wall) * 1e3:,.0f} ms, {len(plan.starts)} started, "
              f"{len(plan.preemptions)} preempted, {len(plan.reservations)} reserved", file=sys.stderr, flush=True)
        cpu_ms.append((time.thread_time() - t_cpu) * 1e3)
        wall_ms.append((time.perf_counter() - t_wall) * 1e3)
        snapshot = apply_plan(snapshot, plan)
        for preempted in plan.preemptions:
            victim = running.pop(preempted.job_id)
            pending[victim.job_id] = PendingJob(victim.job, victim.queue, victim.started_s, victim.mode,
                                                victim.estimate)
        for start in plan.starts:
            job = pending.pop(start.job_id)
            running[job.job_id] = RunningJob(job.job, job.queue, now, start.mode, job.estimate)
        starts.append(len(plan.starts))
    submit_cpu_ms, submit_wall_ms = [], []
    for row in spare:
        now += 1.0
        submitted = pending_of(row, now)
        pending[submitted.job_id] = submitted
        t_cpu, t_wall = time.thread_time(), time.perf_counter()
        plan = schedule(snapshot, list(pending.values()), list(running.values()), queues, now, policy, settings)
        submit_cpu_ms.append((time.thread_time() - t_cpu) * 1e3)
        submit_wall_ms.append((time.perf_counter() - t_wall) * 1e3)
        snapshot = apply_plan(snapshot, plan)
        for preempted in plan.preemptions:
            victim = running.pop(preempted.job_id)
            pending[victim.job_id] = PendingJob(victim.job, victim.queue, victim.started_s, victim.mode,
                                                victim.estimate)
        for start in plan.starts:
            job = pending.pop(start.job_id)
            running[job.job_id] = RunningJob(job.job, job.queue, now, start.mode, job.estimate)

    figures = {"pending": pending_count, "cycles": cycles, "explain": explains, "explain_waits": not args.service,
               "without": sorted(without),
               "cycle_cpu_p50_ms": float(np.percentile(cpu_ms, 50)),
               "cycle_cpu_p99_ms": float(np.percentile(cpu_ms, 99)),
               "cycle_wall_p50_ms": float(np.percentile(wall_ms, 50)),
               "cycle_wall_p99_ms": float(np.percentile(wall_ms, 99)),
               "starts_per_cycle_mean": float(np.mean(starts)), "waiting_after": len(pending),
               **_placing_one(cpu_ms, starts),
               "submissions": len(submit_wall_ms)}
    if submit_wall_ms:
        figures |= {"submit_cycle_cpu_p50_ms": float(np.percentile(submit_cpu_ms, 50)),
                    "submit_cycle_wall_p50_ms": float(np.percentile(submit_wall_ms, 50)),
                    "submit_cycle_wall_p99_ms": float(np.percentile(submit_wall_ms, 99)),
                    "submissions_per_s": len(submit_wall_ms) / (sum(submit_wall_ms) / 1e3)}
    print(f"scheduling cycle, {pending_count:,} waiting, {cycles} cycles (one running job ends before each), policy "
          f"{MODES[(args.explain, args.service)]}{', without ' + ' and '.join(sorted(without)) if without else ''}: "
          f"CPU p50 {figures['cycle_cpu_p50_ms']:.1f} ms p99 {figures['cycle_cpu_p99_ms']:.1f} ms; wall p50 "
          f"{figures['cycle_wall_p50_ms']:.1f} ms p99 {figures['cycle_wall_p99_ms']:.1f} ms; "
          f"{figures['starts_per_cycle_mean']:.2f} jobs started per cycle; target p99 < 50 ms")
    if "one_start_cycles" in figures:
        print(f"cycles that placed at most one job ({figures['one_start_cycles']} of {cycles}; the target's): CPU p50 "
              f"{figures['one_start_cpu_p50_ms']:.1f} ms p99 {figures['one_start_cpu_p99_ms']:.1f} ms; the largest "
              f"cycle started {max(starts)} jobs")
    if submit_wall_ms:
        print(f"submissions, one cycle each, {len(submit_wall_ms)} submitted: cycle CPU p50 "
              f"{figures['submit_cycle_cpu_p50_ms']:.1f} ms, wall p50 {figures['submit_cycle_wall_p50_ms']:.1f} ms "
              f"p99 {figures['submit_cycle_wall_p99_ms']:.1f} ms; {figures['submissions_per_s']:.3g} submissions/s")
    if args.parts:
        count, summary = parts.summary()
        figures["parts_cycles"] = count
        figures["parts_ms"] = {name: ms for name, (ms, _) in summary.items()}
        print("\n".join(parts_lines(parts)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))


WITHOUT = {"preemption": "preemption", "reservations": "reserve_heads"}
"""``--without`` names and the settings they turn off."""
MODES = {(False, False): "without explanations", (True, False): "explaining, waits worded",
         (False, True): "explaining, waits of jobs that fit nowhere unworded (the service's passes)"}


def _placing_one(cpu_ms: list[float], starts: list[int]) -> dict[str, float]:
    """CPU p50 and p99 of the cycles that started at most one job (the target is for those: the first cycle after
    the 10,000 arrive starts every one of them that fits, hundreds, and sets the p99 of all cycles alone)."""
    one = np.asarray([ms for ms, n in zip(cpu_ms, starts, strict=True) if n <= 1])
    if not len(one):
        return {}
    return {"one_start_cycles": len(one), "one_start_cpu_p50_ms": float(np.percentile(one, 50)),
            "one_start_cpu_p99_ms": float(np.percentile(one, 99))}


if __name__ == "__main__":
    main()
