"""Faults of the model registry end to end, with a real MLflow registry and a real server process: a champion
that loads but cannot predict is refused and the last good model keeps answering; a tracking server that is
down at start-up holds up neither start-up nor reloads, is named as what failed, and the model loads in
the background once it is back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import mlflow
import numpy as np
import pytest

from models.registry import CHAMPION, ModelRegistry, default_uri
from tests.service.conftest import API_KEY, Askers, Server, free_port, server_env
from training.pipeline.train import train_and_register

SMALL = {"n_estimators": 30, "num_leaves": 15}
KEY = {"X-API-Key": API_KEY}
JOB = {"job_id": "fault-1", "user": "u1", "qos": "LS", "tasks": [{"gpu": 0.5, "cpu_cores": 4, "mem_gib": 16}]}


@dataclass(frozen=True)
class Versions:
    """A registry (SQLite store in ``home``) with a good version and two that load but answer wrongly."""

    home: Path
    registry: ModelRegistry
    good: str
    raising: str
    """Every prediction raises (IndexError)."""
    nan: str
    """Every P90 is NaN."""


def _register_broken(registry: ModelRegistry, bundle: Any, attribute: str, broken: Callable[[Any], Any]) -> str:
    """``bundle`` registered as a new version with ``attribute`` of its first target's estimator replaced by
    ``broken(old value)``: it loads as a valid bundle and fails only when asked."""
    estimator = next(iter(bundle.targets.values())).estimator
    kept = getattr(estimator, attribute)
    setattr(estimator, attribute, broken(kept))
    try:
        with mlflow.start_run(experiment_id=registry.experiment_id()):
            info = mlflow.pyfunc.log_model(name="bundle", python_model=bundle, registered_model_name=registry.name)
    finally:
        setattr(estimator, attribute, kept)
    return str(info.registered_model_version)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Versions:
    home = tmp_path_factory.mktemp("registry")
    registry = ModelRegistry(default_uri(home), "gpuplace-estimators", artifact_root=home / "mlartifacts")
    good = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=SMALL).version
    _, bundle = registry.load(good)
    raising = _register_broken(registry, bundle, "baseline_index_", lambda _: 10**6)
    nan = _register_broken(registry, bundle, "offsets_", lambda offsets: np.full_like(offsets, np.nan))
    return Versions(home, registry, good, raising, nan)


@pytest.mark.slow
def test_a_champion_that_cannot_predict_is_refused_and_the_last_good_keeps_answering(
        versions: Versions, tmp_path: Path) -> None:
    registry = versions.registry
    registry.set_alias(CHAMPION, versions.good)
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}", GPUPLACE_MLFLOW_URI=default_uri(versions.home))
    server = Server(env).start()
    try:
        assert httpx.post(f"{server.url}/v1/predict", json=JOB).json()["model_version"] == versions.good
        for broken, why in ((versions.raising, "raised IndexError"), (versions.nan, "not a finite")):
            registry.set_alias(CHAMPION, broken)
            with Askers(server.url, JOB, clients=2) as askers:
                reloaded = httpx.post(f"{server.url}/v1/models/reload", headers=KEY, timeout=60).json()
            assert reloaded["answering"] == versions.good and reloaded["degraded"], reloaded
            refusal = reloaded["last_error"]
            assert f"version {broken} of 'champion' refused" in refusal and why in refusal, refusal
            assert not askers.failures and askers.versions <= {versions.good}

            ready = httpx.get(f"{server.url}/readyz").json()
            assert ready["status"] == "degraded" and ready["model_version"] == versions.good, ready
            assert ready["model_error"] == refusal
            models = httpx.get(f"{server.url}/v1/models").json()
            assert models["last_error"] == refusal and models["refused"] == reloaded["refused"]
            assert reloaded["refused"]["version"] == broken and why in reloaded["refused"]["reason"]
            predicted = httpx.post(f"{server.url}/v1/predict", json=JOB)
            assert predicted.status_code == 200 and predicted.json()["model_version"] == versions.good
            assert predicted.json()["duration_s"]["p90"] > 0
            placed = httpx.post(f"{server.url}/v1/place", json={**JOB, "dry_run": True}, headers=KEY)
            assert placed.status_code == 200 and placed.json()["estimate"]["model_version"] == versions.good

        registry.set_alias(CHAMPION, versions.good)  # the alias moves back: nothing to load, nothing wrong
        back = httpx.post(f"{server.url}/v1/models/reload", headers=KEY, timeout=60).json()
        assert back["answering"] == versions.good and not back["degraded"] and back["last_error"] is None
        assert back["refused"] is None
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"
    finally:
        server.stop()


@dataclass
class TrackingServer:
    """A real MLflow tracking server on the registry of ``versions``, at ``url``, once ``start`` is called;
    until then nothing listens there."""

    versions: Versions
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", default_uri(self.versions.home)],
            cwd=self.versions.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.process is not None:  # the server and the workers it spawned: a session of its own
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.fixture
def tracking_server(versions: Versions) -> Iterator[TrackingServer]:
    tracking = TrackingServer(versions)
    yield tracking
    tracking.stop()


@pytest.mark.slow
def test_a_registry_down_at_start_holds_up_nothing_is_named_and_the_model_loads_once_it_is_back(
        versions: Versions, tracking_server: TrackingServer, tmp_path: Path) -> None:
    url = tracking_server.url
    versions.registry.set_alias(CHAMPION, versions.good)
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}", GPUPLACE_MLFLOW_URI=url)
    server = Server(env).start(timeout_s=30)  # before: about 260 s while MLflow's client retried
    try:
        ready = httpx.get(f"{server.url}/readyz").json()
        assert ready["status"] == "degraded" and ready["model_version"] == "heuristic", ready
        assert f"model registry at {url} unreachable" in ready["model_error"], ready
        assert "Connection refused" in ready["model_error"] and "no model carries" not in ready["model_error"]
        predicted = httpx.post(f"{server.url}/v1/predict", json=JOB)
        assert predicted.status_code == 200 and predicted.json()["model_version"] == "heuristic"

        asked = time.monotonic()
        reloaded = httpx.post(f"{server.url}/v1/models/reload", headers=KEY, timeout=300).json()
        assert time.monotonic() - asked < 30  # before: about 250 s
        assert reloaded["answering"] == "heuristic" and reloaded["degraded"]
        assert f"model registry at {url} unreachable" in reloaded["last_error"], reloaded

        tracking_server.start()  # polling is off (GPUPLACE_MODEL_POLL_S=0): the start-up load keeps retrying
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if httpx.get(f"{server.url}/v1/models").json()["answering"] == versions.good:
                break
            time.sleep(0.5)
        models = httpx.get(f"{server.url}/v1/models").json()
        assert models["answering"] == versions.good and not models["degraded"], models
        assert httpx.post(f"{server.url}/v1/predict", json=JOB).json()["model_version"] == versions.good
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"
    finally:
        server.stop()
