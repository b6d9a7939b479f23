"""What the spread-sensitivity model knows before it fits: the names of its checks and predictors, the public facts
of the models Pollux trains, and how a job names one (:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


TARGET = "spread_slowdown"
STEP_TARGET = "step_s"
SOURCE = "Pollux (OSDI'21): 6 models, measured step and sync times"
UNSEEN_MODEL = "unseen model"
UNSEEN_BATCH = "unseen batch sizes"
MODEL = "model"
NO_SLOWDOWN = "no slowdown"
CLASS_BLIND = "class-blind"
ANALYTICAL = "analytical"
REFERENCE_SPREAD = (8, 2)
"""(replicas, machines) at which the P90 sync curve's spread slowdown equals the P90."""
VERSUS = ("one machine", "one gpu")
"""What :meth:`SpreadSensitivityModel.predict` divides by: K replicas on one machine, or one GPU."""
QUANTILE = 0.9
BATCH_FOLDS = 4
BYTES_PER_GB = 1e9
TINY_S = 1e-6

BYTES_PER_GRADIENT = {"fp32": 4, "amp": 4, "fp16": 2, "bf16": 2}
"""Bytes of one gradient value by stated precision: mixed precision (amp) keeps fp32 gradients."""
COMPUTE_GROUP = {"cnn": "convolutional", "detection": "convolutional", "rnn": "recurrent",
                 "transformer": "dense", "mlp": "dense", "recommender": "embedding"}
"""Families whose per-sample work per parameter is alike; "other" and an unstated family have none."""


@dataclass(frozen=True)
class PolluxModel:
    """The public facts of the model one Pollux workload trains."""

    workload: str
    model: str
    parameters: int
    family: str
    precision: str
    source: str


POLLUX_MODELS: dict[str, PolluxModel] = {m.workload: m for m in (
    PolluxModel("bert", "bert_base_uncased", 110_000_000, "transformer", "fp32",
                "model paper (Devlin et al. 2019): BERT-base"),
    PolluxModel("cifar10", "resnet18_cifar", 11_173_962, "cnn", "fp32",
                "model paper (He et al. 2016): ResNet-18 with the CIFAR 3x3 stem, 10 classes"),
    PolluxModel("deepspeech2", "deepspeech2", 41_200_000, "rnn", "fp32",
                "model paper (Amodei et al. 2016): 2 conv + 5 bidirectional GRU x 800, counted"),
    PolluxModel("imagenet", "resnet50", 25_557_032, "cnn", "fp32", "model paper (He et al. 2016): ResNet-50"),
    PolluxModel("ncf", "neumf", 235_000, "recommender", "fp32",
                "model paper (He et al. 2017): NeuMF, 8 predictive factors, MovieLens-1M, counted"),
    PolluxModel("yolov3", "yolov3", 61_600_000, "detection", "fp32",
                "model paper (Redmon & Farhadi 2018): YOLOv3, Darknet-53, 20 PASCAL VOC classes"),
)}


PARAMETER_TOLERANCE = 0.05
"""A job naming a profiled model and stating ``parameters`` further than this (relative) from the table's
trains another model: it takes the hyperparameter path."""


def _name_key(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


_PROFILED_NAMES = {_name_key(m.model): m.workload for m in POLLUX_MODELS.values()}


def profiled_workload(name: object) -> str | None:
    """The Pollux workload whose model ``name`` is, or None: the model names of :data:`POLLUX_MODELS`
    (bert_base_uncased, resnet18_cifar, deepspeech2, resnet50, neumf, yolov3), matched without regard to case
    or to the separators between letters and digits ("ResNet-50", "resnet_50", "bert-base-uncased")."""
    if not isinstance(name, str):
        return None
    return _PROFILED_NAMES.get(_name_key(name))


def pollux_hyperparams(pollux: pd.DataFrame) -> pd.DataFrame:
    """Every profile row as the hyperparameters a job would state (same index):
    model, parameters, model_family, precision, batch_size (the row's local batch)."""
    facts = [POLLUX_MODELS[str(w)] for w in pollux["workload"]]
    return pd.DataFrame({"model": [f.model for f in facts],
                         "parameters": np.array([f.parameters for f in facts], dtype=np.int64),
                         "model_family": [f.family for f in facts],
                         "precision": [f.precision for f in facts],
                         "batch_size": pollux["local_bsz"].to_numpy(dtype=np.int64)}, index=pollux.index)
