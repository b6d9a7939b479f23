"""``gpuplace simulate fill`` end to end on SYNTHETIC pod and node lists written by the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.service.test_cli import gpuplace

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time," \
             "scheduled_time\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = POD_HEADER + "".join(f"p{i},{2000 + 1000 * (i % 3)},8192,{n},{m},,LS,Running,0,10,0\n"
                            for i, (n, m) in enumerate([(1, 500), (1, 300), (1, 1000), (2, 1000), (0, 0), (1, 700)]))
NODES = NODE_HEADER + "".join(f"n{i},32000,131072,{g},T4\n" for i, g in enumerate([2, 2, 4, 8]))
"""SYNTHETIC: 6 pods (shares, whole GPUs, a CPU pod) and 4 nodes of 16 GPUs in all."""


def write_inputs(tmp_path: Path, pods: str = PODS, nodes: str = NODES) -> tuple[Path, Path]:
    pod_file, node_file = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pod_file.write_text(pods)
    node_file.write_text(nodes)
    return pod_file, node_file


def test_fill_json_has_the_issue_shape_and_writes_the_plot(tmp_path: Path) -> None:
    pods, nodes = write_inputs(tmp_path)
    out = tmp_path / "fill"
    result = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies",
                      "fgd,first-fit", "--seeds", "1-2", "--to", "1.2", "--out", str(out), "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"policies"} and set(report["policies"]) == {"fgd", "first-fit"}
    for summary in report["policies"].values():
        assert set(summary) == {"arrived_pct", "unallocated_pct", "decision_p99_ms"}
        assert summary["arrived_pct"] == [90, 100, 110, 120]
        assert len(summary["unallocated_pct"]) == 4
        assert all(0 <= v <= 100 for v in summary["unallocated_pct"]) and summary["decision_p99_ms"] >= 0
    assert json.loads((out / "fill.json").read_text()) == report
    assert (out / "fill.png").stat().st_size > 0
    # not on a terminal: progress as plain lines on stderr, one per run and a last one when done
    runs = [line for line in result.stderr.splitlines() if line.startswith("progress ")]
    assert any(line.endswith("filling: first-fit, seed 2 [3/4, 75%]") for line in runs), result.stderr
    assert runs[-1].endswith("filling: first-fit, seed 2: done [4/4, 100%]"), result.stderr


def test_fill_prints_a_table_without_json(tmp_path: Path) -> None:
    pods, nodes = write_inputs(tmp_path)
    result = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies", "balance",
                      "--seeds", "3", "--to", "1.0", "--out", str(tmp_path / "fill"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "balance" in result.stdout and "100% arrived" in result.stdout


@pytest.mark.parametrize(("pods", "nodes", "named"), [
    (POD_HEADER.replace("gpu_spec", "spec") + "p0,1000,1024,1,500,,LS,Running,0,10,0\n", NODES, "pods.csv, line 1"),
    (POD_HEADER + "p0,1000,1024,1,five,,LS,Running,0,10,0\n", NODES, "pods.csv, line 2, column 'gpu_milli'"),
    (PODS, NODE_HEADER + "n0,32000,131072,2,H200\n", "nodes.csv, line 2, column 'model'"),
])
def test_bad_files_get_one_line_naming_file_row_and_field(tmp_path: Path, pods: str, nodes: str, named: str) -> None:
    pod_file, node_file = write_inputs(tmp_path, pods, nodes)
    result = gpuplace("simulate", "fill", "--pods", str(pod_file), "--nodes", str(node_file), "--seeds", "1",
                      home=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and named in result.stderr.replace("\n", "")


def test_a_missing_pod_file_and_an_unknown_policy_are_named(tmp_path: Path) -> None:
    _, nodes = write_inputs(tmp_path)
    missing = gpuplace("simulate", "fill", "--pods", str(tmp_path / "none.csv"), "--nodes", str(nodes), home=tmp_path)
    assert missing.returncode == 2 and "none.csv: file not found" in missing.stderr.replace("\n", "")
    pods, _ = write_inputs(tmp_path)
    unknown = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies", "tetris",
                       home=tmp_path)
    assert unknown.returncode == 2 and "tetris" in unknown.stderr and "fgd" in unknown.stderr


def test_fill_runs_on_a_derived_workload_and_refuses_a_bad_variant(tmp_path: Path) -> None:
    pods, nodes = write_inputs(tmp_path)
    out = tmp_path / "derived"
    result = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies", "fgd,liquid",
                      "--seeds", "1", "--to", "1.1", "--derive", "types:0.5", "--out", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "derived types:0.5 (seed 0)" in result.stdout.replace("\n", "") and (out / "fill.json").is_file()
    bad = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--derive", "types:2",
                   home=tmp_path)
    assert bad.returncode == 2 and "KIND:SHARE" in bad.stderr.replace("\n", "")


def test_known_mix_fills_as_fill_does_with_the_whole_lists_shapes(tmp_path: Path) -> None:
    from placement import fill, load_cluster, load_openb_pods, summarise_fill
    from service.cli.fill_report import fill_json

    pods, nodes = write_inputs(tmp_path)
    result = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies", "fgd",
                      "--seeds", "1-3", "--to", "1.2", "--known-mix", "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    jobs, cluster = load_openb_pods(pods), load_cluster(nodes)
    shown = json.loads(result.stdout)["policies"]["fgd"]["unallocated_pct"]
    for known, equal in ((True, True), (False, False)):
        curves = [fill(cluster, jobs, "fgd", s, 1.2, known_mix=known) for s in (1, 2, 3)]
        assert (fill_json([summarise_fill(curves, 1.2)])["policies"]["fgd"]["unallocated_pct"] == shown) is equal
    assert (tmp_path / "simulations" / "fill-pods-known-mix-nodes" / "fill.json").is_file()


def test_fgd_ties_fill_with_fgds_own_rule_for_ties(tmp_path: Path) -> None:
    # the shipped (real) lists, where the rule for a CPU-only pod's ties changes the fill (FGD's own arrivals, seed 47)
    from placement import PlacementConfig, fill, load_cluster, load_openb_pods, summarise_fill
    from service.cli.fill_report import fill_json

    data = Path(__file__).resolve().parents[2] / "data" / "openb2023"
    pods, nodes = data / "openb_pod_list_default.csv", data / "openb_node_list_gpu_node.csv"
    result = gpuplace("simulate", "fill", "--pods", str(pods), "--nodes", str(nodes), "--policies", "fgd",
                      "--seeds", "47", "--to", "1.0", "--fgd-ties", "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    jobs, cluster = load_openb_pods(pods), load_cluster(nodes)
    shown = json.loads(result.stdout)["policies"]["fgd"]["unallocated_pct"]
    for config, equal in ((PlacementConfig(cpu_pods_to_fullest=False), True), (None, False)):
        curve = fill(cluster, jobs, "fgd", 47, 1.0, config)
        assert (fill_json([summarise_fill([curve], 1.0)])["policies"]["fgd"]["unallocated_pct"] == shown) is equal
    folder = tmp_path / "simulations" / "fill-openb_pod_list_default-fgd-ties-openb_node_list_gpu_node"
    assert (folder / "fill.json").is_file()
