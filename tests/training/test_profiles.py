"""The real Pollux, Gavel and Zeus profiles load with the figures they hold; bad input gives one DataError.

The bad-input cases write small SYNTHETIC files into a temporary folder; the figures checked in the
first tests come from the shipped copies under data/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from placement.model.cluster_io import data_dir
from training.ingest.errors import DataError
from training.performance.profiles import (
    GAVEL_GPU_TYPES,
    POLLUX_WORKLOADS,
    ZEUS_GPU_TYPES,
    load_gavel,
    load_pollux,
    load_zeus,
)

REPO = Path(__file__).resolve().parents[2]


def _csv_rows(path: Path) -> int:
    return len(path.read_text().splitlines()) - 1  # less the header line


def test_real_pollux_profiles_load() -> None:
    frame = load_pollux()
    assert tuple(sorted(frame["workload"].unique())) == POLLUX_WORKLOADS
    folder = data_dir() / "profiles" / "pollux"
    assert len(frame) == sum(_csv_rows(p) for p in folder.glob("*.csv")) == 7103
    assert (frame["step_time_s"] > 0).all() and (frame["sync_time_s"] >= 0).all()
    # "1112": four machines with 1 + 1 + 1 + 2 = 5 GPUs
    row = frame[(frame["kind"] == "placements") & (frame["placement"] == "1112")].iloc[0]
    assert (row["gpus"], row["machines"]) == (5, 4)
    scal = frame[frame["kind"] == "scalability"]
    # 16 nodes, 64 replicas: 4 per node; 6 nodes, 10 replicas: no even spread
    assert set(scal[(scal["machines"] == 16) & (scal["gpus"] == 64)]["placement"]) == {"4" * 16}
    assert set(scal[(scal["machines"] == 6) & (scal["gpus"] == 10)]["placement"]) == {""}
    first = frame.iloc[0]  # bert_placements.csv line 2: 1,4,0.45532354712486267,0.013738612174987792
    assert (first["file"].endswith("bert_placements.csv"), first["line"], first["local_bsz"]) == (True, 2, 4)
    assert first["step_time_s"] == pytest.approx(0.45532354712486267)


def test_real_gavel_profiles_load() -> None:
    solo, pairs = load_gavel()
    assert set(solo["gpu_type"]) == set(pairs["gpu_type"]) == set(GAVEL_GPU_TYPES.values())
    # 83 jobs per key, 77 under k80_unconsolidated; three K80 entries are 0.0 (not run) and left out
    assert len(solo) == 83 * 5 + 77 - 3 == 489
    assert (solo["throughput"] > 0).all()
    assert set(solo[solo["batch_size"] == -1]["model"]) == {"A3C", "CycleGAN"}
    first = solo.iloc[0]  # k80 > ('ResNet-18 (batch size 16)', 1) > null
    assert (first["model"], first["batch_size"], first["scale_factor"], first["gpu_type"], first["consolidated"]) \
        == ("ResNet-18", 16, 1, "K80", True)
    assert first["throughput"] == pytest.approx(4.795294551566172)
    assert len(pairs) == 5277
    keys = ["gpu_type", "scale_factor", "model_a", "batch_a", "model_b", "batch_b"]
    mirrored = pairs.rename(columns={"model_a": "model_b", "batch_a": "batch_b", "model_b": "model_a",
                                     "batch_b": "batch_a", "throughput_a": "throughput_b",
                                     "throughput_b": "throughput_a", "solo_a": "solo_b", "solo_b": "solo_a"})
    both = pairs.merge(mirrored, on=keys, suffixes=("", "_mirror"), validate="one_to_one")
    assert len(both) == len(pairs)
    assert (both["throughput_a"] == both["throughput_a_mirror"]).all()
    assert (both["throughput_b"] == both["throughput_b_mirror"]).all()
    assert (both["solo_b"] == both["solo_b_mirror"]).all()


def test_real_zeus_profiles_load() -> None:
    epochs, runs = load_zeus()
    counts = epochs.groupby("gpu_type").size().to_dict()
    assert counts == {"V100": 476, "A40": 453, "RTX6000": 410, "P100": 270}
    assert set(counts) == set(ZEUS_GPU_TYPES.values())
    assert len(runs) == 3759
    assert runs["workload"].nunique() == epochs["workload"].nunique() == 6
    # 849 runs never reached their target (the source writes "nan")
    assert runs["target_epoch"].isna().sum() == 849
    v100 = epochs[(epochs["gpu_type"] == "V100") & (epochs["workload"] == "imagenet/resnet50")
                  & (epochs["batch_size"] == 256) & (epochs["power_limit_w"] == 100)]
    # summary_power_v100.csv: imagenet,resnet50,256,adadelta,100,6781.173333333332,98.38240555274153
    assert v100["time_per_epoch_s"].tolist() == pytest.approx([6781.173333333332])
    assert v100["average_power_w"].tolist() == pytest.approx([98.38240555274153])


# -- bad input (SYNTHETIC files) -------------------------------------------------------------------------------------

PLACEMENTS = ["placement,local_bsz,step_time,sync_time", "1,4,0.45,0.01", "1112,4,0.9,0.2"]
SCALABILITY = ["num_nodes,num_replicas,local_bsz,step_time,sync_time", "6,6,4,1.49,1.09", "6,10,4,1.6,1.1"]
POWER = ["dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power",
         "imagenet,resnet50,256,adadelta,100,6781.17,98.38", "imagenet,resnet50,256,adadelta,150,4148.66,144.59"]
TRAIN = ["dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch",
         "squad,bert_base_uncased,12,adamw,3.00e-6,1,82.5,3", "squad,bert_base_uncased,12,adamw,3.00e-6,2,82.5,nan"]
JOB = "('ResNet-18 (batch size 16)', 1)"
OTHER = "('A3C', 1)"
GAVEL: dict[str, dict[str, dict[str, object]]] = {
    "k80": {JOB: {"null": 4.8, JOB: [2.4, 2.4], OTHER: [2.0, 1.0]}, OTHER: {"null": 3.0, JOB: [1.0, 2.0]}},
    "k80_unconsolidated": {JOB: {"null": 4.7}},
}


def _gavel(type_key: str, job: str, entry: str, value: object) -> str:
    doc = json.loads(json.dumps(GAVEL))
    doc.setdefault(type_key, {}).setdefault(job, {"null": 1.0})[entry] = value
    return json.dumps(doc)


def _pollux_folder(root: Path) -> Path:
    for workload in POLLUX_WORKLOADS:
        (root / f"{workload}_placements.csv").write_text("\n".join(PLACEMENTS) + "\n")
        (root / f"{workload}_scalability.csv").write_text("\n".join(SCALABILITY) + "\n")
    return root


def _zeus_folder(root: Path) -> Path:
    for key in ZEUS_GPU_TYPES:
        (root / f"summary_power_{key}.csv").write_text("\n".join(POWER) + "\n")
    (root / "summary_train.csv").write_text("\n".join(TRAIN) + "\n")
    return root


def _gavel_file(root: Path) -> Path:
    path = root / "simulation_throughputs.json"
    path.write_text(json.dumps(GAVEL))
    return path


SOURCES: dict[str, tuple[Callable[[Path], Path], Callable[[Path], object]]] = {
    # source: (write good synthetic files into a folder and return what the loader takes, loader)
    "pollux": (_pollux_folder, load_pollux),
    "gavel": (_gavel_file, load_gavel),
    "zeus": (_zeus_folder, load_zeus),
}


def _lines(lines: list[str], row: int, old: str, new: str) -> str:
    """``lines`` with ``old`` replaced by ``new`` in list item ``row`` (file line ``row + 1``)."""
    changed = list(lines)
    changed[row] = changed[row].replace(old, new, 1)
    return "\n".join(changed) + "\n"


CASES: list[tuple[str, str, str, str | None, int | None, str | None, str]] = [
    # (case, source, file, new content or None to delete it, expected line, expected column, words)
    ("pollux missing column", "pollux", "cifar10_placements.csv", _lines(PLACEMENTS, 0, ",sync_time", "")
     .replace(",0.01\n", "\n").replace(",0.2\n", "\n"), None, "sync_time", "missing column"),
    ("pollux negative step time", "pollux", "ncf_placements.csv", _lines(PLACEMENTS, 2, ",0.9,", ",-0.9,"), 3,
     "step_time", "negative"),
    ("pollux zero step time", "pollux", "bert_scalability.csv", _lines(SCALABILITY, 1, ",1.49,", ",0,"), 2,
     "step_time", "greater than 0"),
    ("pollux negative sync time", "pollux", "yolov3_scalability.csv", _lines(SCALABILITY, 2, ",1.1", ",-0.1"), 3,
     "sync_time", "negative"),
    ("pollux batch not a number", "pollux", "bert_placements.csv", _lines(PLACEMENTS, 1, ",4,", ",four,"), 2,
     "local_bsz", "not a number"),
    ("pollux placement with a zero", "pollux", "imagenet_placements.csv", _lines(PLACEMENTS, 2, "1112", "1012"), 3,
     "placement", "one digit 1-9"),
    ("pollux placement not digits", "pollux", "imagenet_placements.csv", _lines(PLACEMENTS, 1, "1,", "1x2,"), 2,
     "placement", "one digit 1-9"),
    ("pollux fractional replicas", "pollux", "ncf_scalability.csv", _lines(SCALABILITY, 2, "6,10", "6,10.5"), 3,
     "num_replicas", "whole number"),
    ("pollux missing file", "pollux", "deepspeech2_scalability.csv", None, None, None, "file not found"),
    ("gavel unknown GPU type", "gavel", "simulation_throughputs.json", _gavel("a100", JOB, "null", 9.0), None,
     "gpu_type", "unknown GPU type"),
    ("gavel negative throughput", "gavel", "simulation_throughputs.json", _gavel("k80", JOB, "null", -4.8), None,
     "throughput", f"k80 > {JOB} > null: throughput must not be negative"),
    ("gavel throughput not a number", "gavel", "simulation_throughputs.json",
     _gavel("k80_unconsolidated", JOB, "null", "fast"), None, "throughput", "not a number"),
    ("gavel infinite pair throughput", "gavel", "simulation_throughputs.json",
     _gavel("k80", OTHER, JOB, [1.0, float("inf")]), None, "throughput_b", f"k80 > {OTHER} > {JOB}"),
    ("gavel job key not a tuple", "gavel", "simulation_throughputs.json", _gavel("k80", "ResNet-18", "null", 1.0),
     None, "model", "job key"),
    ("zeus unknown GPU type", "zeus", "summary_power_h100.csv", "\n".join(POWER) + "\n", None, None,
     "unknown GPU type 'h100'"),
    ("zeus negative epoch time", "zeus", "summary_power_a40.csv", _lines(POWER, 2, ",4148.66,", ",-4148.66,"), 3,
     "time_per_epoch", "negative"),
    ("zeus zero epoch time", "zeus", "summary_power_p100.csv", _lines(POWER, 1, ",6781.17,", ",0.0,"), 2,
     "time_per_epoch", "greater than 0"),
    ("zeus batch not a number", "zeus", "summary_power_v100.csv", _lines(POWER, 1, ",256,", ",big,"), 2,
     "batch_size", "not a number"),
    ("zeus missing column", "zeus", "summary_power_rtx6000.csv", _lines(POWER, 0, ",average_power", ""), None,
     "average_power", "missing column"),
    ("zeus negative target epoch", "zeus", "summary_train.csv", _lines(TRAIN, 1, ",82.5,3", ",82.5,-3"), 2,
     "target_epoch", "negative"),
    ("zeus target epoch text", "zeus", "summary_train.csv", _lines(TRAIN, 2, ",nan", ",never"), 3, "target_epoch",
     "not a number"),
    ("zeus missing file", "zeus", "summary_power_p100.csv", None, None, None, "file not found"),
]


@pytest.mark.parametrize(("case", "source", "name", "content", "line", "column", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_profile_names_file_line_and_column(tmp_path: Path, case: str, source: str, name: str,
                                                content: str | None, line: int | None, column: str | None,
                                                words: str) -> None:
    write, load = SOURCES[source]
    target = write(tmp_path)
    path = tmp_path / name
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    with pytest.raises(DataError) as info:
        load(target)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert words in str(err)
    assert str(path) in str(err)


@pytest.mark.parametrize("source", ["pollux", "zeus"])
def test_missing_folder(tmp_path: Path, source: str) -> None:
    with pytest.raises(DataError, match="folder not found"):
        SOURCES[source][1](tmp_path / "nope")


def test_good_synthetic_profiles_load(tmp_path: Path) -> None:
    (tmp_path / "pollux").mkdir()
    (tmp_path / "zeus").mkdir()
    pollux = load_pollux(_pollux_folder(tmp_path / "pollux"))
    # per workload: 2 placement rows + 2 scalability rows; 6,10 is no even spread, 6,6 is "111111"
    assert len(pollux) == 4 * len(POLLUX_WORKLOADS)
    assert pollux["placement"].head(4).tolist() == ["1", "1112", "111111", ""]
    solo, pairs = load_gavel(_gavel_file(tmp_path))
    assert solo[["model", "batch_size", "consolidated"]].values.tolist() == [
        ["ResNet-18", 16, True], ["A3C", -1, True], ["ResNet-18", 16, False]]
    # (ResNet-18, A3C) on a K80: ResNet-18 keeps 2.0 of its 4.8 steps/s alone, A3C 1.0 of its 3.0
    row = pairs[(pairs["model_a"] == "ResNet-18") & (pairs["model_b"] == "A3C")].iloc[0]
    assert row[["throughput_a", "throughput_b", "solo_a", "solo_b"]].tolist() == [2.0, 1.0, 4.8, 3.0]
    epochs, runs = load_zeus(_zeus_folder(tmp_path / "zeus"))
    assert len(epochs) == 2 * len(ZEUS_GPU_TYPES)
    assert runs["target_epoch"].isna().tolist() == [False, True]


def test_command_line_exits_2_on_bad_profiles(tmp_path: Path) -> None:
    bad = tmp_path / "synthetic_gavel.json"  # SYNTHETIC: a GPU type gpuplace does not know
    bad.write_text(_gavel("a100", JOB, "null", 9.0))
    env = {**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "service.cli", "performance", "profiles", "--gavel", str(bad)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 2, out.stderr
    message = out.stderr.replace("\n", "")
    assert f"{bad}, column 'gpu_type'" in message and "unknown GPU type" in message


def test_command_line_exits_2_on_a_negative_gpu_memory(tmp_path: Path) -> None:
    folder = tmp_path / "gpumemnet"  # the shipped runs with one peak made negative
    folder.mkdir()
    for name in ("mlp_data_step1.csv", "mlp_data_step2.csv"):
        lines = (REPO / "data" / "gpumemnet" / name).read_text().splitlines(keepends=True)
        if name.endswith("2.csv"):
            header = lines[0].rstrip("\n").split(",")
            at = header.index("Max GPU Memory (MiB)") - len(header)  # from the end: the list column has commas
            cells = lines[5].rstrip("\n").split(",")
            cells[at] = "-1545"
            lines[5] = ",".join(cells) + "\n"
        (folder / name).write_text("".join(lines))
    env = {**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "service.cli", "performance", "profiles", "--gpumemnet", str(folder)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 2, out.stderr
    message = out.stderr.replace("\n", "")
    assert "mlp_data_step2.csv" in message and "line 6" in message and "Max GPU Memory (MiB)" in message


def test_command_line_lists_the_shipped_profiles(tmp_path: Path) -> None:
    env = {**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "service.cli", "performance", "profiles"], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    for figure in ("7,103", "489", "5,277", "1,609", "3,759", "RTX6000", "6,000"):
        assert figure in out.stdout


def test_loaders_return_the_documented_columns() -> None:
    frames: list[pd.DataFrame] = [load_pollux(), *load_gavel(), *load_zeus()]
    assert [list(f.columns) for f in frames] == [
        ["workload", "kind", "placement", "gpus", "machines", "local_bsz", "step_time_s", "sync_time_s", "file",
         "line"],
        ["model", "batch_size", "scale_factor", "gpu_type", "consolidated", "throughput"],
        ["gpu_type", "scale_factor", "model_a", "batch_a", "model_b", "batch_b", "throughput_a", "throughput_b",
         "solo_a", "solo_b"],
        ["workload", "gpu_type", "batch_size", "power_limit_w", "time_per_epoch_s", "average_power_w", "file",
         "line"],
        ["workload", "batch_size", "optimizer", "learning_rate", "run", "target_metric", "target_epoch", "file",
         "line"],
    ]
