"""The runtime lock alone is enough: a fresh virtual environment built from ``requirements.lock`` (no dev
extra), with gpuplace installed as a wheel (not editable), imports everything the packages import and runs
``gpuplace serve``, as the image does.

The packages come from uv's cache, filled by ``make setup``, so the environment takes seconds to build.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.processes import stop_group

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "models", "placement", "training", "gpuplace")
DEV_ONLY = ("pytest", "ruff", "mypy", "hypothesis", "schemathesis", "importlinter")


def _uv() -> str:
    found = Path(sys.executable).with_name("uv")
    return str(found) if found.exists() else (shutil.which("uv") or pytest.fail("uv is not installed"))


def _pins(lock: Path) -> dict[str, str]:
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), re.MULTILINE)}


def _imported_top_levels() -> set[str]:
    """Every top-level module the packages import anywhere (at module level or inside functions), except
    the standard library's and their own."""
    names: set[str] = set()
    for package in PACKAGES:
        for file in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - set(PACKAGES) - {"__future__"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_runtime_lock_alone_installs_and_serves(tmp_path: Path) -> None:
    uv, venv = _uv(), tmp_path / "venv"
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}

    def run(*args: str, cwd: Path = tmp_path) -> str:
        done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run(uv, "venv", "--quiet", "--python", sys.executable, str(venv))
    run(uv, "pip", "install", "--quiet", "--python", str(python), "-r", str(REPO / "requirements.lock"))
    # gpuplace built as a wheel from a copy of the sources, as the image builds it
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    run(uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps", str(source))
    run(uv, "pip", "check", "--python", str(python))

    installed = {row["name"].lower(): row["version"] for row in
                 json.loads(run(uv, "pip", "list", "--python", str(python), "--format", "json"))}
    pins = _pins(REPO / "requirements.lock")
    assert {k: v for k, v in installed.items() if k != "gpuplace"} == pins  # the lock is complete and exact
    dev_pins = _pins(REPO / "requirements-dev.lock")
    assert {k: dev_pins.get(k) for k in pins} == pins  # the dev environment pins the same versions

    imported = sorted(_imported_top_levels())
    probe = ("import importlib.util, json, sys; names = json.loads(sys.argv[1]); "
             "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in names}))")
    found = json.loads(run(str(python), "-c", probe, json.dumps([*imported, *DEV_ONLY, "service"])))
    assert [n for n in imported if not found[n]] == [], "imported by gpuplace but not in the runtime lock"
    assert [n for n in DEV_ONLY if found[n]] == [], "dev tools in the runtime environment"
    where = run(str(python), "-c", "import service; print(service.__file__)")
    assert where.strip().startswith(str(venv)), where  # the wheel, not the checkout

    port, home = _free_port(), tmp_path / "home"
    log = (tmp_path / "serve.log").open("wb")
    serve_env = {**env, "GPUPLACE_HOME": str(home), "GPUPLACE_DATA_DIR": str(REPO / "data"),
                 "GPUPLACE_MODEL_POLL_S": "0", "GPUPLACE_API_KEYS": "k"}
    process = subprocess.Popen([str(venv / "bin" / "gpuplace"), "serve", "--port", str(port)], cwd=tmp_path,
                               env=serve_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, answered = time.monotonic() + 300, None
        while answered is None:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                    answered = json.loads(reply.read())
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        assert answered == {"status": "ok"}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as reply:
                ready = json.loads(reply.read())
        except urllib.error.HTTPError as exc:  # 503 with a body while no model is registered
            ready = json.loads(exc.read())
        assert ready["database"] == "ok"  # migrations shipped in the wheel ran against a new SQLite file
    finally:
        stop_group(process, log)
