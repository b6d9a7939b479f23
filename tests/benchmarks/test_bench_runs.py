"""The benchmarks still run (a small, fast mode). Their figures are printed, never asserted on."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ingest_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    command = [sys.executable, "tests/benchmarks/bench_ingest.py", "--instances", "20000", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["instances"] == 20000
    assert figures["rows_per_s_load"] > 0 and figures["peak_rss_gib"] > 0
    assert "instance rows/s" in proc.stdout


@pytest.mark.slow
def test_predict_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "predict.json"
    command = [sys.executable, "tests/benchmarks/bench_predict.py", "--algo", "lgbm", "--fast", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["calls"] == 50 and figures["single_p99_ms"] > 0 and figures["batch_jobs_per_s"] > 0


@pytest.mark.slow
def test_placement_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "placement.json"
    command = [sys.executable, "tests/benchmarks/bench_placement.py", "--fast", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["online"]["arrivals"] == 100 and figures["batch"]["jobs"] == 40
    assert set(figures["batch"]["limits"]["0.5s"]) == {"ffd", "gga", "cpsat"}
    assert "liquid p99 / first-fit p99" in proc.stdout


@pytest.mark.slow
def test_simulation_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "simulate.json"
    command = [sys.executable, "tests/benchmarks/bench_sim.py", "--jobs", "500", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["jobs"] == 500 and figures["jobs_per_s"] > 0


@pytest.mark.slow
def test_service_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "service.json"
    command = [sys.executable, "tests/benchmarks/bench_service.py", "--fast", "--home", str(tmp_path / "home"),
               "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["model_version"] == "heuristic" and figures["database"] == "sqlite"
    for name in ("healthz", "predict", "place", "place_closed_loop"):
        assert figures[name]["requests"] > 0 and figures[name]["errors"] == 0
    assert figures["place"]["durable_placements_per_s"] > 0
    assert figures["place_closed_loop"]["durable_placements_per_s"] > 0


@pytest.mark.slow
def test_runtime_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    command = [sys.executable, "tests/benchmarks/bench_runtime.py", "--jobs", "300", "--rate", "600",
               "--policies", "liquid,balance", "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads((tmp_path / "runtime.json").read_text())
    assert {"pai", "big-node", "sharing", "holdout"} <= set(figures)
    assert set(figures["pai"]["liquid"]) == {"trace", "measured"}
    assert (tmp_path / "jct-pai.png").stat().st_size > 0
    assert "Hold-out errors" in proc.stdout


@pytest.mark.slow
def test_needs_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    command = [sys.executable, "tests/benchmarks/bench_needs.py", "--sample", "0.1", "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads((tmp_path / "needs.json").read_text())
    targets = {row["target"] for row in figures["errors"]}
    assert {"gpu_mem_peak_mib", "gpu_util_pct", "epoch_s", "epoch_ratio", "spread_slowdown"} <= targets
    assert 0 <= figures["right_sizing"]["unseen architectures"]["crash_share"] <= 1
    for name in ("needs-memory.png", "needs-epoch.png", "needs-spread.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "Held-out errors" in proc.stdout


@pytest.mark.slow
def test_stored_trace_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "stored.json"
    command = [sys.executable, "tests/benchmarks/bench_stored_trace.py", "--copies", "1,2", "--head", "3000",
               "--workers", "1", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    assert [(r["jobs"], r["path"]) for r in results] == [(3000, "in-process"), (3000, "stored"),
                                                         (6000, "in-process"), (6000, "stored")]
    assert all(r["peak_mib_above_imports"] >= 0 and 0 <= r["p90_coverage"] <= 1 for r in results)


def test_epoch_band_benchmark_runs_and_prints_each_variant() -> None:
    command = [sys.executable, "tests/benchmarks/bench_epoch_bands.py"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "all six workloads" in proc.stdout and proc.stdout.count("without ") == 6
    assert "jackknife+ coverage" in proc.stdout


@pytest.mark.slow
def test_dask_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "dask.json"
    command = [sys.executable, "tests/benchmarks/bench_dask.py", "--jobs", "200", "--seeds", "0", "--queues", "fifo",
               "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["runs"] == 2 and figures["jobs"] == 200 and figures["serial_s"] > 0
    assert set(figures["workers"]) == {"1", "2"} and figures["same_numbers"] is True
    assert "speed-up" in proc.stdout


@pytest.mark.slow
def test_comparing_with_a_commit_runs_both_sides() -> None:
    # this checkout against its own HEAD: the decisions of both sides are the same
    command = [sys.executable, "tests/benchmarks/compare_commits.py", "HEAD", "--bench", "placement", "--rounds", "1",
               "--", "--fast"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "round 1/1: head" in proc.stderr and "round 1/1: base" in proc.stderr
    placed = [line for line in proc.stdout.splitlines() if line.startswith("online.policies.liquid.placed")]
    assert len(placed) == 1 and placed[0].rstrip().endswith("same"), proc.stdout
    assert "online.policies.liquid.p99_ms" in proc.stdout


def test_fill_decision_benchmark_runs_and_writes_each_policy_and_seed(tmp_path: Path) -> None:
    out = tmp_path / "fill.json"
    command = [sys.executable, "tests/benchmarks/bench_fill_decisions.py", "--policies", "fgd", "--seeds", "42",
               "--to", "0.3", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [(r["policy"], r["seed"]) for r in runs] == [("first-fit", 42), ("fgd", 42)]
    assert runs[0]["p99_over_first_fit_p99"] == 1.0 and runs[1]["arrivals"] == runs[0]["arrivals"] > 0
    assert all(0 <= r["unallocated_pct_at_100"] <= 100 for r in runs)


@pytest.mark.slow
def test_scheduling_benchmark_times_the_cycles_parts(tmp_path: Path) -> None:
    out = tmp_path / "scheduling.json"
    command = [sys.executable, "tests/benchmarks/bench_scheduling.py", "--fast", "--parts", "--without", "preemption",
               "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["without"] == ["preemption"] and figures["parts_cycles"] > 0
    parts = figures["parts_ms"]
    assert parts["total"] > 0 and parts["walk"] > 0 and parts["begin"] > 0
    # the parts are the cycle's time cut up: they add up to it (each a sum of the same cycles' timings)
    assert sum(ms for name, ms in parts.items() if name != "total") == pytest.approx(parts["total"], rel=1e-6)
    assert "where a cycle that started at most one job spends its time" in proc.stdout
    assert "without preemption" in proc.stdout
    bad = subprocess.run([sys.executable, "tests/benchmarks/bench_scheduling.py", "--without", "quotas"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--without: quotas unknown" in bad.stderr


@pytest.mark.slow
def test_sjf_variant_benchmark_replays_every_variant_with_every_key(tmp_path: Path) -> None:
    out = tmp_path / "sjf.json"
    command = [sys.executable, "tests/benchmarks/bench_sjf_variants.py", "--fast", "--slices", "2", "--slice-jobs",
               "300", "--gpus", "64", "--rates", "300,3000", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    rows = figures["rows"]
    assert sorted((r["jobs_from"], r["rate_per_min"], r["replay"]) for r in rows) == sorted(
        (start, rate, replay) for start in (0, 300) for rate in (300.0, 3000.0) for replay in ("fluid", "discrete"))
    for row in rows:
        for key in ("lgbm", "rf", "blend"):
            gap = row["sjgg_jct_s"] - row["oracle_jct_s"]
            if gap == 0:  # nothing for a key to make up: no share of it
                assert math.isnan(row[f"{key}_closer"])
            else:
                assert row[f"{key}_closer"] == pytest.approx(1 - (row[f"{key}_jct_s"] - row["oracle_jct_s"]) / gap)
    assert set(figures["summaries"]) == {f"{r}.{k}" for r in ("fluid", "discrete") for k in ("lgbm", "rf", "blend")}
    assert "closer median" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="counting instructions needs valgrind")
def test_instruction_count_of_a_replay_runs_and_prints_both_sides() -> None:
    command = [sys.executable, "tests/benchmarks/count_replay.py", "HEAD", "--jobs", "200", "--gpus", "100"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    digests = re.findall(r"records ([0-9a-f]{16})", proc.stdout)
    assert len(digests) == 2 and digests[0] == digests[1]  # the same code decides the same
    assert "this checkout / HEAD:" in proc.stdout
