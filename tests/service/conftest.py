"""Databases for the service tests: a SQLite file, and a fresh database on the real PostgreSQL server
(``GPUPLACE_TEST_POSTGRES``, default the local server's ``test`` database as user ``postgres``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

POSTGRES_ADMIN = os.environ.get("GPUPLACE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards."""
    name = f"gpuplace_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as exc:
        pytest.fail(f"no PostgreSQL at {POSTGRES_ADMIN} (start it; .ci/run does): {exc}")
    url = sa.engine.make_url(POSTGRES_ADMIN).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A real ``gpuplace serve`` process (uvicorn) on 127.0.0.1."""

    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *args: str, log: Path | None = None, timeout_s: float = 600.0) -> Server:
        """Start ``gpuplace serve`` with extra ``args`` (e.g. ``--workers 2``) and wait until it answers;
        its stderr goes to ``log`` (a temporary file if not given: a pipe nobody reads would fill and
        stall the server). The deadline is generous: on a loaded machine start-up takes minutes, and an
        exit is noticed at once. If it does not come up, it is stopped and its stderr is in the error."""
        if log is None:
            handle, name = tempfile.mkstemp(prefix="gpuplace-server-", suffix=".log")
            os.close(handle)
            log = Path(name)
        self.log = log
        with log.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--port", str(self.port), *args], env=self.env,
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        _STARTED.append(self)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with code {self.process.returncode}: {self.stderr()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server did not answer /healthz within {timeout_s:.0f} s: {self.stderr()}")

    def stderr(self) -> str:
        """The end of what the server wrote to stderr."""
        return self.log.read_text(errors="replace")[-3000:] if self.log is not None else ""

    def kill(self) -> None:
        """kill -9: no shutdown handlers run."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


_STARTED: list[Server] = []
"""Every server a test started: stopped when the session ends, whatever the tests did."""


@pytest.fixture(scope="session", autouse=True)
def _no_server_outlives_the_tests() -> Iterator[None]:
    yield
    for server in _STARTED:
        server.stop()


API_KEY = "test-key-9f2c"


class Askers:
    """Clients asking ``/v1/predict`` in a loop on threads until stopped: what they saw (model versions)
    and every answer that was not a 200."""

    def __init__(self, url: str, job: dict[str, Any], clients: int) -> None:
        self.url, self.job = url, job
        self.failures: list[str] = []
        self.versions: set[str] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ask) for _ in range(clients)]

    def __enter__(self) -> Askers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _ask(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self._stop.is_set():
                reply = http.post("/v1/predict", json=self.job)
                if reply.status_code != 200:
                    self.failures.append(reply.text)
                else:
                    self.versions.add(reply.json()["model_version"])


def server_env(home: Path, database_url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "GPUPLACE_HOME": str(home), "GPUPLACE_DATABASE_URL": database_url,
            "GPUPLACE_API_KEYS": API_KEY, "GPUPLACE_MODEL_POLL_S": "0", **extra}


def cache_rows(metrics: str, version: str | None = None) -> tuple[int, int]:
    """Estimator rows answered from the answer cache and by the model, read off a ``/metrics`` page:
    (hits, misses) of ``version``, or of every version."""
    counts = {"hit": 0, "miss": 0}
    for family in text_string_to_metric_families(metrics):
        if family.name == "gpuplace_prediction_cache_rows":
            for sample in family.samples:
                if sample.name.endswith("_total") and version in (None, sample.labels["version"]):
                    counts[sample.labels["result"]] += int(sample.value)
    return counts["hit"], counts["miss"]


def independent_check(database_url: str, expected: dict[str, dict[str, Any]]) -> None:
    """Read the database directly and recount: no GPU over 1000 milli or its memory, no machine over its
    CPU or memory, and exactly the acknowledged, unreleased allocations running."""
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        spec = json.loads(conn.execute(sa.text("SELECT cluster FROM cluster_spec")).scalar_one())
        rows = conn.execute(sa.text("SELECT job_id, allocation FROM jobs WHERE state = 'running'")).all()
    engine.dispose()
    machines = {m["name"]: m for m in spec["machines"]}
    gpu: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    running = {job_id: json.loads(allocation) for job_id, allocation in rows}
    for allocation in running.values():
        for p in allocation["instances"]:
            cpu[p["machine"]] += p["cpu_milli"]
            mem[p["machine"]] += p["mem_mib"]
            for g in p["gpus"]:
                assert 0 <= g < machines[p["machine"]]["gpus"]
                gpu[(p["machine"], g)] += p["gpu_milli"]
    assert all(v <= 1000 for v in gpu.values())
    assert all(v <= machines[m]["cpu_cores"] * 1000 for m, v in cpu.items())
    assert all(v <= machines[m]["mem_gib"] * 1024 for m, v in mem.items())
    assert running == expected
