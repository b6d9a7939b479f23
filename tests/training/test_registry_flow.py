"""Train, register, promote, list and load against a real MLflow SQLite store, on real openb pods."""

from __future__ import annotations

from importlib.metadata import version as installed_version
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from models.registry import CHALLENGER, CHAMPION, ModelRegistry, default_uri
from models.requirements import REQUIREMENTS_TAG, VERSION_TAG, loadability, pip_requirements
from training.pipeline.promote import promote
from training.pipeline.train import train_and_register

SMALL = {"n_estimators": 40, "num_leaves": 15}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    home = tmp_path_factory.mktemp("gpuplace-home")
    return ModelRegistry(default_uri(home), "test-estimators", artifact_root=home / "mlartifacts")


@pytest.mark.slow
def test_train_promote_list_load(registry: ModelRegistry) -> None:
    first = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=SMALL)
    assert registry.alias_version(CHALLENGER) == first.version == "1"
    assert registry.alias_version(CHAMPION) is None
    assert first.metrics["duration.model.male"] > 0
    assert "duration.baseline.median.qos_size.male" in first.metrics

    decision = promote(registry)
    assert decision.promoted and decision.reason == "no champion yet"
    assert registry.alias_version(CHAMPION) == "1"
    assert not promote(registry).promoted  # idempotent: the champion is already version 1

    # the same data, seed and parameters give the same model: not better, so not promoted
    second = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=SMALL)
    assert second.version == "2" and registry.alias_version(CHALLENGER) == "2"
    refused = promote(registry)
    assert not refused.promoted and refused.reason.startswith("not better")
    assert refused.comparison["challenger"]["duration.male"] == refused.comparison["champion"]["duration.male"]
    assert registry.alias_version(CHAMPION) == "1"

    listed = {v.version: v for v in registry.versions()}
    assert listed["1"].aliases == (CHAMPION,) and listed["2"].aliases == (CHALLENGER,)
    assert listed["1"].params["data_sha256.openb2023"] == first_digest()
    # what the version needs to load: recorded on the version and in the model's own requirements
    assert listed["1"].tags[VERSION_TAG] == installed_version("gpuplace")
    assert listed["1"].tags[REQUIREMENTS_TAG].splitlines() == pip_requirements()
    assert loadability(listed["1"].tags).verdict == "yes"
    logged = Path(mlflow.pyfunc.get_model_dependencies(f"models:/{registry.name}/1")).read_text().split()
    assert set(pip_requirements()) <= set(logged) and f"gpuplace=={installed_version('gpuplace')}" in logged

    version, bundle = registry.load(CHAMPION)
    job = pd.DataFrame([{"req_gpu": 0.5, "req_cpu_cores": 4.0, "req_mem_gib": 16.0, "qos": "LS",
                         "submit_time_s": 13_000_000.0}])
    answer = bundle.predict(None, job)
    assert version == "1" and answer["model_version"].iloc[0] == "1"
    assert 0 < answer["duration_p50"].iloc[0] <= answer["duration_p90"].iloc[0]


def first_digest() -> str:
    import hashlib

    path = Path(__file__).resolve().parents[2] / "data" / "openb2023" / "openb_pod_list_default.csv"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bundle_refuses_unknown_job_fields() -> None:
    from training.pipeline.bundle import job_table

    with pytest.raises(ValueError, match="unknown job field"):
        job_table(pd.DataFrame([{"gpus_please": 3}]))
