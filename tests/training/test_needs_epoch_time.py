"""Epoch time per GPU type from stated hyperparameters (Zeus), its ratio between types (Zeus and Gavel), and
its hold-out evaluation against the analytical baseline, on the shipped measurements."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from placement.model.gpu_types import GPU_MEM_GIB
from training.needs.epoch_time import (
    BASELINE,
    CHECK_BATCH,
    CHECK_GAVEL,
    CHECK_RATIO,
    CHECK_TYPE,
    CHECK_WORKLOAD,
    GAVEL_MODELS,
    GPU_SPECS,
    MODEL,
    PROFILED_WORKLOADS,
    RATIO_TARGET,
    SOURCE,
    TARGET,
    ZEUS_SOURCE,
    EpochTimeModel,
    evaluate_epoch_time,
    fit_epoch_time,
    gavel_ratios,
    plot_measured_vs_predicted,
    profile_rows,
)
from training.needs.scoring import ERROR_COLUMNS, POINT_COLUMNS
from training.performance.gpu_speed import DEFAULT_TYPE_ALIASES
from training.performance.profiles import ZEUS_GPU_TYPES, load_gavel, load_zeus

ZEUS_TYPES = tuple(ZEUS_GPU_TYPES.values())
SQUAD = "squad/bert_base_uncased"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return profile_rows(load_zeus()[0])


@pytest.fixture(scope="module")
def model() -> EpochTimeModel:
    return fit_epoch_time()


@pytest.fixture(scope="module")
def zeus_only() -> EpochTimeModel:
    solo, pairs = load_gavel()
    return fit_epoch_time(gavel=(solo.iloc[:0], pairs))


@pytest.fixture(scope="module")
def evaluation() -> tuple[pd.DataFrame, pd.DataFrame]:
    return evaluate_epoch_time()


def _job(**stated: object) -> pd.DataFrame:
    return pd.DataFrame([stated])


def test_rows_are_one_per_configuration_at_the_highest_power_limit(rows: pd.DataFrame) -> None:
    epochs = load_zeus()[0]
    assert not rows.duplicated(["workload", "gpu_type", "batch_size"]).any()
    assert len(rows) == len(epochs.drop_duplicates(["workload", "gpu_type", "batch_size"]))
    one = rows[(rows["workload"] == "imagenet/resnet50") & (rows["gpu_type"] == "V100") & (rows["batch_size"] == 256)]
    measured = epochs[(epochs["workload"] == "imagenet/resnet50") & (epochs["gpu_type"] == "V100")
                      & (epochs["batch_size"] == 256)]
    top = measured[measured["power_limit_w"] == measured["power_limit_w"].max()]["time_per_epoch_s"]
    assert one["epoch_s"].item() == pytest.approx(top.item())


def test_spec_table_covers_every_cluster_type_with_its_memory() -> None:
    for gpu_type in (*ZEUS_TYPES, "K80", "T4", "A10", "A100", "H100", *DEFAULT_TYPE_ALIASES):
        assert gpu_type in GPU_SPECS, gpu_type
    for gpu_type, gib in GPU_MEM_GIB.items():
        assert GPU_SPECS[gpu_type].memory_gib == gib, gpu_type
    assert GPU_SPECS["MISC"].peak_fp32_tflops == GPU_SPECS["K80"].peak_fp32_tflops


def test_bigger_batch_is_faster_where_the_data_says_so(rows: pd.DataFrame, model: EpochTimeModel) -> None:
    small = rows[rows["batch_size"] <= 32].sort_values("batch_size")
    for (workload, gpu_type), part in small.groupby(["workload", "gpu_type"]):
        falling = bool(np.all(np.diff(part["epoch_s"].to_numpy()) < 0))
        # Measured: up to batch 32 every workload gets faster per epoch except SQuAD, already flat at 8.
        assert falling == (workload != SQUAD or gpu_type == "A40"), (workload, gpu_type)
    for workload in PROFILED_WORKLOADS:
        if workload == SQUAD:
            continue
        jobs = pd.DataFrame({"model": workload, "batch_size": [8, 16, 32]})
        for gpu_type in ZEUS_TYPES:
            p50 = model.predict(jobs, gpu_type)["p50"].to_numpy()
            assert np.all(np.diff(p50) < 0), (workload, gpu_type, p50)


def test_a_faster_type_is_never_slower(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame({"parameters": [1e6, 25e6, 110e6, 3e8], "samples_per_epoch": [5e4, 1.2e6, 1e5, 1e7],
                         "batch_size": [256, 64, 16, 8], "model_family": ["cnn", "cnn", "transformer", "other"]})
    for workload in PROFILED_WORKLOADS:
        jobs = pd.concat([jobs, _job(model=workload, batch_size=32)], ignore_index=True)
    p50 = {gpu_type: model.predict(jobs, gpu_type)["p50"].to_numpy() for gpu_type in GPU_SPECS}
    assert (p50["V100"] < p50["P100"]).all()
    assert (p50["H100"] < p50["A100"]).all() and (p50["A100"] < p50["K80"]).all()
    for fast, a in GPU_SPECS.items():
        for slow, b in GPU_SPECS.items():
            if a.peak_fp32_tflops >= b.peak_fp32_tflops and a.memory_bw_gbs >= b.memory_bw_gbs:
                assert (p50[fast] <= p50[slow] * (1 + 1e-12)).all(), (fast, slow)


def test_p90_is_at_least_p50_everywhere(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame({"model": [*PROFILED_WORKLOADS, "unknown-net"], "batch_size": 64,
                         "parameters": [np.nan] * 6 + [5e7], "samples_per_epoch": [np.nan] * 6 + [2e5]})
    for gpu_type in model.gpu_types:
        out = model.predict(jobs, gpu_type)
        assert out.notna().all().all(), gpu_type
        assert (out["p90"] >= out["p50"]).all(), gpu_type
    ratio = model.ratio(jobs, "K80", "V100")
    assert (ratio["p90"] >= ratio["p50"]).all()


def test_a_new_workload_gets_a_wider_band_than_a_profiled_one(model: EpochTimeModel) -> None:
    profiled = model.predict(_job(model="imagenet/resnet50", batch_size=64), "V100").iloc[0]
    new = model.predict(_job(parameters=25_000_000, samples_per_epoch=1_000_000, model_family="cnn",
                             batch_size=64), "V100").iloc[0]
    assert new["p90"] / new["p50"] > profiled["p90"] / profiled["p50"]


def test_every_type_at_once_answers_as_each_type_alone(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame({"model": ["imagenet/resnet50", None, None],
                         "parameters": [np.nan, 5e7, 3e6], "samples_per_epoch": [np.nan, 2e5, 6e4],
                         "model_family": [None, "cnn", "transformer"], "batch_size": [64, 32, 128]})
    together = model.predict_types(jobs, model.gpu_types)
    assert list(together) == list(model.gpu_types)
    for gpu_type, answer in together.items():
        pd.testing.assert_frame_equal(answer, model.predict(jobs, gpu_type))


def test_missing_keys_give_nan(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame([{"parameters": 1e7, "batch_size": 32}, {"samples_per_epoch": 1e5, "batch_size": 32},
                         {"parameters": 1e7, "samples_per_epoch": 1e5}, {"model": "bert_base_uncased", "batch_size": 8},
                         {"parameters": 1e7, "samples_per_epoch": 1e5, "batch_size": 32}])
    out = model.predict(jobs, "A40")
    assert out.iloc[:4].isna().all().all()
    assert np.isfinite(out.iloc[4].to_numpy()).all()
    assert model.required_keys() == ("parameters", "samples_per_epoch", "batch_size")
    assert model.predict(pd.DataFrame({"batch_size": [8]}), "V100").isna().all().all()


def test_naming_a_profiled_model_fills_its_facts(model: EpochTimeModel) -> None:
    facts = PROFILED_WORKLOADS["imagenet/resnet50"]
    stated = _job(parameters=facts.parameters, samples_per_epoch=facts.samples_per_epoch,
                  model_family=facts.model_family, batch_size=128)
    for name in ("resnet50", "imagenet/resnet50", "ResNet50"):
        named = model.predict(_job(model=name, batch_size=128), "RTX6000")
        pd.testing.assert_frame_equal(named, model.predict(stated, "RTX6000"))
    # A stated key wins over the table; a network trained on two datasets needs its samples stated.
    bigger = model.predict(_job(model="resnet50", samples_per_epoch=2 * facts.samples_per_epoch, batch_size=128),
                           "RTX6000")
    assert bigger["p50"].item() > model.predict(stated, "RTX6000")["p50"].item()
    squad = PROFILED_WORKLOADS[SQUAD]
    bert = model.predict(_job(model="bert_base_uncased", samples_per_epoch=squad.samples_per_epoch, batch_size=16),
                         "V100")
    exact = model.predict(_job(model=SQUAD, batch_size=16), "V100")
    pd.testing.assert_frame_equal(bert, exact)


def test_predictions_follow_the_measurements_of_profiled_workloads(rows: pd.DataFrame,
                                                                  model: EpochTimeModel) -> None:
    errors = []
    for gpu_type, part in rows.groupby("gpu_type"):
        out = model.predict(part.assign(model=part["workload"]), str(gpu_type))
        errors.append(np.abs(np.log(out["p50"].to_numpy() / part["epoch_s"].to_numpy())))
    assert float(np.mean(np.concatenate(errors))) < 0.2


def test_unknown_gpu_type_is_refused_by_name(model: EpochTimeModel) -> None:
    job = _job(model="resnet50", batch_size=32)
    with pytest.raises(ValueError, match=r"'TPUv4'.*V100.*K80.*H100"):
        model.predict(job, "TPUv4")
    with pytest.raises(ValueError, match="'B200'"):
        model.ratio(job, "V100", "B200")


def test_ratio_is_one_law_of_the_two_types(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame({"model": ["resnet50", "ncf", "deepspeech2", None], "batch_size": [64, 1024, 16, np.nan]})
    there = model.ratio(jobs, "P100", "A100")["p50"].to_numpy()
    back = model.ratio(jobs, "A100", "P100")["p50"].to_numpy()
    via = model.ratio(jobs, "P100", "K80")["p50"].to_numpy() * model.ratio(jobs, "K80", "A100")["p50"].to_numpy()
    np.testing.assert_allclose(there * back, 1.0)
    np.testing.assert_allclose(via, there)
    # The law depends on the two types only: a job that states nothing still gets its ratio.
    assert np.isfinite(there).all() and np.allclose(there, there[0])
    same = model.ratio(jobs, "T4", "T4")
    np.testing.assert_allclose(same[["p50", "p90"]].to_numpy(), 1.0)
    for fast, a in GPU_SPECS.items():
        for slow, b in GPU_SPECS.items():
            if a.peak_fp32_tflops >= b.peak_fp32_tflops and a.memory_bw_gbs >= b.memory_bw_gbs:
                assert model.ratio(jobs.iloc[:1], slow, fast)["p50"].item() <= 1 + 1e-12, (slow, fast)


def _ratio_band(model: EpochTimeModel, from_type: str, to_type: str) -> float:
    out = model.ratio(_job(model="resnet50", batch_size=64), from_type, to_type).iloc[0]
    return float(np.log(out["p90"] / out["p50"]))


def test_a_type_neither_source_measured_gets_the_wider_ratio_band(model: EpochTimeModel) -> None:
    # K80 (Gavel's) and A40 (Zeus's) were never measured together: the larger of the two testbeds' bands.
    assert _ratio_band(model, "K80", "A40") == pytest.approx(model.bands["ratio_workload"])
    assert model.bands["ratio_workload"] == max(model.bands["ratio_workload:Zeus"], model.bands["ratio_workload:Gavel"])
    assert _ratio_band(model, "V100", "H100") == pytest.approx(max(model.bands["ratio_workload"],
                                                                   model.bands["ratio_type"]))


def test_each_testbed_calibrates_the_pairs_it_measured(model: EpochTimeModel, zeus_only: EpochTimeModel) -> None:
    zeus, gavel = model.bands["ratio_workload:Zeus"], model.bands["ratio_workload:Gavel"]
    assert dict(model.ratio_sources) == {"Gavel": ("K80", "P100", "V100"), "Zeus": ("A40", "P100", "RTX6000", "V100")}
    # Gavel's ratios are further from the law than Zeus's: its band is the wider.
    assert gavel > zeus > 0
    assert _ratio_band(model, "A40", "RTX6000") == pytest.approx(zeus)
    assert _ratio_band(model, "K80", "P100") == pytest.approx(gavel)
    # Both measured P100 and V100, and disagree most there: the larger; an alias is its chip.
    assert _ratio_band(model, "P100", "V100") == pytest.approx(max(zeus, gavel))
    assert _ratio_band(model, "P100", "V100M32") == pytest.approx(max(zeus, gavel))
    # A chip no testbed measured: the band of the testbeds that measured the other side, or "ratio_type".
    assert _ratio_band(model, "A40", "T4") == pytest.approx(max(zeus, model.bands["ratio_type"]))
    # Without Gavel's rows, Zeus's band is every measured pair's.
    assert dict(zeus_only.ratio_sources).keys() == {"Zeus"}
    assert _ratio_band(zeus_only, "P100", "V100") == pytest.approx(zeus_only.bands["ratio_workload"])


def test_a_model_pickled_without_testbed_bands_keeps_its_pooled_band(model: EpochTimeModel) -> None:
    state = dict(vars(model))
    state.pop("ratio_sources")
    older = EpochTimeModel.__new__(EpochTimeModel)
    older.__dict__.update(state)
    assert _ratio_band(older, "A40", "RTX6000") == pytest.approx(model.bands["ratio_workload"])


def test_gavel_ratios_are_training_evidence(model: EpochTimeModel, zeus_only: EpochTimeModel) -> None:
    assert model.source == SOURCE and "Gavel" in model.source and "Zeus" in model.source
    assert zeus_only.source == ZEUS_SOURCE
    assert {"K80", "P100", "V100", "A40", "RTX6000"} <= set(model.ratio_types)
    measured = gavel_ratios(load_gavel()[0])
    job = _job(model="LM", parameters=GAVEL_MODELS["LM"].parameters,
               samples_per_epoch=GAVEL_MODELS["LM"].samples_per_epoch, model_family="rnn", batch_size=20)
    for a, b in (("P100", "V100"), ("V100", "K80")):
        gavel = float(np.median(measured[(measured["from_type"] == a) & (measured["to_type"] == b)]["ratio"]))
        alone = zeus_only.ratio(job, a, b)["p50"].item()
        both = model.ratio(job, a, b)["p50"].item()
        # Trained on both sources, the ratio moves from Zeus's towards Gavel's measurements, short of them.
        assert min(alone, gavel) < both < max(alone, gavel), (a, b, alone, both, gavel)


def test_model_survives_pickling(model: EpochTimeModel) -> None:
    jobs = pd.DataFrame({"model": ["sentiment140/bert_base_uncased"], "batch_size": [64]})
    again = pickle.loads(pickle.dumps(model))
    pd.testing.assert_frame_equal(again.predict(jobs, "A10"), model.predict(jobs, "A10"))
    assert again.source == model.source and again.target == "epoch_s" and again.unit == "s"


def test_evaluation_has_every_check_for_both_predictors(evaluation: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    errors, points = evaluation
    assert tuple(errors.columns) == ERROR_COLUMNS
    assert tuple(points.columns) == POINT_COLUMNS
    assert CHECK_GAVEL == "Gavel ratios, unseen model"
    expected = {(TARGET, CHECK_BATCH), (TARGET, CHECK_WORKLOAD), (TARGET, CHECK_TYPE),
                (RATIO_TARGET, CHECK_RATIO), (RATIO_TARGET, CHECK_GAVEL)}
    for predictor in (MODEL, BASELINE):
        mine = errors[errors["predictor"] == predictor]
        assert set(zip(mine["target"], mine["check"], strict=True)) == expected
    assert errors["p90_coverage"].between(0.0, 1.0).all()
    assert (errors["n"] > 0).all() and np.isfinite(errors["male"]).all()
    # Every Zeus row is held out exactly once in each of its epoch checks; every ordered pair of types at one
    # (workload, batch size) once in its ratio check: 540 of Zeus, 144 of Gavel (24 x 3 x 2).
    assert (errors[errors["target"] == TARGET]["n"] == 208).all()
    n = errors.set_index(["check", "predictor"])["n"]
    assert (n.loc[CHECK_RATIO] == 540).all() and (n.loc[CHECK_GAVEL] == 144).all()


def test_model_beats_the_baseline_on_the_zeus_checks(evaluation: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    errors = evaluation[0].set_index(["check", "predictor"])
    for check in (CHECK_BATCH, CHECK_WORKLOAD, CHECK_TYPE, CHECK_RATIO):
        assert errors.loc[(check, MODEL), "male"] < errors.loc[(check, BASELINE), "male"], check
        # The unseen-workload band is calibrated on fits to one workload fewer than the model it serves
        # (module docstring): it covers more than 0.95, by a row.
        top = 0.97 if check == CHECK_WORKLOAD else 0.95
        assert 0.88 <= errors.loc[(check, MODEL), "p90_coverage"] <= top, check


def test_model_beats_the_baseline_on_an_unseen_gavel_model(evaluation: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    errors = evaluation[0].set_index(["check", "predictor"])
    assert errors.loc[(CHECK_GAVEL, MODEL), "male"] < errors.loc[(CHECK_GAVEL, BASELINE), "male"]
    # Calibrated on Gavel's other models (its testbed's band), not on the more numerous Zeus pairs.
    assert 0.88 <= errors.loc[(CHECK_GAVEL, MODEL), "p90_coverage"] <= 0.95


def test_plot_is_written(evaluation: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    path = plot_measured_vs_predicted(evaluation[1], tmp_path / "epoch.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
