"""The hyperparameter vocabulary, the needs estimator the bundle carries, and how a job's needs reach its
placement (fitted on the real shipped measurements)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from placement.model.speed import SyncCurve
from service.http.schemas import JobIn
from training.needs.estimator import NeedsEstimator, curve_of, shipped_needs
from training.needs.vocabulary import HyperparameterError, markdown_table, validate
from training.pipeline.bundle import EstimatorBundle

REPO = Path(__file__).resolve().parents[2]
MLP = {"model_family": "mlp", "parameters": 3_000_000, "activations": 7_000, "layers": 3, "batch_size": 256,
       "samples_per_epoch": 50_000}


@pytest.fixture(scope="module")
def needs() -> NeedsEstimator:
    return shipped_needs()


@pytest.mark.parametrize(("stated", "key", "problem"), [
    ({"batchsize": 32}, "batchsize", "unknown hyperparameter"),
    ({"batch_size": 0}, "batch_size", ">= 1"),
    ({"batch_size": 1.5}, "batch_size", "whole number"),
    ({"batch_size": "32"}, "batch_size", "must be a number"),
    ({"precision": "fp8"}, "precision", "not one of"),
    ({"learning_rate": 0}, "learning_rate", "> 0"),
    ({"epochs": True}, "epochs", "must be a number"),
    ({"parameters": math.inf}, "parameters", "finite"),
])
def test_bad_hyperparameters_are_refused_naming_the_key(stated: dict[str, object], key: str, problem: str) -> None:
    with pytest.raises(HyperparameterError) as caught:
        validate(stated)
    assert caught.value.key == key and problem in str(caught.value) and f"hyperparams.{key}" in str(caught.value)


def test_good_hyperparameters_are_normalised() -> None:
    assert validate({"batch_size": 32.0, "precision": " FP16 ", "learning_rate": 0.1}) == {
        "batch_size": 32, "precision": "fp16", "learning_rate": 0.1}


def test_the_docs_show_the_vocabulary_as_it_is() -> None:
    assert markdown_table() in (REPO / "docs" / "needs.md").read_text()


def test_answers_name_their_source_and_leave_out_what_cannot_be_answered(needs: NeedsEstimator) -> None:
    full = needs.answer(MLP, replicas=4)
    assert set(full) == {"gpu_mem_peak_gib", "gpu_util_pct", "epoch_s", "spread_slowdown"}
    assert full["gpu_mem_peak_gib"]["source"].startswith("GPUMemNet")
    assert full["gpu_mem_peak_gib"]["p90"] >= full["gpu_mem_peak_gib"]["p50"] > 1.0  # the CUDA context alone
    assert full["epoch_s"]["p50"]["V100"] < full["epoch_s"]["p50"]["P100"]
    curve = curve_of(full)
    assert isinstance(curve, SyncCurve) and curve.step_s(4, 2) >= curve.step_s(4, 1)
    assert set(needs.answer({"batch_size": 64})) == set()  # nothing else stated: nothing guessed
    assert "spread_slowdown" not in needs.answer(MLP, replicas=1)


def test_the_bundle_answers_needs_beside_its_targets(needs: NeedsEstimator) -> None:
    bundle = EstimatorBundle({}, needs=needs)
    record = {"job_id": "j", "instances": 2, "req_gpu": 1.0, "hyperparams": json.dumps(MLP)}
    (answer,) = bundle.predict_records([record])
    assert answer["needs"]["spread_slowdown"]["replicas"] == 2
    assert "needs" not in bundle.predict_records([{**record, "hyperparams": None}])[0]
    older = EstimatorBundle({})
    del older.__dict__["needs"]  # a bundle pickled before it carried needs estimators
    assert "needs" not in older.predict_records([record])[0]
    with pytest.raises(ValueError, match=r"hyperparams\.batchsize"):
        bundle.predict_records([{**record, "hyperparams": json.dumps({"batchsize": 3})}])


def test_a_shared_task_is_reserved_its_p90_memory_and_the_job_its_curve(needs: NeedsEstimator) -> None:
    body = JobIn(job_id="j", hyperparams=MLP, tasks=[{"instances": 2, "gpu": 0.25}, {"gpu": 0.5, "gpu_mem_gib": 3}])
    answers = [needs.answer(MLP, replicas=2), needs.answer(MLP, replicas=1)]
    job = body.to_job(needs=answers)
    assert job.tasks[0].gpu_mem_gib == answers[0]["gpu_mem_peak_gib"]["p90"]
    assert job.tasks[1].gpu_mem_gib == 3  # a stated figure is kept
    assert job.sync_curve == curve_of(answers[0])
    plain = body.to_job()
    assert math.isnan(plain.tasks[0].gpu_mem_gib) and plain.sync_curve is None
