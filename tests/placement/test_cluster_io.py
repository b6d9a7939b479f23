"""Loading machine files (real PAI / openb files and small bad files) into the cluster model."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.cluster_io import (
    CLUSTERS,
    DATA_DIR_ENV,
    data_dir,
    load_cluster,
    load_machine_file,
    load_openb_nodes,
    load_pai_machine_spec,
)
from placement.model.errors import ClusterSpecError
from placement.model.topology import default_topology

DATA = Path(__file__).resolve().parents[2] / "data"
PAI_SPEC = DATA / "pai2020" / "pai_machine_spec.csv"
OPENB_GPU = DATA / "openb2023" / "openb_node_list_gpu_node.csv"
OPENB_ALL = DATA / "openb2023" / "openb_node_list_all_node.csv"
OPENB_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"

OPENB_GPUS_BY_MODEL = {
    "A10": 2,
    "G2": 4392,
    "G3": 312,
    "P100": 265,
    "T4": 842,
    "V100M16": 195,
    "V100M32": 204,
}
OPENB_NODES_BY_MODEL = {"A10": 2, "G2": 549, "G3": 39, "P100": 134, "T4": 404, "V100M16": 55, "V100M32": 30}


@pytest.fixture(scope="module")
def pai() -> Cluster:
    return load_cluster("pai")


# --- the real shipped files ----------------------------------------------------------------------


def test_pai_spec_has_1897_machines_and_6742_gpus(pai: Cluster) -> None:
    assert len(pai) == 1897
    assert pai.total_gpus == 6742
    assert pai.machines_by_type() == {
        "CPU": 83,
        "MISC": 280,
        "P100": 798,
        "T4": 497,
        "V100": 104,
        "V100M32": 135,
    }
    assert pai.gpus_by_type() == {
        "MISC": 280 * 8,
        "P100": 798 * 2,
        "T4": 497 * 2,
        "V100": 104 * 8,
        "V100M32": 135 * 8,
    }


def test_pai_spec_values(pai: Cluster) -> None:
    first = pai.machines[0]  # first line of the shipped file: 7399a758eb02bae1a3621236,CPU,96,512,0
    assert first == Machine("7399a758eb02bae1a3621236", "CPU", 0, 96.0, 512.0, 0.0)
    v100m32 = next(m for m in pai.machines if m.gpu_type == "V100M32")
    assert (v100m32.gpus, v100m32.gpu_mem_gib, v100m32.total_gpu_mem_gib) == (8, 32.0, 256.0)


@pytest.mark.parametrize(
    ("path", "nodes", "cpu_only"),
    [(OPENB_GPU, 1213, 0), (OPENB_ALL, 1523, 310)],
)
def test_openb_node_lists(path: Path, nodes: int, cpu_only: int) -> None:
    machines = load_openb_nodes(path)
    cluster = build_cluster("openb", machines)
    assert len(cluster) == nodes
    assert cluster.gpus_by_type() == OPENB_GPUS_BY_MODEL
    assert cluster.total_gpus == sum(OPENB_GPUS_BY_MODEL.values())
    expected_nodes = dict(OPENB_NODES_BY_MODEL, **({"CPU": cpu_only} if cpu_only else {}))
    assert cluster.machines_by_type() == dict(sorted(expected_nodes.items()))


def test_openb_units() -> None:
    first = load_openb_nodes(OPENB_GPU)[0]  # openb-node-0000,64000,262144,2,P100
    assert first == Machine("openb-node-0000", "P100", 2, 64.0, 256.0, 16.0)


@pytest.mark.parametrize(
    ("name", "machines", "gpus"), [("pai", 1897, 6742), ("openb", 1213, 6212), ("openb-all", 1523, 6212)]
)
def test_load_cluster_by_name(name: str, machines: int, gpus: int) -> None:
    cluster = load_cluster(name)
    assert (cluster.name, len(cluster), cluster.total_gpus) == (name, machines, gpus)
    assert name in CLUSTERS and CLUSTERS[name].description


def test_load_cluster_by_path_sniffs_the_format() -> None:
    assert len(load_cluster(OPENB_ALL)) == 1523
    assert load_cluster(str(PAI_SPEC)).name == "pai_machine_spec"
    assert load_machine_file(OPENB_GPU) == load_openb_nodes(OPENB_GPU)


def test_unknown_cluster_name_lists_known_names() -> None:
    with pytest.raises(ClusterSpecError) as info:
        load_cluster("no-such-cluster")
    assert all(name in str(info.value) for name in ("pai", "openb", "openb-all"))


def test_data_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SYNTHETIC: a two-machine PAI spec standing in for the shipped one.
    (tmp_path / "pai2020").mkdir()
    (tmp_path / "pai2020" / "pai_machine_spec.csv").write_text("a,T4,8,32,2\nb,CPU,4,16,0\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert data_dir() == tmp_path
    cluster = load_cluster("pai")
    assert (len(cluster), cluster.total_gpus) == (2, 2)


def test_load_cluster_with_topology_file(tmp_path: Path) -> None:
    # SYNTHETIC: a three-machine cluster and its hand-written topology.
    spec = tmp_path / "spec.csv"
    spec.write_text("a,T4,8,32,2\nb,T4,8,32,2\nc,CPU,4,16,0\n")
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "domains:\n  - name: d\n    racks:\n      - name: r1\n        machines: [a, c]\n"
        "      - name: r2\n        machines: [b]\n"
    )
    cluster = load_cluster(spec, topology_path=topology)
    assert cluster.topology.racks == ("r1", "r2")
    assert cluster.topology.distance("a", "c") == 1
    assert cluster.topology.distance("a", "b") == 2


def test_capacity_arrays(pai: Cluster) -> None:
    arrays = pai.capacity_arrays()
    assert arrays is pai.capacity_arrays()
    assert arrays.names == tuple(m.name for m in pai.machines)
    assert int(arrays.gpus.sum()) == 6742
    assert arrays.gpus.dtype == np.int64 and arrays.mem_gib.dtype == np.float64
    assert not arrays.gpus.flags.writeable
    i = pai.index["6265a99de1a50cc6f1b03602"]
    assert arrays.racks[arrays.rack_index[i]] == pai.topology.rack_of("6265a99de1a50cc6f1b03602")
    assert arrays.domains[arrays.domain_index[i]] == pai.topology.domain_of("6265a99de1a50cc6f1b03602")
    assert arrays.gpu_types[arrays.gpu_type_index[i]] == "CPU"
    assert pai.machine("6265a99de1a50cc6f1b03602").cpu_cores == arrays.cpu_cores[i]


# --- bad input -----------------------------------------------------------------------------------
# SYNTHETIC file contents below: each is a small made-up file with one fault.

PAI_BAD = [
    ("a,T4,8,32,2\nb,T4,8,32\n", 2, None, "expected 5 fields"),
    ("a,T4,8,32,2\nb,T4,8,32,2,9\n", 2, None, "expected 5 fields"),
    ("a,T4,8,32,x\n", 1, "cap_gpu", "cap_gpu is not a number (got 'x')"),
    ("a,T4,eight,32,2\n", 1, "cap_cpu", "cap_cpu is not a number"),
    ("a,T4,8,-32,2\n", 1, "cap_mem", "cap_mem is negative (got '-32')"),
    ("a,T4,8,nan,2\n", 1, "cap_mem", "not a finite number"),
    ("a,T4,inf,32,2\n", 1, "cap_cpu", "not a finite number"),
    ("a,T4,8,32,2.5\n", 1, "cap_gpu", "not a whole number"),
    ("a,T4,8,32,2\n\nb,H100,8,32,2\n", 3, "gpu_type", "unknown GPU type"),
    ("a,V100,8,32,0\n", 1, "cap_gpu", "needs at least one GPU"),
    ("a,CPU,8,32,2\n", 1, "cap_gpu", "CPU-only machine"),
    ("a,T4,8,32,2\nb,T4,8,32,2\na,T4,8,32,2\n", 3, "machine", "duplicate machine name (first on line 1)"),
    (",T4,8,32,2\n", 1, "machine", "machine name is empty"),
]


@pytest.mark.parametrize(("content", "line", "column", "message"), PAI_BAD)
def test_bad_pai_spec(tmp_path: Path, content: str, line: int, column: str | None, message: str) -> None:
    path = tmp_path / "spec.csv"
    path.write_text(content)
    with pytest.raises(ClusterSpecError) as info:
        load_pai_machine_spec(path)
    error = info.value
    assert (error.path, error.line, error.column) == (str(path), line, column)
    assert message in str(error)
    assert str(error).startswith(f"{path}, line {line}")


OPENB_BAD = [
    ("sn,cpu,memory_mib,gpu,model\n", 1, None, "expected the header"),
    ("", 1, None, "expected the header"),
    (OPENB_HEADER + "n0,64000,262144,2,P100\nn1,64000,262144,2,\n", 3, "model", "needs a model"),
    (OPENB_HEADER + "n0,64000,262144,0,P100\n", 2, "gpu", "needs at least one GPU"),
    (OPENB_HEADER + "n0,lots,262144,2,P100\n", 2, "cpu_milli", "cpu_milli is not a number (got 'lots')"),
    (OPENB_HEADER + "n0,64000,262144,2,H100\n", 2, "model", "unknown GPU type"),
    (OPENB_HEADER + "n0,64000,262144,2,P100\nn0,64000,262144,0,\n", 3, "sn", "first on line 2"),
    (OPENB_HEADER + "n0,64000,262144,2\n", 2, None, "expected 5 fields"),
]


@pytest.mark.parametrize(("content", "line", "column", "message"), OPENB_BAD)
def test_bad_openb_nodes(tmp_path: Path, content: str, line: int, column: str | None, message: str) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(content)
    with pytest.raises(ClusterSpecError) as info:
        load_openb_nodes(path)
    assert (info.value.line, info.value.column) == (line, column)
    assert message in str(info.value)


@pytest.mark.parametrize("loader", [load_pai_machine_spec, load_openb_nodes, load_machine_file])
def test_missing_file(tmp_path: Path, loader: Callable[[Path], tuple[Machine, ...]]) -> None:
    with pytest.raises(ClusterSpecError, match="file not found") as info:
        loader(tmp_path / "nope.csv")
    assert info.value.line is None


def test_error_text_format() -> None:
    error = ClusterSpecError("spec.csv", "cap_gpu is not a number", 12, "cap_gpu", "x")
    assert str(error) == "spec.csv, line 12, column 'cap_gpu': cap_gpu is not a number (got 'x')"
    assert str(ClusterSpecError("spec.csv", "file not found")) == "spec.csv: file not found"


# --- the model's own checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "T4", 2, 8.0, 32.0), "needs a name"),
        (("a", "T4", 0, 8.0, 32.0), "with 0 GPUs"),
        (("a", "CPU", 2, 8.0, 32.0), "with 2 GPUs"),
        (("a", "T4", -1, 8.0, 32.0), "whole number"),
        (("a", "T4", 2, -8.0, 32.0), "cpu_cores"),
        (("a", "T4", 2, 8.0, math.inf), "mem_gib"),
        (("a", "H100", 8, 8.0, 32.0), "unknown GPU type"),
    ],
)
def test_machine_rejects(args: tuple[str, str, int, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Machine(*args)


def test_machine_gpu_memory_default_and_override() -> None:
    assert Machine("a", "V100M32", 8, 96.0, 512.0).gpu_mem_gib == 32.0
    assert Machine("a", "CPU", 0, 96.0, 512.0).gpu_mem_gib == 0.0
    assert Machine("a", "MISC", 8, 96.0, 512.0, gpu_mem_gib=12.0).gpu_mem_gib == 12.0
    assert Machine("a", "H100", 8, 96.0, 512.0, gpu_mem_gib=80.0).total_gpu_mem_gib == 640.0


def test_cluster_rejects_duplicates_and_mismatched_topology() -> None:
    a, b = Machine("a", "T4", 2, 8.0, 32.0), Machine("b", "T4", 2, 8.0, 32.0)
    with pytest.raises(ValueError, match="duplicate machine names"):
        Cluster("c", (a, a), default_topology([a]))
    with pytest.raises(ValueError, match="does not match"):
        Cluster("c", (a, b), default_topology([a]))
