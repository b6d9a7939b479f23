"""Loading the real job-performance profiles (Pollux, Gavel, Zeus) into tidy, checked tables.

Every figure is checked on the way in: a bad cell raises :class:`DataError` naming the file, the
1-based line (CSV) or the key path (JSON, e.g. ``k80 > ('ResNet-18 (batch size 16)', 1)``), the
column and the value. Units are in the column names: ``_s`` seconds, ``_w`` watts; Gavel's
throughput is training steps per second, as Gavel records it.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from placement.model.cluster_io import data_dir
from training.ingest.errors import DataError
from training.ingest.readers import (
    integer_cells,
    line_numbers,
    numeric,
    positive_cells,
    raise_first,
    read_text_csv,
    text_cells,
)

POLLUX_WORKLOADS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
GAVEL_GPU_TYPES = {"k80": "K80", "p100": "P100", "v100": "V100"}
ZEUS_GPU_TYPES = {"v100": "V100", "a40": "A40", "rtx6000": "RTX6000", "p100": "P100"}

POLLUX_COLUMNS = ("workload", "kind", "placement", "gpus", "machines", "local_bsz", "step_time_s", "sync_time_s",
                  "file", "line")
GAVEL_SOLO_COLUMNS = ("model", "batch_size", "scale_factor", "gpu_type", "consolidated", "throughput")
GAVEL_PAIR_COLUMNS = ("gpu_type", "scale_factor", "model_a", "batch_a", "model_b", "batch_b", "throughput_a",
                      "throughput_b", "solo_a", "solo_b")
ZEUS_EPOCH_COLUMNS = ("workload", "gpu_type", "batch_size", "power_limit_w", "time_per_epoch_s", "average_power_w",
                      "file", "line")
ZEUS_RUN_COLUMNS = ("workload", "batch_size", "optimizer", "learning_rate", "run", "target_metric", "target_epoch",
                    "file", "line")

NO_BATCH_SIZE = -1
"""Gavel batch size of a model whose key names none (A3C, CycleGAN)."""
UNCONSOLIDATED = "_unconsolidated"
_PLACEMENT_RAW = ("placement", "local_bsz", "step_time", "sync_time")
_SCALABILITY_RAW = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
_ZEUS_POWER_RAW = ("dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch",
                   "average_power")
_ZEUS_TRAIN_RAW = ("dataset", "network", "batch_size", "optimizer", "learning_rate", "run", "target_metric",
                   "target_epoch")
_GAVEL_NAME = re.compile(r"(?P<model>.+?) \(batch size (?P<batch>\d+)\)")
_JobKey = tuple[str, int, int]


def load_pollux(folder: Path | None = None) -> pd.DataFrame:
    """Both kinds of Pollux files of every workload. Columns:
    workload (str), kind ("placements" | "scalability"), placement (str, e.g. "1112"; for scalability
    rows the even placement implied, or "" if num_replicas is not a multiple of num_nodes),
    gpus (int = replicas), machines (int), local_bsz (int), step_time_s (float > 0), sync_time_s (float >= 0),
    file (str), line (int)."""
    root = _folder(folder if folder is not None else data_dir() / "profiles" / "pollux")
    frames: list[pd.DataFrame] = []
    for workload in POLLUX_WORKLOADS:
        frames.append(_pollux_placements(root / f"{workload}_placements.csv", workload))
        frames.append(_pollux_scalability(root / f"{workload}_scalability.csv", workload))
    return pd.concat(frames, ignore_index=True)[list(POLLUX_COLUMNS)]


def _pollux_placements(path: Path, workload: str) -> pd.DataFrame:
    raw = read_text_csv(path, _PLACEMENT_RAW)
    text = raw["placement"]
    bad = ~text.fillna("").str.fullmatch(r"[1-9]+").to_numpy(dtype=bool)
    raise_first(raw, "placement", path, bad, "must give GPUs per machine, one digit 1-9 each (e.g. '1112')")
    placement = text.astype(str)
    gpus = placement.map(lambda p: sum(int(c) for c in p))
    return _pollux_frame(raw, path, workload, "placements", placement, gpus, placement.str.len())


def _pollux_scalability(path: Path, workload: str) -> pd.DataFrame:
    raw = read_text_csv(path, _SCALABILITY_RAW)
    nodes = integer_cells(raw, "num_nodes", path, minimum=1)
    replicas = integer_cells(raw, "num_replicas", path, minimum=1)
    raise_first(raw, "num_replicas", path, (replicas < nodes).to_numpy(), "must be at least num_nodes")
    per_node = replicas // nodes
    # A placement string has one digit per machine, so only an even spread of 1-9 GPUs can be written.
    even = ((replicas % nodes == 0) & (per_node <= 9)).to_numpy()
    placement = pd.Series([str(p) * n if ok else "" for p, n, ok in zip(per_node, nodes, even, strict=True)],
                          dtype=str)
    return _pollux_frame(raw, path, workload, "scalability", placement, replicas, nodes)


def _pollux_frame(raw: pd.DataFrame, path: Path, workload: str, kind: str, placement: pd.Series,
                  gpus: pd.Series, machines: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({
        "workload": workload,
        "kind": kind,
        "placement": placement.to_numpy(),
        "gpus": gpus.to_numpy(dtype=np.int64),
        "machines": machines.to_numpy(dtype=np.int64),
        "local_bsz": integer_cells(raw, "local_bsz", path, minimum=1).to_numpy(),
        "step_time_s": positive_cells(raw, "step_time", path).to_numpy(),
        "sync_time_s": numeric(raw, "sync_time", path, allow_missing=False, non_negative=True).to_numpy(),
        "file": str(path),
        "line": line_numbers(raw),
    })


def load_gavel(path: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(solo, pairs). solo columns: model (e.g. "ResNet-50"), batch_size (int; NaN->-1 for models with none,
    e.g. "A3C", "CycleGAN"), scale_factor (int), gpu_type ("K80"|"P100"|"V100"), consolidated (bool:
    False for the *_unconsolidated keys), throughput (float > 0, steps/s as Gavel records it, the 'null' entry).
    pairs columns (consolidated keys only): gpu_type, scale_factor, model_a, batch_a, model_b, batch_b,
    throughput_a, throughput_b (co-located, each job's own), solo_a, solo_b (each job's 'null' throughput).

    Gavel records a throughput of 0.0 where it has no measurement (three K80 solo entries, and most
    pairs): such solo entries are left out, such pairs are kept with their zeros.
    """
    path = path if path is not None else data_dir() / "profiles" / "gavel" / "simulation_throughputs.json"
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not well-formed JSON: {exc.msg}", exc.lineno) from exc
    if not isinstance(doc, dict) or not doc:
        raise DataError(path, "the top level must map GPU types to measurements")
    solo: list[tuple[Any, ...]] = []
    pairs: list[tuple[Any, ...]] = []
    for type_key, jobs in doc.items():
        type_solo, type_pairs = _gavel_type(path, type_key, jobs)
        solo += type_solo
        pairs += type_pairs
    return (pd.DataFrame(solo, columns=list(GAVEL_SOLO_COLUMNS)),
            pd.DataFrame(pairs, columns=list(GAVEL_PAIR_COLUMNS)))


def _gavel_type(path: Path, type_key: str, jobs: object) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    base = type_key.removesuffix(UNCONSOLIDATED)
    if base not in GAVEL_GPU_TYPES:
        raise DataError(path, f"{type_key}: unknown GPU type; expected one of {', '.join(GAVEL_GPU_TYPES)}, "
                              f"optionally with '{UNCONSOLIDATED}'", None, "gpu_type", type_key)
    if not isinstance(jobs, dict):
        raise DataError(path, f"{type_key}: must map job keys to throughputs", None, "gpu_type", type_key)
    gpu_type, consolidated = GAVEL_GPU_TYPES[base], not type_key.endswith(UNCONSOLIDATED)
    keys = {key: _gavel_job(path, f"{type_key} > {key}", key) for key in jobs}
    alone: dict[str, float] = {}
    for key, entries in jobs.items():
        where = f"{type_key} > {key}"
        if not isinstance(entries, dict) or "null" not in entries:
            raise DataError(path, f"{where}: no 'null' (alone) throughput", None, "throughput")
        alone[key] = _throughput(path, f"{where} > null", "throughput", entries["null"])
    solo = [(*keys[key][:2], keys[key][2], gpu_type, consolidated, value)
            for key, value in alone.items() if value > 0]
    pairs = _gavel_pairs(path, type_key, jobs, keys, alone)
    return solo, [(gpu_type, *row) for row in pairs] if consolidated else []


def _gavel_pairs(path: Path, type_key: str, jobs: dict[str, Any], keys: dict[str, _JobKey],
                 alone: dict[str, float]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for key, entries in jobs.items():
        model_a, batch_a, scale = keys[key]
        for other, pair in entries.items():
            if other == "null":
                continue
            where = f"{type_key} > {key} > {other}"
            model_b, batch_b, scale_b = _gavel_job(path, where, other)
            if other not in alone:
                raise DataError(path, f"{where}: the co-located job has no entry of its own", None, "model_b", other)
            if scale_b != scale:
                raise DataError(path, f"{where}: co-located jobs must have the same scale factor", None,
                                "scale_factor", scale_b)
            if not isinstance(pair, list) or len(pair) != 2:
                raise DataError(path, f"{where}: must be an [own, other] pair of throughputs", None,
                                "throughput_a", pair)
            own = _throughput(path, where, "throughput_a", pair[0])
            theirs = _throughput(path, where, "throughput_b", pair[1])
            rows.append((scale, model_a, batch_a, model_b, batch_b, own, theirs, alone[key], alone[other]))
    return rows


def _gavel_job(path: Path, where: str, key: str) -> _JobKey:
    """(model, batch size, scale factor) of a key such as "('ResNet-18 (batch size 16)', 1)"."""
    try:
        parsed = ast.literal_eval(key)
    except (ValueError, SyntaxError, TypeError):
        parsed = None
    if not (isinstance(parsed, tuple) and len(parsed) == 2 and isinstance(parsed[0], str)
            and type(parsed[1]) is int and parsed[1] >= 1):
        raise DataError(path, f"{where}: a job key must read \"('<model> (batch size <n>)', <scale factor>)\"",
                        None, "model", key)
    name, scale = parsed
    match = _GAVEL_NAME.fullmatch(name)
    if match is None:
        return name, NO_BATCH_SIZE, scale
    return match["model"], int(match["batch"]), scale


def _throughput(path: Path, where: str, column: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(path, f"{where}: {column} is not a number", None, column, value)
    if not math.isfinite(value):
        raise DataError(path, f"{where}: {column} must be finite", None, column, value)
    if value < 0:
        raise DataError(path, f"{where}: {column} must not be negative", None, column, value)
    return float(value)


def load_zeus(folder: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(epochs, runs). epochs columns: workload ("<dataset>/<network>", e.g. "imagenet/resnet50"),
    gpu_type ("V100"|"A40"|"RTX6000"|"P100"), batch_size (int), power_limit_w (float), time_per_epoch_s (float > 0),
    average_power_w (float), file, line.
    runs columns: workload, batch_size, optimizer, learning_rate (float), run (int), target_metric (float),
    target_epoch (float >= 0), file, line.

    ``target_epoch`` is NaN where the run never reached its target (the source writes "nan").
    """
    root = _folder(folder if folder is not None else data_dir() / "zeus")
    found: dict[str, Path] = {}
    for path in sorted(root.glob("summary_power_*.csv")):
        key = path.stem.removeprefix("summary_power_")
        if key not in ZEUS_GPU_TYPES:
            raise DataError(path, f"unknown GPU type {key!r} in the file name summary_power_<type>.csv; "
                                  f"expected one of {', '.join(ZEUS_GPU_TYPES)}", value=key)
        found[key] = path
    for key in ZEUS_GPU_TYPES:
        if key not in found:
            raise DataError(root / f"summary_power_{key}.csv", "file not found")
    epochs = pd.concat([_zeus_power(found[key], gpu_type) for key, gpu_type in ZEUS_GPU_TYPES.items()],
                       ignore_index=True)
    return epochs, _zeus_train(root / "summary_train.csv")


def _zeus_power(path: Path, gpu_type: str) -> pd.DataFrame:
    raw = read_text_csv(path, _ZEUS_POWER_RAW)
    return pd.DataFrame({
        "workload": _workload(raw, path),
        "gpu_type": gpu_type,
        "batch_size": integer_cells(raw, "batch_size", path, minimum=1),
        "power_limit_w": positive_cells(raw, "power_limit", path),
        "time_per_epoch_s": positive_cells(raw, "time_per_epoch", path),
        "average_power_w": numeric(raw, "average_power", path, allow_missing=False, non_negative=True),
        "file": str(path),
        "line": line_numbers(raw),
    })[list(ZEUS_EPOCH_COLUMNS)]


def _zeus_train(path: Path) -> pd.DataFrame:
    raw = read_text_csv(path, _ZEUS_TRAIN_RAW)
    # Zeus writes "nan" for a run that never reached its target; any other text is still an error.
    raw["target_epoch"] = raw["target_epoch"].mask(raw["target_epoch"] == "nan")
    return pd.DataFrame({
        "workload": _workload(raw, path),
        "batch_size": integer_cells(raw, "batch_size", path, minimum=1),
        "optimizer": text_cells(raw, "optimizer", path),
        "learning_rate": positive_cells(raw, "learning_rate", path),
        "run": integer_cells(raw, "run", path, minimum=0),
        "target_metric": numeric(raw, "target_metric", path, allow_missing=False),
        "target_epoch": numeric(raw, "target_epoch", path, non_negative=True),
        "file": str(path),
        "line": line_numbers(raw),
    })[list(ZEUS_RUN_COLUMNS)]


def _workload(raw: pd.DataFrame, path: Path) -> pd.Series:
    return text_cells(raw, "dataset", path) + "/" + text_cells(raw, "network", path)


def _folder(folder: Path) -> Path:
    if not folder.is_dir():
        raise DataError(folder, "folder not found")
    return folder








