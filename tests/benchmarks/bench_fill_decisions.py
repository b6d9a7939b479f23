"""Benchmark (not a timed test): how long online policies take per arrival in the FGD paper's fill experiment,
beside first fit in the same process, and what each leaves unallocated, seed by seed.

Pod list and nodes: the shipped openb lists (real); arrivals: ``placement.sim.fill.arrivals`` (FGD's
simulator's order for each seed). Per seed, each policy fills the cluster to ``--to`` x its GPUs, one policy
right after the other, on a heap frozen after loading (as the service settles its heap), so that a decision is
not charged for a collector pass over the pod list. Each decision is timed in wall-clock time, as
``gpuplace simulate fill`` reports it. Prints per policy and seed the median and p99 decision time, the
unallocated GPU capacity at 100% and 130% arrived, and each policy's p99 over first fit's p99 in the same run
(the issue's bound for ``fgd``: 3x).

    python tests/benchmarks/bench_fill_decisions.py [--pods CSV] [--nodes CSV] [--policies fgd,liquid]
        [--seeds 42,43] [--to 1.3] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.model.cluster_io import load_cluster  # noqa: E402
from placement.sim.fill import fill, parse_seeds  # noqa: E402
from placement.sim.pod_list import load_openb_pods  # noqa: E402

BASELINE = "first-fit"


def measure(pods_csv: Path, nodes_csv: Path, policies: list[str], seeds: list[int], to: float) -> dict[str, Any]:
    pods, cluster = load_openb_pods(pods_csv), load_cluster(nodes_csv)
    gc.collect()
    gc.freeze()
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        p99 = {}
        for name in [BASELINE, *policies]:
            curve = fill(cluster, pods, name, seed, to)
            ms = curve.decision_ms
            at_100, at_to = curve.unallocated_pct_at([100.0, to * 100]).tolist()
            p99[name] = float(np.percentile(ms, 99))
            runs.append({"policy": name, "seed": seed, "arrivals": len(ms),
                         "p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(p99[name], 3),
                         "unallocated_pct_at_100": round(at_100, 3),
                         f"unallocated_pct_at_{to * 100:g}": round(at_to, 3),
                         "p99_over_first_fit_p99": round(p99[name] / p99[BASELINE], 2)})
    return {"pods": str(pods_csv), "nodes": str(nodes_csv), "to": to, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=REPO / "data" / "openb2023" / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=REPO / "data" / "openb2023" / "openb_node_list_all_node.csv")
    parser.add_argument("--policies", default="fgd,liquid")
    parser.add_argument("--seeds", default="42,43")
    parser.add_argument("--to", type=float, default=1.3)
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "fill_decisions.json")
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p and p != BASELINE]
    result = measure(args.pods, args.nodes, policies, parse_seeds(args.seeds), args.to)
    for run in result["runs"]:
        print("  ".join(f"{k} {v}" for k, v in run.items()), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
