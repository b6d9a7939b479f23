"""The training rows (Zeus's epoch times, Gavel's throughputs as ratios) and the features every predictor reads
(:mod:`training.needs.epoch_time`)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pandas as pd

from training.needs.epoch_time.facts import (
    GAVEL,
    GAVEL_MODELS,
    GPU_SPECS,
    ONE_HOT_FAMILIES,
    PROFILED_WORKLOADS,
    REQUIRED_KEYS,
    ZEUS,
    Workload,
)

FloatArray = npt.NDArray[np.float64]


# Rows and features

def profile_rows(epochs: pd.DataFrame) -> pd.DataFrame:
    """Zeus's epochs (``load_zeus()[0]``) as training rows: one per (workload, GPU type, batch size) at its
    highest power limit, geometric mean over duplicates; columns workload, gpu_type, batch_size, epoch_s,
    parameters, samples_per_epoch, model_family."""
    known = epochs[epochs["workload"].isin(list(PROFILED_WORKLOADS))]
    keys = ["workload", "gpu_type", "batch_size"]
    top = known[known["power_limit_w"] == known.groupby(keys)["power_limit_w"].transform("max")]
    rows = top.assign(ln=np.log(top["time_per_epoch_s"].to_numpy(float))).groupby(keys)["ln"].mean().reset_index()
    rows["epoch_s"] = np.exp(rows.pop("ln").to_numpy(float))
    facts = rows["workload"].map(dict(PROFILED_WORKLOADS))
    rows["parameters"] = [w.parameters for w in facts]
    rows["samples_per_epoch"] = [w.samples_per_epoch for w in facts]
    rows["model_family"] = [w.model_family for w in facts]
    out: pd.DataFrame = rows.sort_values(keys, ignore_index=True)
    return out


TYPE_ROW_COLUMNS = ("source", "workload", "gpu_type", "batch_size", "ln_time", "epoch_s", "parameters",
                    "samples_per_epoch", "model_family")


def gavel_rows(solo: pd.DataFrame) -> pd.DataFrame:
    """Gavel's solo throughputs (``load_gavel()[0]``: consolidated, scale factor 1, i.e. one GPU alone) of the
    models of :data:`GAVEL_MODELS` as rows of :data:`TYPE_ROW_COLUMNS`: workload is Gavel's model name,
    ln_time = -ln(steps/s), the time of an epoch up to the model's steps per epoch, a factor that cancels in
    every ratio between types at one batch size; epoch_s is NaN (Gavel states no epoch it ran)."""
    alone = solo[(solo["scale_factor"] == 1) & solo["consolidated"] & solo["model"].isin(list(GAVEL_MODELS))
                 & (solo["throughput"] > 0)]
    keys = ["model", "gpu_type", "batch_size"]
    rows = (alone.assign(ln_time=-np.log(alone["throughput"].to_numpy(float))).groupby(keys)["ln_time"].mean()
            .reset_index().rename(columns={"model": "workload"}))
    facts = rows["workload"].map(dict(GAVEL_MODELS))
    rows["source"] = GAVEL
    rows["epoch_s"] = np.nan
    rows["batch_size"] = rows["batch_size"].astype(int)
    rows["parameters"] = [w.parameters for w in facts]
    rows["samples_per_epoch"] = [w.samples_per_epoch for w in facts]
    rows["model_family"] = [w.model_family for w in facts]
    out: pd.DataFrame = rows[list(TYPE_ROW_COLUMNS)]
    return out


def type_rows(zeus_rows: pd.DataFrame, gavel: pd.DataFrame) -> pd.DataFrame:
    """Zeus's rows (:func:`profile_rows`, ln_time = ln(epoch_s)) and Gavel's (:func:`gavel_rows`) as one
    frame of :data:`TYPE_ROW_COLUMNS`: the evidence on ratios between types."""
    zeus = zeus_rows.assign(source=ZEUS, ln_time=np.log(zeus_rows["epoch_s"].to_numpy(float)))
    frames = [f[list(TYPE_ROW_COLUMNS)] for f in (zeus, gavel) if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(TYPE_ROW_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def fill_in(hyperparams: pd.DataFrame) -> pd.DataFrame:
    """parameters, samples_per_epoch, batch_size (float, NaN where missing or not positive) and model_family,
    filled from :data:`PROFILED_WORKLOADS` where the row names a profiled ``model`` (a network, e.g.
    "resnet50", or a workload, e.g. "squad/bert_base_uncased") and leaves the key out. A network trained
    on two datasets (bert_base_uncased) fills samples only when the stated samples pick one of them;
    otherwise its parameters (their mean) and family, and samples stay missing."""
    out = pd.DataFrame(index=hyperparams.index)
    for key in REQUIRED_KEYS:
        values = (pd.to_numeric(hyperparams[key], errors="coerce") if key in hyperparams
                  else pd.Series(np.nan, index=hyperparams.index))
        out[key] = values.where(values > 0).astype(float)
    family = hyperparams["model_family"] if "model_family" in hyperparams else pd.Series(None, index=out.index)
    out["model_family"] = pd.Series([f if isinstance(f, str) else None for f in family], index=out.index,
                                    dtype=object)
    if "model" not in hyperparams:
        return out
    known = {key: out[key].to_numpy(float).copy() for key in ("parameters", "samples_per_epoch")}
    families = out["model_family"].tolist()
    for i, name in enumerate(hyperparams["model"]):
        facts = _named(name)
        if facts is None:
            continue
        facts = [w for w in facts if w.samples_per_epoch == known["samples_per_epoch"][i]] or facts
        samples = {w.samples_per_epoch for w in facts}
        fill = {"parameters": float(round(np.mean([w.parameters for w in facts]))),
                "samples_per_epoch": float(samples.pop()) if len(samples) == 1 else math.nan}
        for key, value in fill.items():
            if not math.isfinite(known[key][i]):
                known[key][i] = value
        if not isinstance(families[i], str):
            families[i] = facts[0].model_family
    out["parameters"], out["samples_per_epoch"] = known["parameters"], known["samples_per_epoch"]
    out["model_family"] = pd.Series(families, index=out.index, dtype=object)
    return out


def _named(name: object) -> list[Workload] | None:
    if not isinstance(name, str):
        return None
    text = name.strip().lower()
    if text in PROFILED_WORKLOADS:
        return [PROFILED_WORKLOADS[text]]
    found = [w for w in PROFILED_WORKLOADS.values() if w.model == text]
    return found or None


def feature_frame(filled: pd.DataFrame, gpu_type: pd.Series) -> pd.DataFrame:
    """ln(parameters), ln(samples_per_epoch), ln(batch_size), family one-hot, ln(TFLOPS), ln(bandwidth)."""
    columns: dict[str, FloatArray] = {
        "ln_parameters": np.log(filled["parameters"].to_numpy(float)),
        "ln_samples": np.log(filled["samples_per_epoch"].to_numpy(float)),
        "ln_batch": np.log(filled["batch_size"].to_numpy(float)),
    }
    family = np.asarray(filled["model_family"].to_numpy(object))
    for name in ONE_HOT_FAMILIES:
        columns[f"family_{name}"] = (family == name).astype(float)
    specs = [GPU_SPECS[t] for t in gpu_type.to_numpy(object)]
    columns["ln_tflops"] = np.log([s.peak_fp32_tflops for s in specs])
    columns["ln_bandwidth"] = np.log([s.memory_bw_gbs for s in specs])
    return pd.DataFrame(columns, index=filled.index)


FAMILY_COLUMNS = tuple(f"family_{f}" for f in ONE_HOT_FAMILIES)


def unordered_pairs(part: pd.DataFrame) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Positions (i, j), i < j, of every two rows at one (workload, batch size)."""
    first, second = ordered_pairs(part)
    keep = first < second
    return first[keep], second[keep]


def ordered_pairs(part: pd.DataFrame, is_held: npt.NDArray[np.bool_] | None = None
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Positions (from, to) of every ordered pair of rows at one (workload, batch size), with a held-out
    row on at least one side (all rows when ``is_held`` is None)."""
    held = np.ones(len(part), dtype=bool) if is_held is None else np.asarray(is_held, dtype=bool)
    workload = pd.factorize(part["workload"])[0]
    batch = pd.factorize(part["batch_size"])[0]
    group = workload * (int(batch.max(initial=0)) + 1) + batch
    first, second = np.nonzero(group[:, None] == group[None, :])
    keep = (first != second) & (held[first] | held[second])
    return first[keep].astype(np.intp), second[keep].astype(np.intp)
