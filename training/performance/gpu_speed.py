"""Throughput of each workload class on each measured GPU type relative to V100, from Gavel and Zeus.

The classes are the six Pollux models. Other sources' models stand in for them as follows (a stand-in
is a model of the same family and shape of computation, not the same network):

| source | model or workload                  | class       | why                                        |
|--------|------------------------------------|-------------|--------------------------------------------|
| Gavel  | ResNet-50                          | imagenet    | the same network (Pollux: ResNet-50)       |
| Gavel  | ResNet-18                          | cifar10     | the same network (Pollux: ResNet-18)       |
| Gavel  | Transformer                        | bert        | both Transformer encoders                  |
| Gavel  | LM                                 | deepspeech2 | both recurrent sequence models             |
| Gavel  | Recommendation                     | ncf         | both embedding-based recommenders          |
| Gavel  | CycleGAN                           | yolov3      | convolutional image model (a stand-in)     |
| Gavel  | A3C                                | none        | reinforcement learning: no class; left out |
| Zeus   | imagenet/resnet50                  | imagenet    | the same network                           |
| Zeus   | cifar100/shufflenetv2              | cifar10     | small-image CNN                            |
| Zeus   | squad/bert_base_uncased            | bert        | the same network                           |
| Zeus   | sentiment140/bert_base_uncased     | bert        | the same network                           |
| Zeus   | librispeech/deepspeech2            | deepspeech2 | the same network                           |
| Zeus   | movielens-1m/ncf                   | ncf         | the same network                           |

yolov3 has no Zeus counterpart.

One measured **ratio** per (source, model, batch size, GPU type), same model and batch size on both sides:

    Gavel: throughput(type) / throughput(V100)             steps/s, alone, scale factor 1, consolidated
    Zeus:  time_per_epoch(V100) / time_per_epoch(type)     s, each type at its highest power limit
                                                           (the default, un-capped; a batch measured with
                                                           two optimizers counts once, geometric mean)

``type_speed[class][type]`` = geometric mean over the sources that measure it of (the geometric mean of
that source's ratios over its models and batch sizes), so a source with more batch sizes does not
outvote the other. V100 is 1 by definition. A class no source measured on a type gets the geometric
mean over the classes that were (e.g. yolov3 on A40 and RTX6000, which only Zeus measured).

``DEFAULT_TYPE_ALIASES`` maps cluster types no profile measured onto a measured one, each an assumption:

* V100M16, V100M32 -> V100 x 1: the same V100 chip with 16 or 32 GB of memory.
* MISC -> K80 x 1: PAI's "older generations, e.g. K40m, K80, M60" (``placement/model/gpu_types.py``); K80 is
  the one of them that was measured.
* T4 -> P100 x 8.1/9.3: peak FP32 TFLOPS, vendor data sheets (T4 8.1, P100 PCIe 9.3).
* A10 -> A40 x 31.2/37.4: peak FP32 TFLOPS, vendor data sheets (A10 31.2, A40 37.4).
* G1, G2, G3 -> V100 x 1: openb's undisclosed types, taken as the cluster's data-centre GPU.
* a big node that names no type (``ANY``) has no alias on purpose: a job there runs at the speed of
  its own type (type factor 1), as in the PAI trace's own simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np
import pandas as pd

from placement.model.speed import REFERENCE_SPEED_TYPE

GAVEL_STAND_IN: Mapping[str, str] = MappingProxyType({
    "ResNet-50": "imagenet", "ResNet-18": "cifar10", "Transformer": "bert", "LM": "deepspeech2",
    "Recommendation": "ncf", "CycleGAN": "yolov3",
})
ZEUS_STAND_IN: Mapping[str, str] = MappingProxyType({
    "imagenet/resnet50": "imagenet", "cifar100/shufflenetv2": "cifar10", "squad/bert_base_uncased": "bert",
    "sentiment140/bert_base_uncased": "bert", "librispeech/deepspeech2": "deepspeech2", "movielens-1m/ncf": "ncf",
})
DEFAULT_TYPE_ALIASES: Mapping[str, tuple[str, float]] = MappingProxyType({
    "V100M16": ("V100", 1.0), "V100M32": ("V100", 1.0), "MISC": ("K80", 1.0),
    "T4": ("P100", 8.1 / 9.3), "A10": ("A40", 31.2 / 37.4),
    "G1": ("V100", 1.0), "G2": ("V100", 1.0), "G3": ("V100", 1.0),
})
RATIO_COLUMNS = ("source", "model", "workload", "batch_size", "gpu_type", "ratio")


def gavel_ratios(solo: pd.DataFrame) -> pd.DataFrame:
    """Gavel's measured ratios (columns ``RATIO_COLUMNS``) of the models that stand in for a class."""
    alone = solo[(solo["scale_factor"] == 1) & solo["consolidated"] & solo["model"].isin(list(GAVEL_STAND_IN))]
    wide = alone.pivot_table(index=["model", "batch_size"], columns="gpu_type", values="throughput", aggfunc="first")
    return _ratios(wide, "Gavel", GAVEL_STAND_IN)


def zeus_ratios(epochs: pd.DataFrame) -> pd.DataFrame:
    """Zeus's measured ratios (columns ``RATIO_COLUMNS``): 1 / time per epoch at each type's highest power limit."""
    top = epochs[epochs["power_limit_w"] == epochs.groupby("gpu_type")["power_limit_w"].transform("max")]
    top = top[top["workload"].isin(list(ZEUS_STAND_IN))].rename(columns={"workload": "model"})
    top = top.assign(rate=1.0 / top["time_per_epoch_s"])
    # A batch size measured twice (two optimizers on V100) counts once, at the geometric mean.
    wide = top.pivot_table(index=["model", "batch_size"], columns="gpu_type", values="rate", aggfunc=_geometric_mean)
    return _ratios(wide, "Zeus", ZEUS_STAND_IN)


def _geometric_mean(values: pd.Series) -> float:
    return float(np.exp(np.mean(np.log(values.to_numpy(float)))))


def _ratios(wide: pd.DataFrame, source: str, stand_in: Mapping[str, str]) -> pd.DataFrame:
    """Rate on each type / rate on V100, one row per (model, batch size, type other than V100)."""
    if REFERENCE_SPEED_TYPE not in wide.columns:
        return pd.DataFrame(columns=list(RATIO_COLUMNS))
    relative = wide.div(wide[REFERENCE_SPEED_TYPE], axis=0).drop(columns=REFERENCE_SPEED_TYPE).reset_index()
    long = relative.melt(id_vars=["model", "batch_size"], var_name="gpu_type", value_name="ratio")
    long = long[np.isfinite(long["ratio"].to_numpy(float)) & (long["ratio"] > 0)]
    long = long.assign(source=source, workload=long["model"].map(dict(stand_in)))
    tidy: pd.DataFrame = long[list(RATIO_COLUMNS)].sort_values(["model", "batch_size", "gpu_type"], ignore_index=True)
    return tidy


def type_ratios(gavel_solo: pd.DataFrame | None, zeus_epochs: pd.DataFrame | None) -> pd.DataFrame:
    """Every measured ratio of both sources (either may be None)."""
    frames = [f(x) for f, x in ((gavel_ratios, gavel_solo), (zeus_ratios, zeus_epochs)) if x is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(RATIO_COLUMNS))


def type_speed(ratios: pd.DataFrame, classes: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per class, throughput relative to V100 on every type measured for any class (V100 = 1)."""
    log = ratios.assign(log=np.log(ratios["ratio"].astype(float)))
    per_source = log.groupby(["workload", "gpu_type", "source"])["log"].mean()
    measured = per_source.groupby(level=["workload", "gpu_type"]).mean()
    table = {c: {REFERENCE_SPEED_TYPE: 1.0} for c in classes}
    for workload, gpu_type, value in measured.reset_index().itertuples(index=False, name=None):
        if workload in table:
            table[str(workload)][str(gpu_type)] = float(np.exp(value))
    return fill_missing(table)


def fill_missing(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """A type a class lacks gets the geometric mean over the classes that have it."""
    types = sorted({t for speeds in table.values() for t in speeds})
    filled = {c: dict(speeds) for c, speeds in table.items()}
    for gpu_type in types:
        known = [s[gpu_type] for s in table.values() if gpu_type in s]
        for speeds in filled.values():
            speeds.setdefault(gpu_type, float(np.exp(np.mean(np.log(known)))))
    return {c: dict(sorted(s.items())) for c, s in filled.items()}
