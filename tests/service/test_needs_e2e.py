"""Needs from stated hyperparameters, end to end: a bundle trained on the real openb pods carrying the
estimators fitted on the real measurements (GPUMemNet, Zeus, Pollux), in a real MLflow registry, served
by a real uvicorn process; jobs on shares of GPUs are packed by their predicted P90 GPU memory."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.registry import CHAMPION, ModelRegistry, default_uri
from tests.service.conftest import API_KEY, REPO, Server, server_env
from training.pipeline.train import train_and_register

SMALL = {"n_estimators": 30, "num_leaves": 15}
KEY = {"X-API-Key": API_KEY}
GPU_MEM_GIB = 16.0
# a wide MLP at a large batch: its predicted peak (about 4 GiB) is far above what a 0.1 share of a
# 16 GiB GPU would be given in proportion (1.6 GiB)
WIDE = {"model_family": "mlp", "parameters": 120_000_000, "activations": 60_000, "layers": 8,
        "batch_size": 1000, "optimizer": "adam"}


def job(job_id: str, hyperparams: dict[str, Any] | None = None, gpu: float = 0.1, instances: int = 1,
        **task: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"job_id": job_id, "user": "u1",
                            "tasks": [{"instances": instances, "gpu": gpu, "cpu_cores": 1, "mem_gib": 1, **task}]}
    return body | ({"hyperparams": hyperparams} if hyperparams else {})


@pytest.mark.slow
def test_stated_hyperparameters_are_answered_and_pack_shared_gpus_by_p90_memory(tmp_path: Path) -> None:
    registry = ModelRegistry(default_uri(tmp_path), "gpuplace-estimators", artifact_root=tmp_path / "mlartifacts")
    trained = train_and_register(registry, ["openb2023"], "lgbm", seed=1, params=SMALL)
    registry.set_alias(CHAMPION, trained.version)
    server = Server(server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")).start()
    try:
        machines = [{"name": f"m{k}", "gpu_type": "V100", "gpus": 2, "cpu_cores": 64, "mem_gib": 256,
                     "gpu_mem_gib": GPU_MEM_GIB} for k in range(2)]
        assert httpx.put(f"{server.url}/v1/cluster", json={"name": "small", "machines": machines},
                         headers=KEY).status_code == 200

        estimate = httpx.post(f"{server.url}/v1/predict", json=job("ask-1", {**WIDE, "samples_per_epoch": 50_000},
                                                                   gpu=1, instances=4)).json()
        needs = estimate["tasks"][0]["needs"]
        assert set(estimate["tasks"][0]["sources"].values()) == {"openb2023"}  # the trace-trained targets
        assert needs["gpu_mem_peak_gib"]["source"].startswith("GPUMemNet")
        assert needs["gpu_mem_peak_gib"]["p90"] >= needs["gpu_mem_peak_gib"]["p50"] > 1.0
        assert 0 < needs["gpu_util_pct"]["p50"] <= 100
        assert needs["epoch_s"]["source"].startswith("Zeus") and needs["epoch_s"]["p50"]["V100"] > 0
        assert needs["spread_slowdown"]["replicas"] == 4 and needs["spread_slowdown"]["p90"] >= 1.0
        # a job that states nothing gets no needs: nothing is guessed
        assert "needs" not in httpx.post(f"{server.url}/v1/predict", json=job("ask-2")).json()["tasks"][0]

        per_gpu: dict[tuple[str, int], float] = defaultdict(float)
        placed, reserved_mib = 0, set()
        for k in range(30):
            answer = httpx.post(f"{server.url}/v1/place", json=job(f"wide-{k}", WIDE), headers=KEY).json()
            if answer["verdict"] != "placed":
                assert answer["verdict"] == "unschedulable-now"
                continue
            placed += 1
            p90 = answer["estimate"]["tasks"][0]["needs"]["gpu_mem_peak_gib"]["p90"]
            for instance in answer["allocation"]["instances"]:
                assert instance["gpu_mem_mib"] >= p90 * 1024 - 1  # reserved by the P90, not by the share
                reserved_mib.add(instance["gpu_mem_mib"])
                for gpu in instance["gpus"]:
                    per_gpu[(instance["machine"], gpu)] += p90
        assert placed and max(per_gpu.values()) <= GPU_MEM_GIB
        # by share alone 10 jobs of 0.1 fit on each of the 4 GPUs; by their P90 memory each GPU holds fewer,
        # and every GPU is filled as far as memory allows
        (reserved,) = reserved_mib
        assert placed == 4 * min(10, int(GPU_MEM_GIB * 1024 // reserved)) < 30

        bad = httpx.post(f"{server.url}/v1/place", json=job("bad-1", {"batchsize": 32}), headers=KEY)
        assert bad.status_code == 422 and "hyperparams.batchsize" in bad.text
        bad = httpx.post(f"{server.url}/v1/predict", json=job("bad-2", {"batch_size": -3}))
        assert bad.status_code == 422 and "hyperparams.batch_size" in bad.text
    finally:
        server.stop()

    command = [sys.executable, "-m", "service.cli", "predict", "--job"]
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")
    stated = {"job_id": "cli-1", "req_gpu": 0.5, "hyperparams": WIDE}
    out = subprocess.run([*command, json.dumps(stated)], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["needs.gpu_mem_peak_gib_p90"] >= row["needs.gpu_mem_peak_gib_p50"] > 1.0
    assert row["model_version"] == trained.version
    out = subprocess.run([*command, json.dumps({**stated, "hyperparams": {"batchsize": 1}})], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 2 and "hyperparams.batchsize" in out.stderr
