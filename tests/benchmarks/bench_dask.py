"""Benchmark (not a timed test): a replay sweep in one process against the same sweep on 1 and 2 local Dask workers.

Sweeps real PAI jobs (the later part of the shipped job table, original arrival times) on the real 1,897-machine
PAI cluster with the measured runtime: every seed x queue x placement is one replay. The sweep runs in this
process, then on a ``LocalCluster`` of 1 worker process and of 2 (``training.dask_cluster``, ``local:N``), and
prints the wall time of each and the speed-ups, all measured in this run. A cluster's start-up (its workers
started and gpuplace's replay modules imported on each) is printed apart and not counted: a team's cluster is up
before its sweeps. Building each seed's jobs is counted (on Dask it is a task too). The numbers of every run must
be the same on all three; the script says whether they are.

    python tests/benchmarks/bench_dask.py [--jobs N] [--seeds 0-1] [--queues Q,..] [--placements P,..]
                                          [--workers 1,2] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.sim.fill import parse_seeds  # noqa: E402
from training.dask_cluster import connect  # noqa: E402
from training.performance.build import fit_speed_model  # noqa: E402
from training.replay.runners import OnDask  # noqa: E402
from training.replay.sweep import SweepSetup, grid, sweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seeds", default="0-1")
    parser.add_argument("--queues", default="fifo,sjf-group-gpu")
    parser.add_argument("--placements", default="liquid,first-fit")
    parser.add_argument("--workers", default="1,2", help="the local clusters to time, by worker processes")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "dask.json")
    args = parser.parse_args()
    runs = grid(["pai2020-jobs"], parse_seeds(args.seeds), args.queues.split(","), args.placements.split(","))
    setup = SweepSetup(cluster="pai", jobs=args.jobs, runtime="measured", network_term="measured")
    speed = fit_speed_model()  # once, outside every clock: each sweep is handed the same model

    start = time.perf_counter()
    serial = sweep(runs, setup, speed=speed)
    serial_s = time.perf_counter() - start
    figures: dict[str, Any] = {"runs": len(runs), "jobs": args.jobs, "cores": os.cpu_count(),
                               "serial_s": round(serial_s, 2), "workers": {}}
    print(f"{len(runs)} replays of {args.jobs:,} real PAI jobs on the PAI cluster (seeds {args.seeds}, queues "
          f"{args.queues}, placements {args.placements}); {os.cpu_count()} cores")
    print(f"  in this process: {serial_s:.1f} s")
    same = True
    for workers in (int(n) for n in args.workers.split(",")):
        started = time.perf_counter()
        with connect(f"local:{workers}") as client:
            client.run(importlib.import_module, "training.replay.sweep")
            startup_s = time.perf_counter() - started
            start = time.perf_counter()
            spread = sweep(runs, setup, OnDask(client), speed=speed)
            wall_s = time.perf_counter() - start
        same = same and spread == serial
        figures["workers"][str(workers)] = {"startup_s": round(startup_s, 2), "wall_s": round(wall_s, 2),
                                            "speedup": round(serial_s / wall_s, 2)}
        print(f"  on {workers} local worker process{'es' if workers > 1 else ''}: {wall_s:.1f} s, "
              f"speed-up {serial_s / wall_s:.2f}x (cluster start-up {startup_s:.1f} s, not counted)")
    figures["same_numbers"] = same
    print(f"same numbers for every run in every setting: {'yes' if same else 'NO'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
