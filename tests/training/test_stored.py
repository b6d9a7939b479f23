"""Evaluating and training from a stored Parquet trace on Dask (training.pipeline.stored), and the command line's
--trace: real PAI rows, a real MLflow registry, a real Dask cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from distributed import Client

from models.calibrated import CalibratedEstimator
from models.registry import ModelRegistry, default_uri
from training.features.frames import build_features
from training.features.targets import TARGETS, target_spec
from training.ingest.sources import get_source
from training.ingest.tables import write_tables
from training.pipeline.evaluate import baselines, evaluate, model, time_split
from training.pipeline.report import finite
from training.pipeline.stored import evaluate_stored, train_stored_and_register

REPO = Path(__file__).resolve().parents[2]
ROWS = 5000
SPEC = target_spec("pai2020-jobs", "duration")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return get_source("pai2020-jobs").load().iloc[:ROWS]


@pytest.fixture(scope="module")
def stored(table: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("trace")
    write_tables({"part-0": table.iloc[:2000], "part-1": table.iloc[2000:]}, folder)
    return folder


def test_the_rule_alone_scores_as_in_one_process(table: pd.DataFrame, stored: Path, client: Client,
                                                 tmp_path: Path) -> None:
    report = evaluate_stored("pai2020-jobs", "duration", stored, tmp_path, client.scheduler.address, "history")
    single = evaluate(time_split(table, SPEC), {**baselines(SPEC), "history": model(SPEC, "history")})
    assert set(report["estimators"]) == set(single["estimators"])
    for name, entry in finite(single["estimators"]).items():  # the causal baselines and the rule alone
        for key in ("male", "mae", "p90_coverage", "n"):
            assert report["estimators"][name][key] == _approx(entry[key]), (name, key)
        for depth, scores in entry["by_depth"].items():
            assert report["estimators"][name]["by_depth"][depth]["male"] == _approx(scores["male"]), (name, depth)
    assert report["split"]["test_rows"] == len(time_split(table, SPEC).test)
    assert report["best_causal_baseline"] == min(baselines(SPEC), key=lambda n: single["estimators"][n]["male"])
    assert (tmp_path / "report.json").stat().st_size > 0
    assert sorted(Path(p).name for p in report["plots"]) == ["calibration.png", "error_by_depth.png",
                                                             "predicted_vs_actual.png"]
    assert all(Path(p).stat().st_size > 0 for p in report["plots"])


def _approx(value: float | None) -> object:
    """A score as a report writes it: NaN as null."""
    return None if value is None else pytest.approx(value)


def test_a_bundle_trained_on_the_workers_is_registered_and_serves_from_the_traces_history(
        table: pd.DataFrame, stored: Path, client: Client, tmp_path: Path) -> None:
    store = ModelRegistry(default_uri(tmp_path), "stored-test", artifact_root=tmp_path / "mlartifacts")
    result = train_stored_and_register(store, "pai2020-jobs", stored, client.scheduler.address, "lgbm",
                                       needs=False)
    assert set(result.reports) == set(TARGETS["pai2020-jobs"])  # the rule-corrected and the stacked targets
    assert result.metrics["duration.model.male"] == result.reports["duration"]["estimators"]["lgbm"]["male"]
    _, bundle = store.load(result.version)
    assert bundle.targets["duration"].state.tables == build_features(table, SPEC)[1].tables
    assert isinstance(bundle.targets["gpu_request"].estimator, CalibratedEstimator)
    last = table.iloc[-1]
    job = pd.DataFrame([{"user": last["user"], "group": last["group"], "req_gpu": last["req_gpu"],
                         "req_cpu_cores": last["req_cpu_cores"], "instances": 1}])
    answer = bundle.predict(None, job)
    for target in ("duration", "gpu_request", "cpu_request"):
        assert np.isfinite(answer[f"{target}_p50"]).all() and (answer[f"{target}_p90"] >= answer[f"{target}_p50"]).all()


@pytest.mark.parametrize(("arguments", "message"), [
    (["evaluate", "--trace", "{trace}"], "give --dask-scheduler"),
    (["evaluate", "--trace", "{trace}", "--dask-scheduler", "local:1", "--algo", "rf"], "no fit on Dask partitions"),
    (["evaluate", "--trace", "{trace}", "--dask-scheduler", "local:1", "--all"], "not with --all"),
    (["train", "--trace", "{trace}/absent", "--dask-scheduler", "local:1"], "no such file or folder"),
])
def test_what_a_stored_trace_needs_is_named(stored: Path, tmp_path: Path, arguments: list[str],
                                            message: str) -> None:
    command = [sys.executable, "-m", "service.cli", *(a.format(trace=stored) for a in arguments)]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "200"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr + out.stdout


def test_a_bad_row_in_a_stored_trace_is_one_line_naming_file_row_and_column(table: pd.DataFrame,
                                                                            tmp_path: Path) -> None:
    broken = table.iloc[:3000].copy()
    broken.loc[2500, "duration_s"] = -5.0
    write_tables({"part-0": broken.iloc[:1000], "part-1": broken.iloc[1000:]}, tmp_path / "trace")
    command = [sys.executable, "-m", "service.cli", "evaluate", "--trace", str(tmp_path / "trace"),
               "--dask-scheduler", "local:1"]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "200"})
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "line 2501, column 'duration_s'" in errors[0] and str(tmp_path / "trace") in errors[0]
    assert "Traceback" not in out.stderr and "Compute Failed" not in out.stderr
