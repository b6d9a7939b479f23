"""Benchmark (not a timed test): what a placement costs a job, on real PAI jobs and real profiles.

Prints and writes (JSON, PNG):

1. the job-performance model's hold-out errors beside naive baselines (``training.performance.holdout``);
2. the workload-class mix the replayed jobs got (``training.performance.workload_class``);
3. per cluster (the real PAI cluster; the big node of the PAI trace's simulator) and online placement
   policy: mean JCT, p95 JCT and makespan under the ``trace`` and the ``measured`` runtime, and the
   GPU-hours lost to GPU type, spread and sharing. ``liquid`` uses the measured network term
   (``placement.online.spread_cost``); ``liquid-bandwidth`` is Liquid's bandwidth x distance cost (every PAI
   job's bandwidth is unknown, so it sees no network at all);
4. GPU sharing on against every job on whole GPUs (``measured``, liquid, the PAI cluster).

Jobs: the later 30% of the shipped PAI job table (20,619 jobs, out of sample), arriving in trace order at
``--rate`` jobs per minute. Default 60: the jobs then ask for 6,778 GPUs on average over their arrivals
(peak 11,046) against the cluster's 6,742, so jobs queue. At the trace's own times (5.6 per minute) the
cluster never queues, and at 20 per minute hardly.

    python tests/benchmarks/bench_runtime.py [--jobs N] [--rate R] [--policies P,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.model.speed import SpeedModel  # noqa: E402
from placement.sim.engine import simulate  # noqa: E402
from placement.sim.jobs import SimJob, without_sharing  # noqa: E402
from placement.sim.metrics import summarise  # noqa: E402
from placement.sim.queues import queue_policy  # noqa: E402
from training.performance.build import fit_speed_model  # noqa: E402
from training.performance.holdout import holdout, plot_errors, plot_measured_vs_predicted  # noqa: E402
from training.performance.workload_class import class_mix  # noqa: E402
from training.replay.compare import cluster_for, pai_jobs, placement_config, runtime_factory  # noqa: E402
from training.replay.plots import jct_by_runtime  # noqa: E402

COLUMNS = ("jct_mean_s", "jct_p95_s", "makespan_s", "gpu_allocation", "fragmentation", "gpu_hours",
           "lost_type_gpu_h", "lost_spread_gpu_h", "lost_share_gpu_h")


def replay(cluster_kind: str, jobs: list[SimJob], policy: str, runtime: str, speed: SpeedModel,
           gpus: int) -> dict[str, Any]:
    """One replay; ``liquid-bandwidth`` is liquid without the speed model in its configuration."""
    cluster, _ = cluster_for(cluster_kind, gpus)
    started = time.perf_counter()
    name, config = (("liquid", None) if policy == "liquid-bandwidth"
                    else (policy, placement_config("measured", speed)))
    result = simulate(cluster, jobs, name, queue_policy("fifo"), config, runtime=runtime_factory(runtime, speed))
    summary = summarise(result)
    figures = {k: summary.get(k) for k in COLUMNS} | {"wall_s": round(time.perf_counter() - started, 1),
                                                      "finished": summary["finished"]}
    print(f"  {cluster_kind:8} {policy:16} {runtime:8} mean JCT {figures['jct_mean_s']:>9,.0f} s  "
          f"p95 {figures['jct_p95_s']:>10,.0f} s  makespan {figures['makespan_s'] / 3600:>6,.1f} h  "
          f"GPU-h lost: type {figures['lost_type_gpu_h']:>9,.0f} spread {figures['lost_spread_gpu_h']:>8,.0f} "
          f"sharing {figures['lost_share_gpu_h']:>8,.0f}  ({figures['wall_s']} s)", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="first N out-of-sample jobs (default: all)")
    parser.add_argument("--rate", type=float, default=60.0, help="arrivals per minute, in trace order")
    parser.add_argument("--policies", default="liquid,liquid-bandwidth,first-fit,pack,balance,random")
    parser.add_argument("--clusters", default="pai,big-node")
    parser.add_argument("--runtimes", default="trace,measured")
    parser.add_argument("--big-node-gpus", type=int, default=6742, help="GPUs of the big node (PAI's count)")
    parser.add_argument("--class-seed", type=int, default=0, help="seed of the workload-class rule")
    parser.add_argument("--level-factor", default="1,2,4",
                        help="sync multiplier within a rack, across racks, across domains (an assumption)")
    parser.add_argument("--skip-holdout", action="store_true", help="replays only (for sensitivity runs)")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "runtime")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rack, across_racks, across_domains = (float(x) for x in args.level_factor.split(","))
    level_factor = (rack, across_racks, across_domains)
    figures: dict[str, Any] = {"rate_per_min": args.rate, "class_seed": args.class_seed,
                               "level_factor": level_factor}

    speed = fit_speed_model(level_factor=level_factor)
    if not args.skip_holdout:
        errors, points = holdout()
        plot_measured_vs_predicted(points, args.out / "holdout-measured-vs-predicted.png")
        plot_errors(errors, args.out / "holdout-errors.png")
        print("Hold-out errors of the job-performance model (real profiles), beside naive baselines:")
        print(errors.to_string(index=False))
        figures["holdout"] = errors.to_dict(orient="records")

    for cluster_kind in args.clusters.split(","):
        cluster, constrain = cluster_for(cluster_kind, args.big_node_gpus)
        jobs = pai_jobs(None, constrain, args.jobs, args.rate, class_seed=args.class_seed)
        mix = class_mix([j.workload_class for j in jobs], [j.job.gpus for j in jobs])
        figures.setdefault("class_mix_by_gpu", mix)
        print(f"\n{len(jobs):,} PAI jobs at {args.rate}/min on {cluster.name} ({cluster.total_gpus:,} GPUs); "
              "GPU share per class: " + ", ".join(f"{k} {v:.1%}" for k, v in mix.items()))
        runs = {p: {r: replay(cluster_kind, jobs, p, r, speed, args.big_node_gpus) for r in args.runtimes.split(",")}
                for p in args.policies.split(",")}
        figures[cluster_kind] = runs
        jct_by_runtime({p: {r: v["jct_mean_s"] for r, v in rs.items()} for p, rs in runs.items()},
                       args.out / f"jct-{cluster_kind}.png",
                       f"{len(jobs):,} PAI jobs at {args.rate}/min on {cluster.name}: mean JCT per policy")
        if cluster_kind == "pai":
            print("GPU sharing (liquid, measured runtime): on, and off (every share rounded up to a whole GPU)")
            on = runs.get("liquid", {}).get("measured") or replay(cluster_kind, jobs, "liquid", "measured", speed,
                                                                  args.big_node_gpus)
            off = replay(cluster_kind, without_sharing(jobs), "liquid", "measured", speed, args.big_node_gpus)
            figures["sharing"] = {"on": on, "off": off}
            gpus = cluster.total_gpus
            print(f"  sharing saves {off['gpu_hours'] - on['gpu_hours']:,.0f} GPU-hours of {off['gpu_hours']:,.0f} "
                  f"({1 - on['gpu_hours'] / off['gpu_hours']:.1%}); mean allocated GPUs "
                  f"{on['gpu_allocation'] * gpus:,.0f} on, {off['gpu_allocation'] * gpus:,.0f} off; "
                  f"mean JCT {on['jct_mean_s']:,.0f} s on, {off['jct_mean_s']:,.0f} s off")
    (args.out / "runtime.json").write_text(json.dumps(figures, indent=1))
    print(f"\nfigures and plots written to {args.out}")


if __name__ == "__main__":
    main()
