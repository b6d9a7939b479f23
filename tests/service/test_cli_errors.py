"""The command line as a user meets it when something is wrong, when output goes to a log, and on ``--help``:
one line naming what is wrong and exit code 2; progress as plain lines when not on a terminal; help without
the ML stack."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from service.cli.console import PROGRESS_ENV, progress

REPO = Path(__file__).resolve().parents[2]


def gpuplace(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "GPUPLACE_HOME": str(home), "COLUMNS": "200", **env}, cwd=REPO,
                          timeout=180)


def one_error(out: subprocess.CompletedProcess[str]) -> str:
    """The error line of a run that failed as a user error should: exit 2, no traceback, one ``error:`` line."""
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines == errors, out.stderr
    return errors[0]


JOB = '{"req_gpu": 1, "req_cpu_cores": 4, "req_mem_gib": 16}'


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One working folder for the module: its MLflow store is created once (seconds) and then only read."""
    return tmp_path_factory.mktemp("gpuplace-home")


@pytest.mark.parametrize(("args", "says"), [
    (("predict", "--job", JOB), "no version with alias 'champion'"),
    (("predict", "--job", JOB, "--version", "99"), "model 'gpuplace-estimators' has no version 99"),
    (("predict", "--job", JOB, "--version", "bogus"), "no version with alias 'bogus'"),
    (("predict", "--job", '{"gpus_please": 3}'), "--job: unknown job field(s): gpus_please"),
    (("predict", "--job", "{not json"), "--job: not valid JSON"),
    (("predict", "--job", "[1, 2]"), "--job: must be a JSON object or a non-empty list of objects"),
    (("predict", "--job", '[{"req_gpu": 1}, {"req_gpu": "lots"}]'),
     "line 2, column 'req_gpu': req_gpu must be a number (got 'lots')"),
    (("train", "--algo", "xgboost"), "--algo 'xgboost': one of lgbm, rf"),
    (("retrain", "--algo", "xgboost"), "--algo 'xgboost': one of lgbm, rf"),
    (("evaluate", "--source", "philly", "--target", "gpu"), "no labels for --source 'philly' --target 'gpu'"),
    (("models", "drift", "--database-url", "nosuchdb://x"), "state database: "),
    (("simulate", "--trace", "nope"), "unknown trace 'nope'; known: pai2020-jobs, openb2023"),
])
def test_bad_input_is_one_line_and_exit_2(home: Path, args: tuple[str, ...], says: str) -> None:
    assert says in one_error(gpuplace(*args, home=home))


def test_job_file_problems_name_the_file(home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    assert one_error(gpuplace("predict", "--job", f"@{missing}", home=home)) == \
        f"error: {missing}: No such file or directory"
    latin = tmp_path / "latin1.json"
    latin.write_bytes('{"user": "Jürgen"}'.encode("latin-1"))
    assert f"--job file {latin}: not UTF-8 text" in one_error(gpuplace("predict", "--job", f"@{latin}", home=home))
    broken = tmp_path / "broken.json"
    broken.write_text('{"req_gpu": 1,\n "user": }\n')
    line = one_error(gpuplace("predict", "--job", f"@{broken}", home=home))
    assert f"--job file {broken}: not valid JSON" in line and "line 2" in line


def test_a_version_that_does_not_exist_is_named(home: Path) -> None:
    """A registered model without the asked version (the model name exists, so the version is what is wrong)."""
    from models.registry import ModelRegistry, default_uri

    store = ModelRegistry(default_uri(home), "empty-model", artifact_root=home / "mlartifacts")
    store.client.create_registered_model("empty-model")
    line = one_error(gpuplace("predict", "--job", JOB, "--version", "7", "--name", "empty-model", home=home))
    assert "model 'empty-model' has no version 7" in line


def test_registry_that_does_not_answer_is_an_error_within_seconds(home: Path) -> None:
    started = time.monotonic()
    out = gpuplace("models", "list", home=home, GPUPLACE_MLFLOW_URI="http://127.0.0.1:9")
    assert "model registry at http://127.0.0.1:9 unreachable" in one_error(out)
    assert time.monotonic() - started < 90  # MLflow's own retries would go on for minutes


def test_bad_setting_names_the_variable(home: Path) -> None:
    out = gpuplace("serve", home=home, GPUPLACE_MAX_BODY_BYTES="lots")
    assert "setting GPUPLACE_MAX_BODY_BYTES" in one_error(out) and "'lots'" in out.stderr


HEAVY = ("numpy", "pandas", "pyarrow", "scipy", "sklearn", "lightgbm", "mlflow", "matplotlib", "fastapi",
         "starlette", "sqlalchemy", "httpx", "pydantic_settings", "uvicorn", "ortools")
"""Not imported for help (pydantic is: typer imports it for sub-command help)."""
HELPS = [[], ["data"], ["cluster"], ["models"], ["simulate"], ["performance"], ["serve"], ["train"], ["predict"],
         ["evaluate"], ["retrain"], ["quickstart"], ["models", "drift"], ["simulate", "compare"]]


def test_help_imports_no_ml_stack(tmp_path: Path) -> None:
    probe = (
        "import json, sys\n"
        "from service.cli.app import main\n"
        f"for args in {HELPS!r}:\n"
        "    sys.argv = ['gpuplace', *args, '--help']\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code == 0, (args, stop.code)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env={**os.environ, "GPUPLACE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_help_texts_name_what_the_commands_accept() -> None:
    """The help names sources and clusters without loading them: the names must be the real ones."""
    from placement import CLUSTERS
    from service.cli.cluster import SHIPPED_CLUSTERS
    from service.cli.models import LABELLED_SOURCES
    from training.features.targets import TARGETS

    assert tuple(CLUSTERS) == SHIPPED_CLUSTERS
    assert tuple(TARGETS) == LABELLED_SOURCES


def test_progress_off_a_terminal_is_periodic_lines(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "0.2")
    with progress(Console(file=io.StringIO()), "training", total=4) as steps:
        steps.update("fitting lgbm")
        steps.advance(2)
        time.sleep(1.1)  # a long step: heartbeat lines keep coming
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("progress") and lines[0].endswith("training [0/4, 0%]")
    assert lines[1].endswith("fitting lgbm [0/4, 0%]")
    beats = [line for line in lines[2:-1] if line.endswith("fitting lgbm [2/4, 50%]")]
    assert len(beats) >= 3, lines
    assert lines[-1].endswith("fitting lgbm: done [2/4, 50%]")


def test_progress_on_a_terminal_is_a_bar_and_no_lines(capsys: pytest.CaptureFixture[str]) -> None:
    screen = io.StringIO()
    with progress(Console(file=screen, force_terminal=True), "training", total=2) as steps:
        steps.update("fitting lgbm")
        steps.advance()
    assert capsys.readouterr().err == ""
    assert "fitting lgbm" in screen.getvalue()
