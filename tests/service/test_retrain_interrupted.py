"""``gpuplace retrain`` killed (SIGKILL) at two points — while it loads and trains, and the moment its new
version appears in the registry — never leaves an alias on a version that cannot be loaded, and never
moves ``champion`` past the gate; a later uninterrupted run finishes the job."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models.registry import CHALLENGER, CHAMPION, ModelRegistry, default_uri
from tests.service.conftest import REPO, server_env
from training.pipeline.train import train_and_register

WEAK = {"n_estimators": 1, "num_leaves": 2, "min_child_samples": 500}
COMMAND = [sys.executable, "-m", "service.cli", "retrain", "--source", "openb2023", "--algo", "lgbm"]


def _versions(registry: ModelRegistry) -> set[str]:
    return {str(v.version) for v in registry.client.search_model_versions(f"name='{registry.name}'")}


def _assert_aliases_load(registry: ModelRegistry, champion: str) -> None:
    assert registry.alias_version(CHAMPION) == champion
    for alias in (CHAMPION, CHALLENGER):
        version, bundle = registry.load(alias)
        assert bundle.predict_records([{"qos": "LS", "req_gpu": 0.5}])[0]["model_version"] == version


def _kill_when(process: subprocess.Popen[bytes], ready: object, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if callable(ready) and ready():
            break
        time.sleep(0.1)
    assert process.poll() is None, "retrain finished before it could be interrupted"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


@pytest.mark.slow
def test_a_killed_retrain_leaves_every_alias_loadable_and_a_rerun_completes(tmp_path: Path) -> None:
    registry = ModelRegistry(default_uri(tmp_path), "gpuplace-estimators", artifact_root=tmp_path / "mlartifacts")
    weak = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=WEAK).version
    registry.set_alias(CHAMPION, weak)
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")

    started = time.monotonic()
    early = subprocess.Popen(COMMAND, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(early, lambda: time.monotonic() - started > 8)  # loading data or fitting
    _assert_aliases_load(registry, weak)

    before = _versions(registry)
    late = subprocess.Popen(COMMAND, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(late, lambda: _versions(registry) - before)  # registered, alias not yet moved
    assert _versions(registry) - before
    _assert_aliases_load(registry, weak)

    done = subprocess.run(COMMAND, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    challenger = registry.alias_version(CHALLENGER)
    assert challenger is not None and challenger not in before
    assert "promoted" in done.stdout and registry.alias_version(CHAMPION) == challenger
    _assert_aliases_load(registry, challenger)
