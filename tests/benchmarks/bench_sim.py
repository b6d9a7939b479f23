"""Benchmark (not a timed test): replay speed of real PAI jobs on the real 1,897-machine PAI cluster.

Replays the later part of the shipped PAI job table (real jobs, original arrival times, GPU types
kept) with FIFO and the ``liquid`` placement, and prints wall time and jobs/s. Target on 2 cores:
20,000 jobs in under 60 s.

    python tests/benchmarks/bench_sim.py [--jobs N] [--placement P] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.sim.engine import simulate  # noqa: E402
from placement.sim.metrics import summarise  # noqa: E402
from placement.sim.queues import queue_policy  # noqa: E402
from training.replay.compare import cluster_for, pai_jobs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--placement", default="liquid")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "simulate.json")
    args = parser.parse_args()
    cluster, constrain = cluster_for("pai")
    jobs = pai_jobs(None, constrain, args.jobs, None)
    start = time.perf_counter()
    result = simulate(cluster, jobs, args.placement, queue_policy("fifo"))
    wall = time.perf_counter() - start
    summary = summarise(result)
    figures = {"jobs": len(jobs), "machines": len(cluster), "placement": args.placement, "wall_s": round(wall, 2),
               "jobs_per_s": round(len(jobs) / wall), "decisions": summary["decisions"],
               "finished": summary["finished"], "target": "20,000 jobs in < 60 s"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    print(f"{figures['jobs']:,} real PAI jobs on {figures['machines']:,} machines with {args.placement}/fifo: "
          f"{figures['wall_s']} s, {figures['jobs_per_s']:,} jobs/s ({figures['decisions']:,} placement decisions; "
          f"target: 20,000 jobs in < 60 s)")
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
