"""docker-compose.yml, read as data (no container engine here): the services, their health checks, and
every variable it needs documented in .env.example."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return data


def test_services_and_health_checks() -> None:
    services = _compose()["services"]
    assert set(services) == {"api", "mlflow", "postgres", "train", "retrain"}
    for name in ("api", "mlflow", "postgres"):
        check = services[name]["healthcheck"]
        assert check["test"] and check["retries"] >= 3, name
    assert services["train"]["profiles"] == ["train"]
    for name, needs in (("api", {"postgres", "mlflow"}), ("mlflow", {"postgres"}), ("train", {"mlflow"}),
                        ("retrain", {"postgres", "mlflow"})):
        depends = services[name]["depends_on"]
        assert set(depends) == needs and all(d["condition"] == "service_healthy" for d in depends.values()), name


def test_api_uses_postgres_and_the_tracking_server() -> None:
    services = _compose()["services"]
    env = services["api"]["environment"]
    database = env["GPUPLACE_DATABASE_URL"]
    assert database.startswith("postgresql+psycopg://") and "@postgres:5432/" in database
    assert env["GPUPLACE_MLFLOW_URI"] == "http://mlflow:5000" and "GPUPLACE_API_KEYS" in env
    assert services["api"]["command"][0] == "serve"
    command = " ".join(services["mlflow"]["command"])
    assert "--backend-store-uri postgresql+psycopg://" in command and "@postgres:5432/mlflow" in command
    assert any(v.endswith(":/var/lib/mlflow/artifacts") for v in services["mlflow"]["volumes"])
    init = next(v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v)
    assert "CREATE DATABASE mlflow" in (REPO / init.split(":")[0]).read_text()


def test_every_variable_is_documented_in_env_example() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", text))
    documented = {line.split("=")[0] for line in (REPO / ".env.example").read_text().splitlines()
                  if line and not line.startswith("#")}
    assert used and used <= documented, used - documented


def test_retrain_runs_on_an_interval_against_the_services_state() -> None:
    services = _compose()["services"]
    retrain = services["retrain"]
    assert retrain["command"][:2] == ["retrain", "--every"] and retrain["restart"] == "unless-stopped"
    assert retrain["environment"]["GPUPLACE_DATABASE_URL"] == services["api"]["environment"]["GPUPLACE_DATABASE_URL"]
    assert retrain["environment"]["GPUPLACE_MLFLOW_URI"] == "http://mlflow:5000"
    assert float(services["api"]["environment"]["GPUPLACE_MODEL_POLL_S"]) > 0  # the api picks up a new champion
