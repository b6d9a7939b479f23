"""GPUMemNet loads with its documented columns; bad input gives one DataError naming file, line and column;
the peak-memory and utilisation estimators behave (larger batch, larger peak; P90 >= P50; NaN where a
required key is missing) and their hold-out evaluation runs.

The estimators are fitted on seeded subsamples of the shipped runs, to keep the file fast; the figures
of the full evaluation are in the module doc of ``training/needs/memory.py``.
"""

from __future__ import annotations

import csv
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from placement.model.cluster_io import data_dir
from training.ingest.errors import DataError
from training.needs.gpumemnet import COLUMNS, FILES, load_gpumemnet
from training.needs.memory import (
    BASELINE,
    MEMORY,
    MIB,
    MODEL,
    UNSEEN_ARCHITECTURES,
    UNSEEN_BATCH_SIZES,
    UTILISATION,
    MemoryBaseline,
    NeedModel,
    evaluate_memory_models,
    fit_memory_models,
    plot_measured_vs_predicted,
    right_sizing,
)
from training.needs.vocabulary import HyperparameterError

PEAK = "Max GPU Memory (MiB)"
TEST_TREES = 40
"""Fewer boosting rounds than the shipped 300, to keep the file fast."""


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return load_gpumemnet()


@pytest.fixture(scope="module")
def models(runs: pd.DataFrame) -> dict[str, NeedModel]:
    return fit_memory_models(runs.sample(n=600, random_state=0), seed=0, trees=TEST_TREES)


def test_loader_returns_the_documented_columns(runs: pd.DataFrame) -> None:
    assert tuple(runs.columns) == COLUMNS
    assert runs["file"].map(lambda f: Path(f).name).value_counts().to_dict() == {FILES[0]: 3000, FILES[1]: 3000}
    assert runs["architecture"].nunique() == 6000  # each architecture was run at one batch size
    assert not runs["architecture"].str.contains("_batch:").any()
    assert set(runs["model_family"]) == {"mlp"} and set(runs["precision"]) == {"fp32"}
    assert (runs["activation"] == runs["activation"].str.lower()).all()
    assert {"relu", "gelu", "leakyrelu"} <= set(runs["activation"])
    step1 = runs[runs["file"].str.endswith(FILES[0])]
    assert (step1["batchnorm_layers"] == 0).all() and (step1["dropout_layers"] == 0).all()
    assert runs["batchnorm_layers"].max() > 0 and runs["dropout_layers"].max() > 0
    for column in ("layers", "parameters", "activations", "batch_size", "line"):
        assert runs[column].dtype == np.int64, column
    assert runs["peak_mib"].between(1443, 4925).all() and runs["gpu_util_pct"].between(0, 100).all()
    # step 1, line 2: input:1259_output:79_depth:8_arch:pyramid_batch:717.out,9,"[...]",ReLU,3069,1083897,717,1479,...
    first = runs.iloc[0]
    assert first["architecture"] == "input:1259_output:79_depth:8_arch:pyramid.out"
    assert (first["line"], first["layers"], first["activations"], first["parameters"], first["batch_size"],
            first["peak_mib"]) == (2, 9, 3069, 1083897, 717, 1479.0)
    assert first["gpu_util_pct"] == pytest.approx(25.653846153846153)


def _edited_copy(tmp_path: Path, edit: str) -> Path:
    """Both files copied into tmp_path, the step-1 file changed by ``edit``."""
    for name in FILES:
        shutil.copy(data_dir() / "gpumemnet" / name, tmp_path / name)
    path = tmp_path / FILES[0]
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    if edit == "missing column":
        drop = header.index(PEAK)
        rows = [r[:drop] + r[drop + 1:] for r in rows]
    elif edit == "negative peak":
        rows[3][header.index(PEAK)] = "-1479"  # line 4
    elif edit == "text batch size":
        rows[6][header.index("Batch Size")] = "large"  # line 7
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return tmp_path


@pytest.mark.parametrize(("edit", "line", "column", "value"), [
    ("missing column", 1, PEAK, None),
    ("negative peak", 4, PEAK, "-1479"),
    ("text batch size", 7, "Batch Size", "large"),
])
def test_bad_input_names_file_line_and_column(tmp_path: Path, edit: str, line: int, column: str,
                                              value: str | None) -> None:
    folder = _edited_copy(tmp_path, edit)
    with pytest.raises(DataError) as caught:
        load_gpumemnet(folder)
    error = caught.value
    assert (Path(error.path).name, error.line, error.column, error.value) == (FILES[0], line, column, value)
    message = str(error)
    assert FILES[0] in message and f"line {line}" in message and f"column '{column}'" in message


def test_the_untouched_copy_loads(tmp_path: Path) -> None:
    assert len(load_gpumemnet(_edited_copy(tmp_path, "none"))) == 6000


def test_baseline_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"parameters": rng.integers(10_000, 100_000_000, 300),
                          "activations": rng.integers(10, 100_000, 300), "batch_size": rng.integers(4, 1024, 300)})
    frame["peak_mib"] = (1450 + 4 * 4 * frame["parameters"] / MIB
                         + 4 * 2 * frame["batch_size"] * frame["activations"] / MIB)
    frame.loc[0, "peak_mib"] = 1460.0  # one run far below the formula is left out of the refit
    fitted = MemoryBaseline.fit(frame)
    assert fitted.context_mib == pytest.approx(1450, rel=1e-3)
    assert fitted.values_per_parameter == pytest.approx(4, rel=1e-3)
    assert fitted.values_per_activation == pytest.approx(2, rel=1e-3)


def test_a_larger_batch_of_the_same_architecture_gets_a_larger_peak(runs: pd.DataFrame,
                                                                    models: dict[str, NeedModel]) -> None:
    batches = np.array([4, 16, 64, 256, 1024, 4096])
    archs = runs.sample(n=300, random_state=1)
    grid = archs.loc[archs.index.repeat(len(batches))].assign(batch_size=np.tile(batches, len(archs)))
    p50 = models[MEMORY].predict(grid)["p50"].to_numpy().reshape(len(archs), len(batches))
    rising = (np.diff(p50, axis=1) > 0).all(axis=1)
    assert rising.all(), archs["architecture"][~rising].tolist()[:3]
    assert (p50[:, 0] > 1400).all()  # the CUDA context is there at any size


def test_p90_is_at_least_p50_and_utilisation_stays_a_percentage(runs: pd.DataFrame,
                                                                models: dict[str, NeedModel]) -> None:
    rows = runs.sample(n=300, random_state=2)
    for target, model in models.items():
        predicted = model.predict(rows)
        assert predicted.index.equals(rows.index)
        assert predicted.notna().all().all(), target
        assert (predicted["p90"] >= predicted["p50"]).all(), target
        assert (predicted["p90"] > predicted["p50"]).mean() > 0.5, target
    util = models[UTILISATION].predict(rows)
    assert util["p50"].between(0, 100).all() and util["p90"].between(0, 100).all()
    assert models[MEMORY].unit == "MiB" and models[UTILISATION].unit == "%"
    assert "GPUMemNet" in models[MEMORY].source and "CC BY 4.0" in models[MEMORY].source


def test_missing_keys_give_nan(models: dict[str, NeedModel]) -> None:
    stated = pd.DataFrame({"parameters": [5e6, 5e6, 5e6, np.nan, 5e6],
                           "activations": [8000, np.nan, 8000, 8000, 8000],
                           "batch_size": [256, 256, 0, 256, 256],
                           "layers": [6, 6, 6, 6, np.nan]})
    memory = models[MEMORY].predict(stated)
    assert memory["p50"].isna().tolist() == [False, True, True, True, False]
    assert memory["p90"].isna().tolist() == [False, True, True, True, False]
    util = models[UTILISATION].predict(stated)  # activations are not required for utilisation
    assert util["p50"].isna().tolist() == [False, False, True, True, False]
    assert models[MEMORY].required_keys() == ("parameters", "batch_size", "activations")
    assert models[UTILISATION].required_keys() == ("parameters", "batch_size")
    no_batch = models[MEMORY].predict(stated.drop(columns="batch_size"))
    assert no_batch["p50"].isna().all()


def test_half_precision_shrinks_only_the_activation_part(models: dict[str, NeedModel]) -> None:
    job = {"parameters": 2e7, "activations": 60_000, "batch_size": 1000, "layers": 8}
    stated = pd.DataFrame([{**job, "precision": p} for p in ("fp32", "amp", "bf16")])
    p50 = models[MEMORY].predict(stated)["p50"].to_numpy()
    context = models[MEMORY].baseline.context_mib
    assert p50[0] > p50[1] == pytest.approx(p50[2])
    assert p50[1] - context > 0.5 * (p50[0] - context)  # the parameter part is kept
    with pytest.raises(HyperparameterError, match="precision"):
        models[MEMORY].predict(pd.DataFrame([{**job, "precision": "int3"}]))


def test_a_model_survives_pickling(runs: pd.DataFrame, models: dict[str, NeedModel]) -> None:
    rows = runs.head(20)
    for model in models.values():
        again = pickle.loads(pickle.dumps(model))
        pd.testing.assert_frame_equal(again.predict(rows), model.predict(rows))


def test_evaluation_on_a_subsample(runs: pd.DataFrame, tmp_path: Path) -> None:
    sample = runs.sample(n=200, random_state=3)
    errors, points = evaluate_memory_models(sample, seed=0, trees=TEST_TREES)
    keys = set(errors[["target", "check", "predictor"]].itertuples(index=False, name=None))
    assert keys == {(t, c, p) for t in (MEMORY, UTILISATION) for c in (UNSEEN_ARCHITECTURES, UNSEEN_BATCH_SIZES)
                    for p in (MODEL, BASELINE)}
    assert (errors["n"] == 200).all()
    assert errors["p90_coverage"].between(0, 1).all() and (errors["male"] > 0).all()
    assert np.isfinite(errors["male"]).all()
    memory = errors[errors["target"] == MEMORY].set_index(["check", "predictor"])["male"]
    assert memory.max() < 0.1  # the CUDA context alone keeps every memory estimate within ~10 %
    assert tuple(points.columns) == ("target", "check", "predictor", "measured", "p50", "p90")
    assert len(points) == 8 * 200 and (points["p90"] >= points["p50"]).all()
    sized = right_sizing(points, check=UNSEEN_ARCHITECTURES)
    assert sized["jobs"] == 200 and sized["request_mib"] == 40960
    assert 0 <= sized["crash_share"] <= 1 and 0 < sized["p90_gpu_share_mean"] < 0.2
    assert sized["freed_mib_mean"] == pytest.approx(sized["freed_share"] * 40960)
    held = points[(points["target"] == MEMORY) & (points["predictor"] == MODEL)
                  & (points["check"] == UNSEEN_ARCHITECTURES)]
    assert sized["crash_share"] == pytest.approx(float((held["measured"] > held["p90"]).mean()))
    assert right_sizing(points)["jobs"] == 400  # both checks
    png = plot_measured_vs_predicted(points, tmp_path / "memory.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_right_sizing_counts_crashes_and_freed_memory() -> None:
    points = pd.DataFrame({"target": MEMORY, "check": UNSEEN_ARCHITECTURES, "predictor": MODEL,
                           "measured": [1000.0, 2000.0, 3000.0, 5000.0], "p50": 1.0,
                           "p90": [1100.0, 2100.0, 2900.0, 5000.0]})
    sized = right_sizing(points, gpu_mem_mib=10_000)
    assert sized["crash_share"] == 0.25
    assert sized["freed_mib_mean"] == pytest.approx(10_000 - (1100 + 2100 + 2900 + 5000) / 4)
    assert sized["p90_gpu_share_mean"] == pytest.approx((1100 + 2100 + 2900 + 5000) / 4 / 10_000)
    assert math.isclose(sized["freed_share"] + sized["p90_gpu_share_mean"], 1.0)
    with pytest.raises(ValueError, match="no held-out memory points"):
        right_sizing(points.assign(check=UNSEEN_BATCH_SIZES), check=UNSEEN_ARCHITECTURES)
