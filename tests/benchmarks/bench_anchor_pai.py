"""Benchmark (not a timed test): gpuplace's replay beside the PAI trace's own simulator, on the same jobs.

The anchor is the simulator published with Alibaba's GPU trace (``cluster-trace-gpu-v2020/simulator`` in
the public repository alibaba/clusterdata), run unmodified from a checkout the user gives with ``--anchor``
(docs/placement.md, "Beside the PAI trace's simulator", says how to get it). Nothing of it is shipped.

Both replay exactly the same jobs with exactly the same inputs, in one process, gpuplace first:

* jobs: the first ``N`` of the later 30% of the shipped PAI job table (out of sample), each a job of its
  total GPUs and CPU cores; arrivals ``--rate`` per minute in trace order, in the anchor's batches (the k-th
  job arrives at ``(k // rate) x 60`` s: its own rule, written into its input so that it keeps them);
* estimates: gpuplace's causal SJU / SJG / SJGG means (``training.replay.trace_jobs``; a job without history
  takes the median of those before it, gpuplace's rule), written into the anchor's ``user_dur``,
  ``group_dur`` and ``group_gpu_dur`` columns, so that both order by the same numbers;
* the cluster: one node of G GPUs and 23.22 CPU cores per GPU (the anchor's ``-n 1`` big node).

Queues: FIFO, SJF on the true duration (oracle) and SJGG, each in gpuplace ``fluid`` (the node as one pool
of capacity, as the anchor counts it), gpuplace discrete (the node's GPUs as GPUs: a share of a GPU takes
room on one GPU, ``first-fit``) and the anchor. Printed per setting and queue: mean JCT of each and
gpuplace's difference from the anchor (target: within 2% for fluid), replay wall time and CPU time of each and
the anchor's time over gpuplace's (target: at least 10x). Replay time is the simulation itself: the anchor's
``simulator_go`` (its copy of the job list included), gpuplace's ``simulate``; set-up (reading the trace,
estimates) is timed apart. Both replays run in one thread, so CPU time counts the work each does, whatever
else the machine runs meanwhile (the anchor's replay of the big setting takes minutes, in which a shared
machine's load moves); wall time is printed beside it. ``--repeat N`` runs the three replays of each queue N
times in turns and prints the medians.

With ``sjf-model`` among the queues (a champion registered: ``gpuplace train``, ``gpuplace models promote``), the
champion's expected duration is written into the anchor's ``user_dur`` column and its SJU orders by it; the
benchmark then prints, per replay, how much closer to the oracle's mean JCT SJF on the model comes than SJGG.

    python tests/benchmarks/bench_anchor_pai.py --anchor DIR [--settings big:20619:6500,tight:5000:1000]
        [--rate 1000] [--queues fifo,sjf-oracle,sjf-group-gpu,sjf-model] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.scheduling.orders import CausalMedian  # noqa: E402
from placement.sim.engine import simulate  # noqa: E402
from placement.sim.jobs import SimJob  # noqa: E402
from placement.sim.metrics import summarise  # noqa: E402
from placement.sim.queues import queue_policy  # noqa: E402
from service.workdir import home  # noqa: E402
from training.replay.compare import CPU_PER_GPU, cluster_for, pai_jobs  # noqa: E402

ANCHOR_POLICY = {"sjf-oracle": 0, "sjf-user": 1, "sjf-model": 1, "sjf-group": 2, "sjf-group-gpu": 4, "fifo": 8}
"""gpuplace's queue name -> the anchor's ``alloc_policy`` (its utils.ALLOC_POLICY_DICT). The anchor orders SJU by
its ``user_dur`` column: for ``sjf-model`` the benchmark writes the champion's expected duration there."""
ESTIMATE_COLUMN = {"user": "user_dur", "group": "group_dur", "group-gpu": "group_gpu_dur"}


@dataclass(frozen=True)
class Setting:
    name: str
    jobs: int
    gpus: int


def settings_of(text: str) -> list[Setting]:
    found = []
    for part in text.split(","):
        name, jobs, gpus = part.split(":")
        found.append(Setting(name, int(jobs), int(gpus)))
    return found


def estimate_names(model: bool) -> tuple[str, str, str]:
    """The estimates written into the anchor's ``user_dur``, ``group_dur`` and ``group_gpu_dur`` columns (with
    ``model``, the champion's in place of the user estimate, the one the anchor's SJU reads)."""
    return ("model" if model else "user", "group", "group-gpu")


def same_inputs(jobs: list[SimJob], rate: float, model: bool) -> list[SimJob]:
    """The jobs as both replays get them: the anchor's arrival batches, estimates filled by gpuplace's rule."""
    names = estimate_names(model)
    fills = {name: CausalMedian() for name in names}
    found = []
    for k, job in enumerate(jobs):
        submit = float((k // int(rate)) * 60) if rate else float(round(job.submit_s))
        estimates = {name: fills[name](job.estimate(name)) for name in names}
        found.append(replace(job, submit_s=submit, estimates=MappingProxyType(estimates)))
    return found


def write_anchor_csv(jobs: list[SimJob], path: Path, model: bool) -> None:
    """The jobs in the anchor's input format (its ``traces/pai`` table); totals per job, exact floats."""
    names = estimate_names(model)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["job_id", "user", "num_gpu", "num_cpu", "num_pod", "duration", "job_name", "submit_time",
                      "group", "gpu_type", "wait_time", *ESTIMATE_COLUMN.values()])
        for job in jobs:
            task = job.job.tasks[0]
            out.writerow([int(job.job_id), job.user, repr(task.gpu * task.instances),
                          repr(task.cpu_cores * task.instances), task.instances, int(job.duration_s), "-",
                          int(job.submit_s), "-", "-", 0, *(repr(job.estimate(n)) for n in names)])


def champion_duration_model() -> Any:
    """The registered champion's duration estimator (``gpuplace train`` and ``gpuplace models promote`` first)."""
    from models.registry import CHAMPION
    from service.cli.models import registry

    found = registry()
    if found.alias_version(CHAMPION) is None:
        raise SystemExit("sjf-model needs a champion: run `gpuplace train` then `gpuplace models promote`")
    return found.load(CHAMPION)[1].targets["duration"].estimator


Timed = tuple[float, float, float, int]
"""A replay's mean JCT, its wall time, its CPU time (the thread's) and how many jobs finished."""


def run_gpuplace(setting: Setting, jobs: list[SimJob], queue: str, fluid: bool) -> Timed:
    cluster, _ = cluster_for("big-node", setting.gpus)
    start, cpu = time.perf_counter(), time.thread_time()
    result = simulate(cluster, jobs, "first-fit", queue_policy(queue), fluid=fluid)
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
    summary = summarise(result)
    return float(summary["jct_mean_s"]), wall, cpu, int(summary["finished"])


def run_anchor(simulator: Any, csv_path: Path, log: Path, setting: Setting, queue: str, jobs: int) -> Timed:
    """One run as the anchor's run_simulator.py makes it (one node, no spare node, pattern 0, seed 42), on
    arrivals already in the file (arrival rate -1: keep them)."""
    anchor = simulator.Simulator(
        csv_file=csv_path, alloc_policy=ANCHOR_POLICY[queue], preempt_policy=2, sort_node_policy=3, num_nodes=1,
        random_seed=42, max_time=int(1e9), num_spare_node=0, pattern=0, hetero=False, num_gpus=setting.gpus,
        num_cpus=round(CPU_PER_GPU * setting.gpus), describe_file=None, log_file=log, export_job_stats=False,
        export_cluster_util=False, arrival_rate=-1, num_jobs_limit=jobs, gpu_type_matching=0, verbose=0)
    start, cpu = time.perf_counter(), time.thread_time()
    done, mean_jct, _, _ = anchor.simulator_go(repeat=1)[0]
    return float(mean_jct), time.perf_counter() - start, time.thread_time() - cpu, int(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchor", type=Path, required=True,
                        help="the anchor's simulator folder (cluster-trace-gpu-v2020/simulator of a checkout)")
    parser.add_argument("--settings", default="big:20619:6500,tight:5000:1000",
                        help="comma-separated name:jobs:gpus")
    parser.add_argument("--rate", type=float, default=1000.0, help="arrivals per minute (0: trace times)")
    parser.add_argument("--queues", default="fifo,sjf-oracle,sjf-group-gpu")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each replay, in turns; the medians are printed")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "anchor_pai.json")
    args = parser.parse_args()
    queues = args.queues.split(",")
    unknown = [q for q in queues if q not in ANCHOR_POLICY]
    if unknown:
        parser.error(f"--queues: {', '.join(unknown)} not known to the anchor; known: {', '.join(ANCHOR_POLICY)}")
    with_model = "sjf-model" in queues
    if with_model and "sjf-user" in queues:
        parser.error("--queues: sjf-model and sjf-user both need the anchor's user_dur column; give one")
    if not (args.anchor / "simulator.py").is_file():
        parser.error(f"--anchor: no simulator.py in {args.anchor} (give cluster-trace-gpu-v2020/simulator)")
    sys.path.append(str(args.anchor.resolve()))
    import simulator  # type: ignore[import-not-found]  # the anchor's module, from --anchor

    scratch = Path(tempfile.mkdtemp(prefix="anchor-pai-"))
    logging.basicConfig(level=logging.WARNING, format="%(message)s", filename=scratch / "anchor.log", filemode="a")
    settings = settings_of(args.settings)
    start = time.perf_counter()
    every = pai_jobs(champion_duration_model() if with_model else None, False, max(s.jobs for s in settings), None,
                     cache=home() / "cache")
    setup_s = time.perf_counter() - start
    print(f"gpuplace set-up: {len(every):,} out-of-sample PAI jobs with causal estimates in {setup_s:.1f} s")
    rows: list[dict[str, Any]] = []
    for setting in settings:
        jobs = same_inputs(every[:setting.jobs], args.rate, with_model)
        csv_path = scratch / f"{setting.name}.csv"
        write_anchor_csv(jobs, csv_path, with_model)
        for queue in queues:
            runs = []
            for _ in range(args.repeat):  # in turns, so that a change of the machine's load meets all three
                runs.append((run_gpuplace(setting, jobs, queue, fluid=True),
                             run_gpuplace(setting, jobs, queue, fluid=False),
                             run_anchor(simulator, csv_path, scratch / "anchor.log", setting, queue, len(jobs))))
            fluid, discrete, anchor = (_median([r[k] for r in runs]) for k in range(3))
            row = {"setting": setting.name, "jobs": len(jobs), "gpus": setting.gpus, "queue": queue,
                   "anchor_jct_s": anchor[0], "fluid_jct_s": fluid[0], "discrete_jct_s": discrete[0],
                   "fluid_vs_anchor": fluid[0] / anchor[0] - 1, "discrete_vs_anchor": discrete[0] / anchor[0] - 1,
                   "anchor_s": anchor[1], "fluid_s": fluid[1], "discrete_s": discrete[1],
                   "anchor_cpu_s": anchor[2], "fluid_cpu_s": fluid[2], "discrete_cpu_s": discrete[2],
                   "speedup_fluid": anchor[1] / fluid[1], "speedup_discrete": anchor[1] / discrete[1],
                   "cpu_speedup_fluid": anchor[2] / fluid[2], "cpu_speedup_discrete": anchor[2] / discrete[2],
                   "finished": {"anchor": anchor[3], "fluid": fluid[3], "discrete": discrete[3]}}
            rows.append(row)
            print(f"{setting.name:>6} {len(jobs):>6,} jobs {setting.gpus:>5,} GPUs {queue:<14} mean JCT s: anchor "
                  f"{anchor[0]:>9,.0f}  fluid {fluid[0]:>9,.0f} ({row['fluid_vs_anchor']:+.2%})  discrete "
                  f"{discrete[0]:>9,.0f} ({row['discrete_vs_anchor']:+.2%}) | replay s (CPU s): anchor "
                  f"{anchor[1]:7.2f} ({anchor[2]:7.2f})  fluid {fluid[1]:6.2f} ({fluid[2]:6.2f}): "
                  f"{row['speedup_fluid']:5.1f}x ({row['cpu_speedup_fluid']:5.1f}x)  discrete {discrete[1]:6.2f} "
                  f"({discrete[2]:6.2f}): "
                  f"{row['speedup_discrete']:5.1f}x ({row['cpu_speedup_discrete']:5.1f}x)", flush=True)
    if with_model and {"sjf-oracle", "sjf-group-gpu"} <= set(queues):
        for setting in settings:
            by = {r["queue"]: r for r in rows if r["setting"] == setting.name}
            for replay in ("anchor", "fluid", "discrete"):
                oracle, sjgg, model = (by[q][f"{replay}_jct_s"] for q in ("sjf-oracle", "sjf-group-gpu", "sjf-model"))
                closer = 1 - (model - oracle) / (sjgg - oracle) if sjgg != oracle else math.nan
                print(f"{setting.name:>6} {replay:<8} SJF on the model {model - oracle:,.0f} s above the oracle's "
                      f"mean JCT, SJGG {sjgg - oracle:,.0f} s: {closer:.1%} closer (target 30%)")
    worst = max(abs(r["fluid_vs_anchor"]) for r in rows)
    slowest = min(min(r["speedup_fluid"], r["speedup_discrete"]) for r in rows)
    slowest_cpu = min(min(r["cpu_speedup_fluid"], r["cpu_speedup_discrete"]) for r in rows)
    print(f"fluid mean JCT within {worst:.2%} of the anchor's (target 2%); gpuplace replays at least {slowest:.1f}x "
          f"faster in wall time, {slowest_cpu:.1f}x in CPU time (target 10x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"setup_s": setup_s, "rate_per_min": args.rate, "runs": rows,
                                    "worst_fluid_gap": worst if math.isfinite(worst) else None,
                                    "least_speedup": slowest, "least_cpu_speedup": slowest_cpu}, indent=2))
    print(f"figures written to {args.out}")


def _median(runs: list[Timed]) -> Timed:
    """Per figure, the median over the runs (the mean JCT and the jobs finished are the same in each)."""
    return (runs[0][0], statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs), runs[0][3])


if __name__ == "__main__":
    main()
