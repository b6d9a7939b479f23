"""``fgd`` against FGD's own simulator, decision for decision, on real pods and nodes (the shipped openb lists).

``fgd_seed47_decisions.csv.gz`` is the output of FGD's simulator (the public repository
hkust-adsl/kubernetes-scheduler-simulator, Apache-2.0, run as docs/placement.md describes: its FGD policy, seed
47, the default pod list on the GPU nodes, 130%): per arrival, the pod its log says it tried to create and the
node it says the pod was scheduled to (the name without the order prefix the simulator adds). It holds the first
4,882 arrivals: at arrival 4,882 (a CPU-only pod, 12.5 cores) two nodes add exactly no fragmentation, and FGD's
floating-point sums make one of them -3.4e-13 milli-GPUs (a score of 49, not 50), so its tie goes elsewhere;
``fgd`` sums integers and both score 50. From there the two clusters differ and so do later choices. FGD's rule
for ties is a setting (``PlacementConfig.cpu_pods_to_fullest=False``); ``fgd``'s own sends a CPU-only pod's ties to
the fullest machine.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

from placement.model.cluster_io import load_cluster
from placement.online.greedy import PlacementConfig
from placement.sim.fill import fill, seed_draws
from placement.sim.pod_list import load_openb_pods

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "data" / "openb2023"


def test_with_fgds_typical_shapes_and_ties_fgd_decides_as_fgds_simulator() -> None:
    # FGD's ties: a CPU-only pod's go to the first machine in cluster order too (by default to the fullest, which
    # puts arrival 157 elsewhere)
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    cluster = load_cluster(DATA / "openb_node_list_gpu_node.csv")
    with gzip.open(HERE / "fgd_seed47_decisions.csv.gz", "rt") as f:
        theirs = [(row["pod"], row["node"]) for row in csv.DictReader(f)]
    drawn = seed_draws(pods, [m.name for m in cluster.machines], cluster.total_gpus * 1000, 1.3, 47)
    curve = fill(cluster, pods, "fgd", 47, 1.3, PlacementConfig(cpu_pods_to_fullest=False), known_mix=True)
    ours = [(pods[i].job_id, cluster.machines[m].name if m >= 0 else "")
            for i, m in zip(drawn.arrivals, curve.machine.tolist(), strict=True)]
    assert len(theirs) == 4882
    first_difference = next((k for k, pair in enumerate(zip(ours[:len(theirs)], theirs, strict=True))
                             if pair[0] != pair[1]), None)
    assert first_difference is None, (first_difference, ours[first_difference or 0], theirs[first_difference or 0])


def test_learning_the_shapes_online_decides_otherwise() -> None:
    # what the known mix changes: the first arrival (one whole GPU, 3.15 cores) goes, with FGD's shapes, to a
    # one-GPU machine of 8 cores, whose GPU no shape asking for more cores could use (node 1140, as in FGD's log); a
    # policy that has seen only this pod finds every machine alike and takes the first in order (node 0926)
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    cluster = load_cluster(DATA / "openb_node_list_gpu_node.csv")
    with gzip.open(HERE / "fgd_seed47_decisions.csv.gz", "rt") as f:
        first = next(csv.DictReader(f))
    learned = fill(cluster, pods, "fgd", 47, 1.3)
    assert (first["pod"], first["node"]) == ("openb-pod-1915", "openb-node-1140")
    assert cluster.machines[int(learned.machine[0])].name == "openb-node-0926"
