"""The ``gpuplace`` command, run as a user runs it (a subprocess of the installed entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def gpuplace(*args: str, home: Path, cwd: Path | None = None,
             timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPLACE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or REPO, timeout=timeout_s)


def test_data_list_names_every_source(tmp_path: Path) -> None:
    out = gpuplace("data", "list", home=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("pai2020-jobs", "pai2020", "openb2023", "philly", "dlrm2025"):
        assert name in out.stdout


def test_data_describe_json_reports_rows_span_and_missing_shares(tmp_path: Path) -> None:
    out = gpuplace("data", "describe", "dlrm2025", "--json", home=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["rows"] == 23871
    # 7,280 of 23,871 instances existed before the trace started: no creation (submit) time
    assert report["missing_share"]["submit_time_s"] == pytest.approx(7280 / 23871)
    assert report["missing_share"]["req_net_gbps"] == 0.0


def test_cluster_describe_pai(tmp_path: Path) -> None:
    out = gpuplace("cluster", "describe", "pai", home=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "1,897" in out.stdout and "6,742" in out.stdout


def test_topology_round_trip_through_the_command_line(tmp_path: Path) -> None:
    dumped = gpuplace("cluster", "topology", "openb", "--rack-size", "32", home=tmp_path)
    assert dumped.returncode == 0, dumped.stderr
    path = tmp_path / "topology.yaml"
    path.write_text(dumped.stdout)
    out = gpuplace("cluster", "describe", "openb", "--topology", str(path), home=tmp_path)
    assert out.returncode == 0, out.stderr


def test_bad_input_exits_2_naming_file_and_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "synthetic_philly.csv"  # SYNTHETIC: one good row, then a negative duration
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n"
                   "2017-10-09 07:02:55,-3,1,66.0,a\n")
    out = gpuplace("data", "ingest", "philly", "--path", str(bad), "--out", str(tmp_path / "tables"), home=tmp_path)
    assert out.returncode == 2
    assert f"{bad}, line 3, column 'duration'" in out.stderr.replace("\n", "")
    assert not (tmp_path / "tables").exists() or not any((tmp_path / "tables").iterdir())


def test_malformed_topology_exits_2_naming_the_line(tmp_path: Path) -> None:
    topo = tmp_path / "topology.yaml"
    topo.write_text("domains:\n  - name: d0\n    racks:\n      - name: r0\n        machines: 7\n")
    out = gpuplace("cluster", "describe", "openb", "--topology", str(topo), home=tmp_path)
    assert out.returncode == 2
    assert "line 5" in out.stderr


def test_unknown_source_and_cluster_exit_2(tmp_path: Path) -> None:
    assert gpuplace("data", "describe", "nope", home=tmp_path).returncode == 2
    out = gpuplace("cluster", "describe", "nope", home=tmp_path)
    assert out.returncode == 2 and "pai" in out.stderr


@pytest.mark.slow
def test_quickstart_ingests_trains_serves_and_replays_then_reuses_the_model(tmp_path: Path) -> None:
    out = gpuplace("quickstart", "--jobs", "200", home=tmp_path, timeout_s=1800)  # trains: minutes when loaded
    assert out.returncode == 0, out.stderr
    written = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert written == sorted(f"{n}.parquet" for n in
                             ("pai2020-jobs", "openb2023", "openb2023-gpushare20", "philly", "dlrm2025"))
    assert "68,727" in out.stdout and "82,247" in out.stdout
    assert "trained lgbm version 1" in out.stdout and "promoted to champion" in out.stdout
    assert "200 real PAI jobs replayed through the REST API" in out.stdout and "/docs" in out.stdout
    completed = next(line for line in out.stdout.splitlines() if "completed (stored as feedback)" in line)
    assert "200" in completed
    # not a terminal: progress is plain lines on stderr (a rich bar would leave nothing in a log)
    progress = [line for line in out.stderr.splitlines() if line.startswith("progress ")]
    assert any("training" in line for line in progress) and any("replaying" in line for line in progress)

    again = gpuplace("quickstart", "--jobs", "50", home=tmp_path, timeout_s=1800)
    assert again.returncode == 0, again.stderr
    assert "champion version 1 (already trained" in again.stdout and "trained lgbm" not in again.stdout
    assert "50 real PAI jobs replayed" in again.stdout


def test_models_list_on_an_empty_registry_says_what_to_do(tmp_path: Path) -> None:
    out = gpuplace("models", "list", home=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no versions of gpuplace-estimators registered" in out.stdout and "gpuplace train" in out.stdout
