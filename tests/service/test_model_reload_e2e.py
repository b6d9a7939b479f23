"""Hot reload end to end: a real MLflow registry (SQLite store) with small models trained on the real
openb pods, a real uvicorn server, the alias moved while clients keep asking."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from models.registry import CHAMPION, ModelRegistry, default_uri
from tests.service.conftest import API_KEY, Askers, Server, server_env
from training.pipeline.train import train_and_register

SMALL = {"n_estimators": 30, "num_leaves": 15}
KEY = {"X-API-Key": API_KEY}
JOB = {"job_id": "reload-1", "user": "u1", "qos": "LS", "tasks": [{"gpu": 0.5, "cpu_cores": 4, "mem_gib": 16}]}


@pytest.mark.slow
def test_reload_swaps_versions_without_failing_requests_and_keeps_the_last_good(tmp_path: Path) -> None:
    registry = ModelRegistry(default_uri(tmp_path), "gpuplace-estimators", artifact_root=tmp_path / "mlartifacts")
    first = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=SMALL)
    second = train_and_register(registry, ["openb2023"], "lgbm", seed=2, params=SMALL)
    registry.set_alias(CHAMPION, first.version)
    server = Server(server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")).start()
    try:
        answer = httpx.post(f"{server.url}/v1/predict", json=JOB).json()
        assert answer["model_version"] == first.version and answer["duration_s"]["p50"] > 0
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"

        with Askers(server.url, JOB, clients=4) as askers:
            registry.set_alias(CHAMPION, second.version)
            reloaded = httpx.post(f"{server.url}/v1/models/reload", headers=KEY).json()
            after = httpx.post(f"{server.url}/v1/predict", json=JOB).json()
        assert reloaded["answering"] == second.version and after["model_version"] == second.version
        assert not askers.failures and askers.versions <= {first.version, second.version}

        # a version whose artifacts are gone cannot load: the last good one keeps answering
        third = train_and_register(registry, ["openb2023"], "lgbm", seed=3, params=SMALL)
        registry.set_alias(CHAMPION, third.version)
        where = registry.client.get_model_version_download_uri(registry.name, third.version)
        shutil.rmtree(Path(urlparse(where).path))
        kept = httpx.post(f"{server.url}/v1/models/reload", headers=KEY).json()
        assert kept["answering"] == second.version and kept["degraded"] and kept["last_error"]
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "degraded"
        assert httpx.post(f"{server.url}/v1/predict", json=JOB).json()["model_version"] == second.version
    finally:
        server.stop()
