"""The fill-to-capacity protocol and the pod-list reader, on SYNTHETIC pods and machines made up here."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.model.cluster import Machine, build_cluster
from placement.model.cluster_io import load_cluster
from placement.model.demand import Job, Role, Task
from placement.model.errors import PodListError
from placement.sim.fill import (
    arrival_order,
    arrivals,
    fill,
    job_milli,
    parse_seeds,
    reported_pcts,
    seed_draws,
    summarise_fill,
)
from placement.sim.pod_list import POD_COLUMNS, load_openb_pods

HEADER = ",".join(POD_COLUMNS) + "\n"


def pod(name: str, gpu: float, cpu_cores: float = 1.0) -> Job:
    return Job(name, (Task(Role.WORKER, 1, gpu=gpu, cpu_cores=cpu_cores, mem_gib=1.0, gpu_mem_gib=0.0),))


PODS = [pod("whole", 1), pod("half", 0.5), pod("cpu", 0), pod("two", 2)]
"""SYNTHETIC: 3.5 GPUs in all."""


@pytest.mark.parametrize("seed", [42, 43, 44])
def test_arrivals_are_every_pod_then_draws_until_the_next_would_pass_the_target(seed: int) -> None:
    # 4 GPUs x 1.3 = 5,200 milli-GPUs: the 4 pods (3,500), then draws until one's per-GPU share would pass 5,200
    # (the 2-GPU pod is checked by one GPU, as FGD's simulator checks it, and may pass it by the other)
    jobs = arrivals(PODS, 4000, 1.3, seed)
    assert sorted(job_milli(j) for j in jobs[:4]) == [0, 500, 1000, 2000]  # every pod once, in some order
    total = sum(job_milli(j) for j in jobs)
    before_last = total - job_milli(jobs[-1])
    assert 3500 <= before_last <= 5200 and total <= 5200 + 1000
    assert [j.job_id for j in jobs] == [str(k) for k in range(len(jobs))]
    assert arrivals(PODS, 4000, 1.3, seed) == jobs  # the seed fixes the sequence


def test_arrivals_stop_inside_the_pod_list_when_it_asks_for_more() -> None:
    # target 2 GPUs x 1.0 = 2,000 milli-GPUs: fewer than the 4 pods
    jobs = arrivals(PODS, 2000, 1.0, 42)
    assert sum(job_milli(j) for j in jobs) <= 2000 and len(jobs) < 4


def test_fill_records_unallocated_capacity_against_arrived_requests() -> None:
    # one machine of 2 GPUs, pods of one whole GPU, fill to 150%: 3 arrivals, the third does not fit
    cluster = build_cluster("synthetic", [Machine("m0", "T4", 2, 32, 128)])
    curve = fill(cluster, [pod("w", 1)], "first-fit", seed=1, to=1.5)
    assert curve.arrived_milli.tolist() == [1000, 2000, 3000]
    assert curve.allocated_milli.tolist() == [1000, 2000, 2000]
    # at 49% arrived nothing had arrived yet (100% free); at 50%: 1 GPU of 2; from 100%: none free
    assert curve.unallocated_pct_at([49, 50, 100, 150]).tolist() == [100.0, 50.0, 0.0, 0.0]
    summary = summarise_fill([curve, fill(cluster, [pod("w", 1)], "first-fit", seed=2, to=1.5)], 1.5)
    assert summary.arrived_pct == [90, 100, 110, 120, 130, 140, 150]
    assert summary.unallocated_pct[:2] == [50.0, 0.0] and summary.seeds == 2
    assert summary.decision_p99_ms >= 0


def test_reported_points_and_seeds() -> None:
    assert reported_pcts(1.3) == [90, 100, 110, 120, 130]
    assert reported_pcts(1.0) == [90, 100] and reported_pcts(0.5) == [50]
    assert parse_seeds("42-51") == list(range(42, 52)) and parse_seeds("1,5,9") == [1, 5, 9]
    with pytest.raises(ValueError, match="42-51"):
        parse_seeds("many")


def test_pod_list_reads_shares_whole_gpus_cpu_pods_and_types(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "p0,12000,16384,1,460,,LS,Running,0,10,0\n"
                    "p1,4000,8192,2,1000,V100M16|V100M32,LS,Running,0,10,0\n"
                    "p2,2000,1024,0,0,,BE,Pending,0,10,\n")
    jobs = load_openb_pods(path)
    share, whole, cpu = (j.tasks[0] for j in jobs)
    assert (share.gpu, share.cpu_cores, share.mem_gib) == (0.46, 12.0, 16.0)
    assert whole.gpu == 2.0 and whole.gpu_types == frozenset({"V100M16", "V100M32"})
    assert cpu.gpu == 0.0 and [j.job_id for j in jobs] == ["p0", "p1", "p2"]


@pytest.mark.parametrize(("text", "where"), [
    ("name,cpu\np0,1\n", "line 1"),  # not the openb header
    (HEADER + "p0,12000,16384,1,1200,,LS,Running,0,10,0\n", "line 2, column 'gpu_milli'"),
    (HEADER + "p0,lots,16384,1,500,,LS,Running,0,10,0\n", "line 2, column 'cpu_milli'"),
    (HEADER + "p0,1000,16384,2,500,,LS,Running,0,10,0\n", "line 2, column 'gpu_milli'"),  # 2 GPUs, shares
    (HEADER + "p0,1000,16384,1,500,H100,LS,Running,0,10,0\n", "line 2, column 'gpu_spec'"),
    (HEADER + "p0,1000,16384,1,500,,LS\n", "line 2"),  # too few fields
    (HEADER + "p0,1000,16384,0,0,,LS,Running,0,10,0\n", "no pod asks for a GPU"),
    (HEADER, "lists no pods"),
])
def test_bad_pod_lists_name_the_file_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(text)
    with pytest.raises(PodListError) as caught:
        load_openb_pods(path)
    assert str(caught.value).startswith(str(path)) and where in str(caught.value)


def test_a_missing_pod_list_is_named(tmp_path: Path) -> None:
    with pytest.raises(PodListError, match="file not found"):
        load_openb_pods(tmp_path / "absent.csv")


def test_a_seed_gives_the_pod_and_node_order_fgds_simulator_gives_for_it() -> None:
    # The shipped default openb list (real, 8,152 pods named in file order). Go 1.19 after rand.Seed(42) and one
    # rand.Int() shuffles range(8152) to [255, 1685, 6784, 4463, ...] (tests/placement/test_go_random.py), and
    # FGD's simulator shuffles the pods sorted by name exactly so; to 130% of the 6,212 GPUs it then adds draws.
    # Its nodes (the shipped GPU-node list, real) it names with prefixes from rand.Perm; its log for seed 42 gives
    # 0000-openb-node-0260, 0001-openb-node-0858, 0002-openb-node-0619, 0003-openb-node-0582, 0004-openb-node-0882.
    data = Path(__file__).resolve().parents[2] / "data" / "openb2023"
    pods = load_openb_pods(data / "openb_pod_list_default.csv")
    assert [p.job_id for p in pods] == sorted(p.job_id for p in pods)
    names = [m.name for m in load_cluster(data / "openb_node_list_gpu_node.csv").machines]
    drawn = seed_draws(pods, names, 6212 * 1000, 1.3, 42)
    order = drawn.arrivals
    assert order[:4] == [255, 1685, 6784, 4463] and order[8148:8152] == [357, 1701, 4923, 538]
    assert sorted(order[:8152]) == list(range(8152))  # every pod once, then draws
    assert order[8152:8154] == [3888, 5689] and len(order) == 8152 + 2714  # as many draws as the simulator's log
    total = sum(job_milli(pods[i]) for i in order)
    assert 1.3 * 6212 * 1000 - 8000 < total <= 1.3 * 6212 * 1000 + 7000
    assert [names[m] for m in drawn.machines[:5]] == ["openb-node-0260", "openb-node-0858", "openb-node-0619",
                                                      "openb-node-0582", "openb-node-0882"]
    assert sorted(drawn.machines) == list(range(len(names)))
    assert arrival_order(pods, 6212 * 1000, 1.3, 42) == order
