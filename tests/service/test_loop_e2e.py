"""The loop end to end: jobs placed and completed through a real server become feedback rows;
``gpuplace retrain`` trains a challenger on the real openb trace plus that feedback, the gate promotes
it over a deliberately weak champion, and the server, polling the registry, answers with the new
version while clients keep asking. A second retrain on unchanged data trains nothing; the drift report
judges the completed jobs' estimates."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from models.registry import CHALLENGER, CHAMPION, ModelRegistry, default_uri
from tests.service.conftest import API_KEY, REPO, Askers, Server, cache_rows, server_env
from training.pipeline.train import train_and_register

WEAK = {"n_estimators": 1, "num_leaves": 2, "min_child_samples": 500}
KEY = {"X-API-Key": API_KEY}
QOS = ("LS", "BE", "Burstable", "Guaranteed")


def job(i: int) -> dict[str, object]:
    return {"job_id": f"loop-{i}", "qos": QOS[i % len(QOS)],
            "tasks": [{"gpu": 0.5 if i % 3 else 1.0, "cpu_cores": 4 + i % 8, "mem_gib": 16}]}


@pytest.mark.slow
def test_complete_retrain_promote_hot_reload(tmp_path: Path) -> None:
    registry = ModelRegistry(default_uri(tmp_path), "gpuplace-estimators", artifact_root=tmp_path / "mlartifacts")
    weak = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=WEAK)
    registry.set_alias(CHAMPION, weak.version)
    database = f"sqlite:///{tmp_path / 'state.db'}"
    env = server_env(tmp_path, database, GPUPLACE_MODEL_POLL_S="1")
    server = Server(env).start()
    try:
        covered = 0
        for i in range(60):
            placed = httpx.post(f"{server.url}/v1/place", json=job(i), headers=KEY).json()
            assert placed["committed"] and placed["estimate"]["model_version"] == weak.version
            done = httpx.post(f"{server.url}/v1/jobs/loop-{i}/complete", headers=KEY,
                              json={"duration_s": 600.0 * (1 + i % 5), "usage": {"gpu": 0.3, "cpu_cores": 2.0}})
            assert done.status_code == 200, done.text
            covered += 600.0 * (1 + i % 5) <= placed["estimate"]["duration_s"]["p90"]
        metrics = httpx.get(f"{server.url}/metrics").text
        duration = (("target", "duration"),)
        error = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(metrics)
                 for s in f.samples if s.name.startswith("gpuplace_prediction_")}
        assert error.get(("gpuplace_prediction_p90_checks_total", (("covered", "true"), *duration)), 0) == covered
        assert error.get(("gpuplace_prediction_p90_checks_total", (("covered", "false"), *duration)), 0) == 60 - covered
        assert error[("gpuplace_prediction_log_error_count", duration)] == 60
        assert error[("gpuplace_prediction_p90_coverage", duration)] == pytest.approx(covered / 60)
        assert error[("gpuplace_prediction_p90_coverage_jobs", duration)] == 60
        hits, misses = cache_rows(metrics, weak.version)
        rows_per_job = (hits + misses) // 60  # one per target
        distinct = len({json.dumps({**job(i), "job_id": ""}) for i in range(60)})
        assert rows_per_job >= 1 and hits + misses == 60 * rows_per_job
        assert 0 < misses <= distinct * rows_per_job < 60 * rows_per_job  # repeated descriptions hit the cache

        command = [sys.executable, "-m", "service.cli", "retrain", "--source", "openb2023", "--algo", "lgbm"]
        with Askers(server.url, job(0), clients=2) as askers:
            first = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            assert first.returncode == 0, first.stderr
            assert "60 feedback rows" in first.stdout and "promoted" in first.stdout, first.stdout
            new = registry.alias_version(CHAMPION)
            assert new is not None and new != weak.version and registry.alias_version(CHALLENGER) == new
            assert registry.run_info(new).params["feedback_rows"] == "60"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and new not in askers.versions:
                time.sleep(0.5)
        assert not askers.failures and new in askers.versions and askers.versions <= {weak.version, new}
        assert httpx.get(f"{server.url}/v1/models").json()["answering"] == new

        count = len(registry.versions())
        again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr
        assert "nothing trained" in again.stdout and len(registry.versions()) == count

        out = tmp_path / "drift"
        report = subprocess.run([sys.executable, "-m", "service.cli", "models", "drift", "--out", str(out)],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert report.returncode == 0, report.stderr
        targets = json.loads((out / "drift.json").read_text())["targets"]
        duration = targets[f"duration@{weak.version}"]
        assert duration["jobs"] == 60 and duration["train_male"] > 0 and duration["recent_male"] > 0
        assert (out / "drift.png").stat().st_size > 0
    finally:
        server.stop()

