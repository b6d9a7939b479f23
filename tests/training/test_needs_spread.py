"""The spread-sensitivity predictor: a job's sync curve and spread slowdown from its hyperparameters,
fitted on the shipped Pollux profiles."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.needs.scoring import ERROR_COLUMNS, POINT_COLUMNS
from training.needs.spread_sensitivity import (
    ANALYTICAL,
    CLASS_BLIND,
    MODEL,
    NO_SLOWDOWN,
    POLLUX_MODELS,
    REFERENCE_SPREAD,
    STEP_TARGET,
    TARGET,
    UNSEEN_BATCH,
    UNSEEN_MODEL,
    SpreadSensitivityModel,
    evaluate_spread_sensitivity,
    fit_spread_sensitivity,
    plot_measured_vs_predicted,
    pollux_hyperparams,
    profiled_workload,
)
from training.needs.vocabulary import FAMILIES, PRECISIONS, validate
from training.performance.profiles import POLLUX_WORKLOADS, load_pollux
from training.performance.spread import fit_spread

BERT_LIKE = {"parameters": 110_000_000, "batch_size": 8, "model_family": "transformer", "precision": "fp32"}


@pytest.fixture(scope="module")
def pollux() -> pd.DataFrame:
    return load_pollux()


@pytest.fixture(scope="module")
def model(pollux: pd.DataFrame) -> SpreadSensitivityModel:
    return fit_spread_sensitivity(pollux)


def _slowdown(model: SpreadSensitivityModel, replicas: int, machines: int, **stated: object) -> float:
    return float(model.predict(pd.DataFrame([stated]), replicas, machines)["p50"].iloc[0])


def test_every_pollux_workload_is_described_by_valid_hyperparameters(pollux: pd.DataFrame) -> None:
    assert set(POLLUX_MODELS) == set(POLLUX_WORKLOADS)
    for facts in POLLUX_MODELS.values():
        assert facts.family in FAMILIES and facts.precision in PRECISIONS
        assert "model paper" in facts.source
    described = pollux_hyperparams(pollux)
    assert len(described) == len(pollux)
    assert (described["batch_size"].to_numpy() == pollux["local_bsz"].to_numpy()).all()
    for record in described.drop_duplicates(["model", "batch_size"]).to_dict("records"):
        validate({str(key): value for key, value in record.items()})  # raises on a key or value the vocabulary refuses


def test_more_parameters_at_the_same_batch_slow_a_recommender_more_across_machines(
        model: SpreadSensitivityModel) -> None:
    # Embedding lookups cost little per parameter: a bigger table adds gradient bytes, hardly any compute.
    small, large = (_slowdown(model, 8, 2, parameters=p, batch_size=256, model_family="recommender")
                    for p in (1_000_000, 100_000_000))
    assert large > small > 1.0


@pytest.mark.parametrize("family", ["cnn", "transformer", "rnn", "recommender", None])
def test_more_gradient_bytes_at_the_same_compute_slow_a_job_more(model: SpreadSensitivityModel,
                                                                 family: str | None) -> None:
    stated = {"parameters": 50_000_000, "batch_size": 16, "model_family": family}
    fp32 = _slowdown(model, 16, 4, **stated, precision="fp32")
    fp16 = _slowdown(model, 16, 4, **stated, precision="fp16")
    assert fp32 > fp16 > 1.0
    half, full = model.curve({**stated, "precision": "bf16"}), model.curve({**stated, "precision": "amp"})
    assert half is not None and full is not None
    assert half.grad_s == pytest.approx(full.grad_s)  # precision changes the bytes only
    assert half.network_s[0] < full.network_s[0]


def test_one_machine_is_no_slowdown_and_one_gpu_no_scaling_slowdown(model: SpreadSensitivityModel) -> None:
    jobs = pd.DataFrame([BERT_LIKE, {"parameters": 2_000_000, "batch_size": 512}])
    for replicas in (1, 2, 4, 8):
        packed = model.predict(jobs, replicas, 1)
        assert (packed["p50"] == 1.0).all() and (packed["p90"] == 1.0).all()
    alone = model.predict(jobs, 1, 1, versus="one gpu")
    assert (alone["p50"] == 1.0).all() and (alone["p90"] == 1.0).all()


def test_p90_is_at_least_p50_and_above_it_once_spread(model: SpreadSensitivityModel) -> None:
    jobs = pd.DataFrame([{"parameters": p, "batch_size": m, "model_family": f}
                         for p in (300_000, 20_000_000, 300_000_000) for m in (4, 64, 1024)
                         for f in ("cnn", "mlp", "other")])
    for replicas, machines in ((2, 2), (8, 2), (16, 4), (64, 16)):
        for versus in ("one machine", "one gpu"):
            out = model.predict(jobs, replicas, machines, versus=versus)
            assert out.notna().all().all()
            assert (out["p50"] >= 1.0).all()
            assert (out["p90"] > out["p50"]).all()


def test_missing_keys_give_none_and_nan(model: SpreadSensitivityModel) -> None:
    assert model.required_keys() == ("parameters", "batch_size")
    assert model.curve({"batch_size": 32, "model_family": "cnn"}) is None
    assert model.curve({"parameters": 10_000_000}) is None
    assert model.curve({"parameters": None, "batch_size": 32}, "p90") is None
    jobs = pd.DataFrame([BERT_LIKE, {"parameters": np.nan, "batch_size": 8}, {"parameters": 5_000_000}])
    out = model.predict(jobs, 8, 2)
    assert list(out.index) == list(jobs.index)
    assert out.iloc[0].notna().all()
    assert out.iloc[1:].isna().all().all()
    assert model.predict(pd.DataFrame({"batch_size": [8, 16]}), 8, 2).isna().all().all()


def test_the_curve_is_valid_and_gives_the_predicted_slowdown(model: SpreadSensitivityModel) -> None:
    curve = model.curve(BERT_LIKE)
    assert curve is not None
    assert curve.grad_s > 0 and curve.gamma >= 1
    assert curve.network_s[0] >= curve.local_s[0] and curve.network_s[1] >= curve.local_s[1]
    job = pd.DataFrame([BERT_LIKE])
    for replicas, machines in ((2, 2), (8, 2), (12, 3), (64, 16)):
        predicted = model.predict(job, replicas, machines).iloc[0]
        assert curve.step_s(replicas, machines) / curve.step_s(replicas, 1) == pytest.approx(predicted["p50"])
        scaling = model.predict(job, replicas, machines, versus="one gpu").iloc[0]
        assert curve.step_s(replicas, machines) / curve.step_s(1, 1) == pytest.approx(scaling["p50"])
    upper = model.curve(BERT_LIKE, "p90")
    assert upper is not None and upper.local_s == curve.local_s and upper.grad_s == curve.grad_s
    k, n = REFERENCE_SPREAD
    p90 = float(model.predict(job, k, n)["p90"].iloc[0])
    assert upper.step_s(k, n) / upper.step_s(k, 1) == pytest.approx(p90, rel=1e-6)
    elsewhere = model.curve(BERT_LIKE, "p90", at=(16, 4))
    assert elsewhere is not None
    p90_there = float(model.predict(job, 16, 4)["p90"].iloc[0])
    assert elsewhere.step_s(16, 4) / elsewhere.step_s(16, 1) == pytest.approx(p90_there, rel=1e-6)
    with pytest.raises(ValueError, match="quantile"):
        model.curve(BERT_LIKE, "p99")


def test_the_model_pickles_and_states_what_it_predicts(model: SpreadSensitivityModel) -> None:
    assert (model.target, model.unit) == ("spread_slowdown", "x")
    assert "Pollux" in model.source
    assert set(model.margins) == {"spread", "scaling", "step"}
    assert all(math.isfinite(v) and v >= 0 for v in model.margins.values())
    assert set(model.profiled_margins) == set(model.margins)
    assert all(0 <= model.profiled_margins[k] < model.margins[k] for k in model.margins)
    assert set(model.profiled) == set(POLLUX_WORKLOADS)
    again = pickle.loads(pickle.dumps(model))
    job = pd.DataFrame([BERT_LIKE])
    pd.testing.assert_frame_equal(again.predict(job, 8, 2), model.predict(job, 8, 2))
    named = pd.DataFrame([{**BERT_LIKE, "model": "bert_base_uncased"}])
    pd.testing.assert_frame_equal(again.predict(named, 8, 2), model.predict(named, 8, 2))


def test_profiled_model_names_match_without_regard_to_case_or_separators() -> None:
    for workload, facts in POLLUX_MODELS.items():
        assert profiled_workload(facts.model) == workload
        assert profiled_workload(facts.model.upper()) == workload
    for name in ("resnet50", "ResNet-50", "resnet_50", " RESNET 50 "):
        assert profiled_workload(name) == "imagenet"
    assert profiled_workload("bert-base-uncased") == "bert"
    assert profiled_workload("NeuMF") == "ncf"
    for other in ("resnet18", "resnet101", "bert_large_uncased", "imagenet", "", None, 50):
        assert profiled_workload(other) is None


@pytest.mark.parametrize(("workload", "name", "batch"), [
    ("imagenet", "ResNet-50", 57), ("bert", "bert_base_uncased", 8), ("ncf", "neumf", 2048), ("yolov3", "YOLOv3", 6)])
def test_a_job_naming_a_profiled_model_gets_its_measured_fit_and_a_narrower_band(
        model: SpreadSensitivityModel, pollux: pd.DataFrame, workload: str, name: str, batch: int) -> None:
    facts = POLLUX_MODELS[workload]
    stated = {"parameters": facts.parameters, "batch_size": batch, "model_family": facts.family,
              "precision": facts.precision}
    named, anonymous = pd.DataFrame([{**stated, "model": name}]), pd.DataFrame([stated])
    measured = fit_spread(pollux[pollux["workload"] == workload], workload)  # the workload's own Pollux fit
    for replicas, machines in ((2, 2), (8, 2), (16, 4), (64, 16)):
        mine = model.predict(named, replicas, machines).iloc[0]
        blind = model.predict(anonymous, replicas, machines).iloc[0]
        assert mine["p90"] / mine["p50"] < blind["p90"] / blind["p50"]
        assert mine["p90"] > mine["p50"]
        gpus, hosts, local, one = (np.array([float(v)]) for v in (replicas, machines, batch, 1))
        step = float(measured.step_s(gpus, hosts, local)[0])
        assert mine["p50"] == pytest.approx(step / float(measured.step_s(gpus, one, local)[0]), rel=1e-3)
        scaling = model.predict(named, replicas, machines, versus="one gpu").iloc[0]
        assert scaling["p50"] == pytest.approx(step / float(measured.step_s(one, one, local)[0]), rel=1e-3)
    curve, upper = model.curve({**stated, "model": name}), model.curve({**stated, "model": name}, "p90")
    assert curve is not None and upper is not None
    assert curve.grad_s == pytest.approx(float(measured.grad_s(batch)), rel=1e-3)
    assert curve.network_s == pytest.approx(measured.network_s, rel=1e-3)
    k, n = REFERENCE_SPREAD
    assert upper.step_s(k, n) / upper.step_s(k, 1) == pytest.approx(float(model.predict(named, k, n)["p90"].iloc[0]),
                                                                    rel=1e-6)


def test_a_named_model_fills_its_facts_and_a_contradicted_or_unknown_name_takes_the_hyperparameter_path(
        model: SpreadSensitivityModel) -> None:
    facts = POLLUX_MODELS["imagenet"]
    full = {"parameters": facts.parameters, "batch_size": 64, "model_family": "cnn", "precision": "fp32"}
    by_name = model.predict(pd.DataFrame([{"model": "resnet50", "batch_size": 64}]), 8, 2)
    pd.testing.assert_frame_equal(by_name, model.predict(pd.DataFrame([{**full, "model": "resnet50"}]), 8, 2))
    assert model.curve({"model": "resnet50", "batch_size": 64}) is not None
    assert model.curve({"model": "resnet50"}) is None  # the batch size is the job's own
    anonymous = model.predict(pd.DataFrame([full]), 8, 2)
    for other in ({"model": "resnet101"}, {"model": "resnet50", "precision": "fp16", "parameters": facts.parameters},
                  {"model": "resnet50", "parameters": 2 * facts.parameters}):
        job = pd.DataFrame([{**full, **other}])
        pd.testing.assert_frame_equal(model.predict(job, 8, 2), model.predict(job.drop(columns="model"), 8, 2))
    assert not np.allclose(by_name.to_numpy(), anonymous.to_numpy())


def test_evaluation_reports_every_check_and_predictor(pollux: pd.DataFrame, tmp_path: Path) -> None:
    sample = pollux.groupby("workload", group_keys=False).sample(frac=0.1, random_state=0)
    errors, points = evaluate_spread_sensitivity(sample)
    assert tuple(errors.columns) == ERROR_COLUMNS and tuple(points.columns) == POINT_COLUMNS
    expected = {(TARGET, check, predictor) for check in (UNSEEN_MODEL, UNSEEN_BATCH)
                for predictor in (MODEL, NO_SLOWDOWN, CLASS_BLIND)}
    expected |= {(STEP_TARGET, check, predictor) for check in (UNSEEN_MODEL, UNSEEN_BATCH)
                 for predictor in (MODEL, ANALYTICAL)}
    assert set(zip(errors["target"], errors["check"], errors["predictor"], strict=True)) == expected
    assert len(errors) == len(expected)
    spread_rows = int((sample["machines"] > 1).sum())
    for (target, _check), group in errors.groupby(["target", "check"]):
        assert (group["n"] == (spread_rows if target == TARGET else len(sample))).all()
    assert errors["male"].notna().all() and errors["p90_coverage"].between(0, 1).all()
    assert (points["p90"] >= points["p50"] - 1e-12).all()
    bands = points[points["predictor"] == MODEL].assign(band=lambda p: p["p90"] / p["p50"])
    for target in (TARGET, STEP_TARGET):  # the held-out batch sizes name their model: the profiled band
        mine = bands[bands["target"] == target].groupby("check")["band"].median()
        assert mine[UNSEEN_BATCH] < mine[UNSEEN_MODEL]
    none = points[(points["target"] == TARGET) & (points["predictor"] == NO_SLOWDOWN)]
    assert (none["p50"] == 1.0).all()
    assert (none["measured"] > 0.5).all()  # slowdowns, not step times
    no_slowdown = errors[(errors["target"] == TARGET) & (errors["predictor"] == NO_SLOWDOWN)]["male"]
    assert no_slowdown.to_numpy() == pytest.approx(np.mean(np.abs(np.log(none["measured"].to_numpy())))
                                                   * np.ones(len(no_slowdown)))
    path = plot_measured_vs_predicted(points, tmp_path / "spread.png")
    assert path.is_file() and path.stat().st_size > 0
