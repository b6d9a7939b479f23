"""Seconds per epoch on each GPU type from the hyperparameters a job states, learned from Zeus's measured
epoch times, with a physical baseline beside it, P50/P90 per answer, and the ratio that placement needs most:
how much longer (or shorter) an epoch takes on a type the job has not run on, learned from Zeus's and
Gavel's measurements together.

Training rows (Zeus, NSDI'23, ``data/zeus/``): one row per (workload, GPU type, batch size), the time per
epoch at the **highest power limit measured** for that configuration, which is each GPU's default
behaviour (no power cap: V100 250 W, A40 300 W, RTX6000 260 W, P100 250 W in the trace). V100 measured
shufflenetv2 with two optimizers (Adadelta and Adam); such a configuration counts once, at the geometric
mean of its times. 208 rows: 6 workloads x 4 GPU types x 4-14 batch sizes.

Ratio rows from Gavel (OSDI'20, ``load_gavel()``, :func:`gavel_rows`): each model's throughput alone on one
GPU (consolidated, scale factor 1) for the five models of :data:`GAVEL_MODELS` on K80, P100 and V100 at
4-5 batch sizes: 72 rows. Gavel records steps per second, so a row is an epoch's time up to the model's
steps per epoch, which Gavel does not state reliably; that factor cancels between two types at one model
and batch size, so Gavel serves the ratios only, never an absolute epoch time.

Each row is described by the vocabulary (``training/needs/vocabulary.py``) from :data:`PROFILED_WORKLOADS`
and :data:`GAVEL_MODELS` (public facts, each with its source kind) and by its GPU type's data-sheet specs,
:data:`GPU_SPECS`.

**Analytical baseline** (a roofline-style cost: compute at peak plus a fixed cost per step)::

    epoch_s = samples_per_epoch x c_family x parameters / (peak_fp32_tflops x 1e12)
              + samples_per_epoch / batch_size x t_step0

``c_family`` (FLOPs per parameter per sample, one per family) and ``t_step0`` (s) are fitted by least
squares on ln(epoch_s) over the Zeus rows; a family with no training row gets the geometric mean of the
fitted ones. Its ratio between two types is the quotient of its two predictions (mostly the TFLOPS ratio).

**Learned model**, epoch_s (Zeus; two parts, both on ln(epoch_s)):

1. A log-linear scaling law: ln epoch_s = b0 + bp ln(parameters) + bs ln(samples_per_epoch)
   + bb ln(batch_size) + g_family + th_t ln(peak TFLOPS) + th_bw ln(memory bandwidth). The GPU terms are
   held to what physics allows: each elasticity in [-1, 0] and th_t + th_bw >= -1 (a faster part is never
   slower, and scaling both compute and bandwidth by k saves at most a factor k), so the law extrapolates
   sensibly to the types no run measured (K80, T4, A10, A100, H100). The family offsets g carry a ridge
   penalty (the slopes none): a family seen in no training row gets the average family, and the penalty
   is chosen from (1, 10, 100) by leave-one-workload-out on the training rows.
2. Gradient boosting (LightGBM, 200 trees of 8 leaves) on the law's residuals, features ln(parameters),
   ln(samples_per_epoch), ln(batch_size), the family one-hot and ln(TFLOPS), ln(bandwidth), monotone
   non-increasing in both specs: it learns what a law cannot, e.g. that epoch time rises again past a
   workload's best batch size.

**Ratio law**, epoch_s(B) / epoch_s(A) (Zeus and Gavel, :class:`RatioLaw`)::

    ln(epoch_s(B) / epoch_s(A)) = e_t ln(TFLOPS_B / TFLOPS_A) + e_bw ln(bandwidth_B / bandwidth_A)

fitted on every pair of types measured at one (workload, batch size), Zeus's 270 and Gavel's 72, by
median regression (least absolute deviations, a linear programme: the P50 is a median), each workload or
Gavel model weighing the same, and under the scaling law's bounds (e_t, e_bw in [-1, 0], e_t + e_bw >= -1).
On the shipped data e_t = -0.42, e_bw = -0.58 (Zeus alone: -0.47, -0.53); both sources want more than
the bound (a K80 or a P100 is slower than its specs say, an older chip reaching less of its peak), so the
sum sits at -1. The law states nothing of the workload: terms in parameters, batch size and family on
the elasticities (ridge-penalised) and a fitted efficiency per measured chip were tried, and in
leave-one-workload-out they traded one source's error for the other's or raised both (MALE 0.46-0.54 on
Gavel, 0.34-0.35 on Zeus, against 0.48 and 0.34 without): across 11 workloads on two testbeds the
workload-specific part of a ratio did not carry over to a new workload.

A job observed on type A for t seconds is predicted to take t x ratio(A, B) on B
(:meth:`EpochTimeModel.ratio`). The ratio depends on the two types only, so it answers for any job, stated
keys or not. It is not the quotient of the two ``predict`` answers: those carry Zeus's testbed and the
boosted workload structure, which serve epoch times on Zeus's machines well and transfer badly to another
testbed (the checks below).

Memory (GiB) is in the spec table but not a feature: capacity decides which batch fits, not how fast it
runs, and with five measured chips any third spec would only re-label the types.

**P90**: split-conformal on out-of-fold residuals ln(measured / P50), folds grouped as the use is
(:data:`BANDS`): P90 = P50 x exp(q). Where the folds hold out batch sizes or a type, q is the
ceil(0.9 (n + 1))-th smallest residual (``scoring.conformal_quantile``). Where they hold out whole workloads,
the residuals are exchangeable by workload, not by row (a workload's rows share its error), so each workload
weighs the same (``scoring.grouped_conformal_quantile``: a row weighs 1 / its workload's rows, the held-out
row as a row of a workload of average size); pooled, the workloads measured at more batch sizes and types
would set the band.

An epoch time whose workload is a training workload on a measured type gets the "profiled" band (folds hold
out whole batch sizes); a new workload the "workload" band (leave one Zeus workload out), an unmeasured
type the "type" band (leave one type out), both the larger. A ratio's band is calibrated per testbed,
"ratio_workload:Zeus" and "ratio_workload:Gavel" (leave one workload out, every ordered pair of its types,
each workload weighing the same within its testbed): a pair of types gets the larger band of the testbeds
that measured both (Zeus's for A40 with RTX6000, Gavel's for K80 with P100 or V100, the larger of the two
for P100 with V100, which both measured and on which they disagree most), else of those that measured
either ("ratio_workload", the larger of the two, when neither did), and the larger with "ratio_type"
(leave one chip out of both sources) when a side is a chip neither source measured. Pooled, Zeus's 540
pairs against Gavel's 144 would set one band for both testbeds, and Gavel's out-of-fold residuals are the
wider (its band 0.91 against Zeus's 0.43). Types with the same compute and bandwidth (V100 and V100M32)
are one chip to the model and share its band.

Checks (:func:`evaluate_epoch_time`), each for the model and the baseline, each with its own conformal P90
from the training rows of the fold only (nested: a held-out row never enters its own band):

* epoch_s, Zeus: "unseen batch sizes", "unseen workload" (leave one workload out), "unseen GPU type";
* epoch_ratio, "cross-type ratio, unseen workload": leave one Zeus workload out, trained on the other Zeus
  workloads and every Gavel model; every ordered pair of the held-out workload's types at one batch size;
* epoch_ratio, "Gavel ratios, unseen model": leave one Gavel model out, trained on every Zeus workload and
  the other Gavel models; every ordered pair of the held-out model's K80, P100, V100 at one batch size.

On the shipped data (seed 0), MALE = mean |ln(P50 / measured)|, coverage = share measured <= P90:

| target      | check                             | n   | model MALE | cover | baseline MALE | cover |
|-------------|-----------------------------------|-----|------------|-------|---------------|-------|
| epoch_s     | unseen batch sizes                | 208 | 0.24       | 0.95  | 0.61          | 0.90  |
| epoch_s     | unseen workload                   | 208 | 0.64       | 0.96  | 2.01          | 0.80  |
| epoch_s     | unseen GPU type                   | 208 | 0.33       | 0.94  | 0.67          | 0.90  |
| epoch_ratio | cross-type ratio, unseen workload | 540 | 0.34       | 0.91  | 0.48          | 0.87  |
| epoch_ratio | Gavel ratios, unseen model        | 144 | 0.48       | 0.89  | 0.51          | 0.88  |

The model wins every check on MALE, narrowly on Gavel's. What Gavel adds is small: the law fitted on Zeus
alone scores 0.35 on the Zeus ratio check and 0.48 on all of Gavel's ratios; the gain over the ratios of
the Zeus-only epoch model (0.26 on Zeus, 0.66 on Gavel) comes from the law's form, which gives up Zeus's
testbed-specific structure (0.26 to 0.34) for ratios that hold on another testbed (0.66 to 0.48). The
testbeds disagree most on P100 against V100: the epoch ratio V100/P100 is 0.22-0.65 in Zeus, 0.56-1.20 in
Gavel, and 1.95-2.31 for Gavel's Recommendation (slower on V100 than on P100), which no law monotone in
the specs can follow. That model and ResNet-18's K80 (3.2-8.7x slower than its P100, against 1.5-4.6x for
the others) are still covered least (0.63 and 0.83, the other three 1.0): a band calibrated on the other
models cannot foresee an idiosyncrasy of one. Calibrated on Gavel's own pairs (the shipped band of a pair
Gavel measured is about 2.5x its P50, of a pair only Zeus measured 1.5x), Gavel's check is covered 0.89
and Zeus's 0.91; other calibrations of the same residuals, nested alike (Zeus / Gavel coverage): rows
pooled 0.92 / 0.83, each workload weighing the same in one band 0.93 / 0.84, each testbed weighing the
same 0.94 / 0.85, the larger testbed band for every pair 0.95 / 0.89 (the A40-RTX6000 ratio of a cluster
job would then be as wide as a K80's).

Unseen-workload epoch bands are wide (the shipped P90/P50 2.7x): with six workloads, a family seen in one
workload (rnn, recommender) or none is extrapolation, and the band says so. Their coverage, 0.962 (200 of
208 rows; the nearest rows sit 1% and 5% under the band, so a machine's floating point moves it by a row
or two), is above the 0.95 asked, and no calibration tried brings it in: rows pooled 0.957, each
workload weighing the same 0.962 (shipped, for the reason above), a quantile of per-workload
scores (the mean or the median of the workloads' own P90 residuals) 0.69 and 0.61, each workload's median
residual plus the pooled deviations from it 0.97, one band for a family the training rows hold and one for
a family they do not 0.70; counting the held-out row as a whole workload gives no finite band under nine
workloads. The excess comes from the nesting: a check's band is calibrated on fits to four workloads,
for a model fitted on five, and with this few workloads one more matters. Four do not pin the law's
workload slopes (without sentiment140 and shufflenetv2, its elasticities in parameters and samples are 2.0
and 1.85, against 0.96 and 0.51 on all six), so the calibration residuals (MALE 1.78) are far wider than
the held-out ones (0.64), and the folds' bands (3.5-6x, and 1,300x in the fold whose calibration
extrapolates from those four) wider than the shipped one, which is calibrated on fits to five. The
jackknife+ (each residual added to the prediction of the fit that made it rather than of the model fitted
on every workload, Barber et al. 2021) was tried against exactly that and is not shipped: it covers 0.894
with bands wider at the median (P90/P50 5.1 against 4.3), and on the six variants with one workload
removed 0.860 against split's 0.868, the bands again wider (``tests/benchmarks/bench_epoch_bands.py``).
Bounding those two elasticities to [0, 1] does not help (MALE 0.67, coverage 0.962); holding the one in
samples to exactly 1 (an epoch's time proportional to its samples, as it is for one workload) makes it much
worse (MALE 2.02, coverage 0.84): across the six workloads the samples stand in for the compute per sample that the
parameters alone do not tell.

Limits: single-GPU FP32 training as Zeus and Gavel measured it (``precision`` and ``optimizer`` are not
features: the traces cannot separate them from the workload). Beyond a workload's largest measured batch
size (mostly the largest that fits in memory) the epoch law keeps falling, about batch^-0.6, where
measurements flatten out. The ratio cannot tell one workload from another, nor a testbed like Zeus's from
one like Gavel's. A job that names a profiled Zeus workload gets the law's ratio too: the quotient of the
epoch model's answers tells Zeus's own ratios better (0.26 against 0.34 for an unseen Zeus workload), but
not the same workload's on another testbed: Gavel's ResNet-50 is Zeus's imagenet/resnet50, and its
P100/V100 ratios are 0.20 off by the quotient, 0.16 by the law (8 pairs). Types neither source measured
(T4, A10, A100, H100) get the law's data-sheet ratio with the "ratio_type" band, from five measured chips of
2014-2020.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import lightgbm as lgb
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.ticker import NullFormatter
from scipy import sparse  # type: ignore[import-untyped]
from scipy.optimize import least_squares, linprog, lsq_linear  # type: ignore[import-untyped]

from placement.model.gpu_types import GPU_MEM_GIB
from training.needs.scoring import POINT_COLUMNS, conformal_quantile, error_table, grouped_conformal_quantile
from training.needs.vocabulary import FAMILIES
from training.performance.gpu_speed import DEFAULT_TYPE_ALIASES
from training.performance.profiles import load_gavel, load_zeus
from training.png import save_png

FloatArray = npt.NDArray[np.float64]

TARGET = "epoch_s"
RATIO_TARGET = "epoch_ratio"
SOURCE = "Zeus (NSDI'23) and Gavel (OSDI'20): measured epoch times and throughputs"
ZEUS_SOURCE = "Zeus (NSDI'23): 6 workloads x 4 GPU types, measured"
"""The source of a model fitted without Gavel's rows."""
ZEUS = "Zeus"
GAVEL = "Gavel"
MODEL = "model"
BASELINE = "baseline"
CHECK_BATCH = "unseen batch sizes"
CHECK_WORKLOAD = "unseen workload"
CHECK_TYPE = "unseen GPU type"
CHECK_RATIO = "cross-type ratio, unseen workload"
CHECK_GAVEL = "Gavel ratios, unseen model"
COVERAGE = 0.9
BATCH_FOLDS = 5


# ---------------------------------------------------------------------------------------------------------
# Public facts about the profiled workloads
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """A trained (model, dataset): what a job would state about it, and where each figure comes from."""

    model: str
    dataset: str
    model_family: str
    parameters: int
    parameters_source: str
    samples_per_epoch: int
    samples_source: str


PROFILED_WORKLOADS: Mapping[str, Workload] = MappingProxyType({
    "cifar100/shufflenetv2": Workload(
        "shufflenetv2", "CIFAR-100", "cnn", 1_360_896,
        "computed from the implementation Zeus ships (examples/cifar100, from weiaicunzai/pytorch-cifar100): "
        "ShuffleNet V2 1x with a 100-class head; the model paper's 2.3M is the 1000-class ImageNet net",
        50_000, "dataset paper (Krizhevsky 2009): the CIFAR-100 training set"),
    "imagenet/resnet50": Workload(
        "resnet50", "ImageNet-1k", "cnn", 25_557_032,
        "model paper (He et al. 2016: 25.6M); exact count of the torchvision implementation",
        1_281_167, "dataset paper (Russakovsky et al. 2015): the ILSVRC-2012 training set"),
    "librispeech/deepspeech2": Workload(
        "deepspeech2", "LibriSpeech", "rnn", 86_618_400,
        "computed from deepspeech.pytorch's default DeepSpeech2 (2 conv + 5 bidirectional LSTM layers of "
        "1,024 units, 29 characters); assumption: the trace does not name the implementation",
        281_241, "dataset paper (Panayotov et al. 2015): the three training subsets, 960 h; assumption: the "
                 "trace does not name the subset"),
    "movielens-1m/ncf": Workload(
        "ncf", "MovieLens-1M", "recommender", 1_602_657,
        "computed for NeuMF (model paper, He et al. 2017) on 6,040 users x 3,706 items with the common "
        "PyTorch defaults (32 factors, MLP 256-128-64-32); assumption: the trace does not give the sizes",
        4_970_845, "dataset paper (Harper & Konstan 2015: 1,000,209 ratings) with the model paper's protocol: "
                   "one rating per user held out, four sampled negatives per positive (994,169 x 5)"),
    "squad/bert_base_uncased": Workload(
        "bert_base_uncased", "SQuAD v1.1", "transformer", 108_893_186,
        "model paper (Devlin et al. 2019: 110M); exact count of the Hugging Face implementation with its "
        "span head",
        87_599, "dataset paper (Rajpurkar et al. 2016): the SQuAD v1.1 training questions"),
    "sentiment140/bert_base_uncased": Workload(
        "bert_base_uncased", "Sentiment140", "transformer", 109_483_778,
        "model paper (Devlin et al. 2019: 110M); exact count of the Hugging Face implementation with a "
        "two-class head",
        1_600_000, "dataset paper (Go et al. 2009): the Sentiment140 training tweets"),
})
"""Zeus's six workloads by the trace's "<dataset>/<network>" name."""

GAVEL_MODELS: Mapping[str, Workload] = MappingProxyType({
    "ResNet-18": Workload(
        "resnet18", "CIFAR-10", "cnn", 11_173_962,
        "computed from the implementation Gavel runs (kuangliu/pytorch-cifar ResNet18)",
        50_000, "dataset paper (Krizhevsky 2009): the CIFAR-10 training set"),
    "ResNet-50": Workload(
        "resnet50", "ImageNet-1k", "cnn", 25_557_032,
        "model paper (He et al. 2016); exact count of the torchvision implementation Gavel runs",
        1_281_167, "dataset paper (Russakovsky et al. 2015)"),
    "Transformer": Workload(
        "transformer", "Multi30k", "transformer", 44_138_496,
        "computed from the implementation Gavel runs (6+6 layers, d_model 512, d_inner 2048) without the word "
        "embeddings, whose vocabulary sizes Gavel does not record: a lower bound",
        29_000, "dataset paper (Elliott et al. 2016): the Multi30k training sentence pairs"),
    "LM": Workload(
        "lstm_lm", "WikiText-2", "rnn", 13_987_678,
        "computed from the implementation Gavel runs (PyTorch word_language_model defaults: 2-layer LSTM of "
        "200, 200-wide embeddings, untied, 33,278 words)",
        59_675, "dataset paper (Merity et al. 2016: 2,088,628 training tokens) in sequences of 35 tokens, "
                "one sample per sequence as the implementation batches them"),
    "Recommendation": Workload(
        "autoencoder", "MovieLens-20M", "recommender", 8_063_508,
        "computed from the implementation Gavel runs (Recoder DynamicAutoencoder, one hidden layer of 200, "
        "over 20,108 items)",
        116_677, "preprocessing paper (Liang et al. 2018, VAE-CF): 136,677 users less 20,000 held out"),
})
"""Gavel's models that can be described (A3C and CycleGAN state no batch of samples: left out)."""


# ---------------------------------------------------------------------------------------------------------
# GPU types
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuSpec:
    """Vendor data-sheet figures of one GPU (one die of a dual-die board)."""

    peak_fp32_tflops: float
    memory_bw_gbs: float
    memory_gib: float
    part: str


_DATA_SHEETS: dict[str, GpuSpec] = {
    "V100": GpuSpec(14.0, 900.0, GPU_MEM_GIB["V100"],
                    "Tesla V100 PCIe 16 GB (Zeus's V100 caps power at 250 W, the PCIe card's limit)"),
    "A40": GpuSpec(37.4, 696.0, 48.0, "A40 48 GB"),
    "RTX6000": GpuSpec(16.3, 672.0, 24.0, "Quadro RTX 6000 24 GB"),
    "P100": GpuSpec(9.3, 732.0, GPU_MEM_GIB["P100"], "Tesla P100 PCIe 16 GB (250 W, as in Zeus)"),
    "K80": GpuSpec(4.37, 240.0, 12.0, "one GK210 die of a Tesla K80 board (8.73 TFLOPS, 480 GB/s, 24 GB per "
                                     "board), the unit Gavel and schedulers count as a GPU"),
    "T4": GpuSpec(8.1, 320.0, GPU_MEM_GIB["T4"], "Tesla T4 16 GB"),
    "A10": GpuSpec(31.2, 600.0, GPU_MEM_GIB["A10"], "A10 24 GB"),
    "A100": GpuSpec(19.5, 1555.0, 40.0, "A100 SXM4 40 GB"),
    "H100": GpuSpec(67.0, 3350.0, 80.0, "H100 SXM5 80 GB"),
}


def _with_aliases(sheets: dict[str, GpuSpec]) -> dict[str, GpuSpec]:
    """Cluster types ``gpu_speed.DEFAULT_TYPE_ALIASES`` maps onto a chip one-to-one (factor 1) take that
    chip's compute and bandwidth and their own memory (``placement.model.gpu_types.GPU_MEM_GIB``)."""
    specs = dict(sheets)
    for name, (chip, factor) in DEFAULT_TYPE_ALIASES.items():
        if name in specs or factor != 1.0 or chip not in sheets:
            continue
        base = sheets[chip]
        specs[name] = GpuSpec(base.peak_fp32_tflops, base.memory_bw_gbs, GPU_MEM_GIB.get(name, base.memory_gib),
                              f"taken as {chip} ({base.part}), the alias of training/performance/gpu_speed.py")
    return specs


GPU_SPECS: Mapping[str, GpuSpec] = MappingProxyType(_with_aliases(_DATA_SHEETS))
"""Peak FP32 TFLOPS, memory bandwidth (GB/s) and memory (GiB) of every type the model answers for.
T4 and A10 match the TFLOPS that ``gpu_speed.DEFAULT_TYPE_ALIASES`` scales by; MISC is a K80 die with
PAI's 8 GiB, and V100M16, V100M32, G1-G3 are V100s, as gpu_speed assumes."""

REQUIRED_KEYS = ("parameters", "samples_per_epoch", "batch_size")
"""What a row must state (or fill by naming a profiled ``model``); ``model_family`` is optional (a missing
or unmeasured family is the average family)."""

_LN_SPECS = {t: (math.log(s.peak_fp32_tflops), math.log(s.memory_bw_gbs)) for t, s in GPU_SPECS.items()}
"""ln(peak TFLOPS), ln(bandwidth) of every type."""

_ONE_HOT_FAMILIES = tuple(f for f in FAMILIES if f not in ("other",))
_GPU_FEATURES = ("ln_tflops", "ln_bandwidth")


# ---------------------------------------------------------------------------------------------------------
# Rows and features
# ---------------------------------------------------------------------------------------------------------

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


def _type_rows(zeus_rows: pd.DataFrame, gavel: pd.DataFrame) -> pd.DataFrame:
    """Zeus's rows (:func:`profile_rows`, ln_time = ln(epoch_s)) and Gavel's (:func:`gavel_rows`) as one
    frame of :data:`TYPE_ROW_COLUMNS`: the evidence on ratios between types."""
    zeus = zeus_rows.assign(source=ZEUS, ln_time=np.log(zeus_rows["epoch_s"].to_numpy(float)))
    frames = [f[list(TYPE_ROW_COLUMNS)] for f in (zeus, gavel) if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(TYPE_ROW_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def _fill(hyperparams: pd.DataFrame) -> pd.DataFrame:
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


def _features(filled: pd.DataFrame, gpu_type: pd.Series) -> pd.DataFrame:
    """ln(parameters), ln(samples_per_epoch), ln(batch_size), family one-hot, ln(TFLOPS), ln(bandwidth)."""
    columns: dict[str, FloatArray] = {
        "ln_parameters": np.log(filled["parameters"].to_numpy(float)),
        "ln_samples": np.log(filled["samples_per_epoch"].to_numpy(float)),
        "ln_batch": np.log(filled["batch_size"].to_numpy(float)),
    }
    family = np.asarray(filled["model_family"].to_numpy(object))
    for name in _ONE_HOT_FAMILIES:
        columns[f"family_{name}"] = (family == name).astype(float)
    specs = [GPU_SPECS[t] for t in gpu_type.to_numpy(object)]
    columns["ln_tflops"] = np.log([s.peak_fp32_tflops for s in specs])
    columns["ln_bandwidth"] = np.log([s.memory_bw_gbs for s in specs])
    return pd.DataFrame(columns, index=filled.index)


_FAMILY_COLUMNS = tuple(f"family_{f}" for f in _ONE_HOT_FAMILIES)


# ---------------------------------------------------------------------------------------------------------
# Predictors of ln(epoch_s)
# ---------------------------------------------------------------------------------------------------------

class _Predictor(Protocol):
    def fit(self, rows: pd.DataFrame) -> _Predictor: ...

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray: ...


@dataclass
class Baseline:
    """epoch_s = S c_family P / (TFLOPS 1e12) + S / B t_step0 (module docstring)."""

    ln_c: dict[str, float] = field(default_factory=dict)
    ln_t0: float = float("nan")

    def fit(self, rows: pd.DataFrame) -> Baseline:
        x = _features(rows, rows["gpu_type"])
        families = sorted(set(rows["model_family"]))
        index = np.array([families.index(f) for f in rows["model_family"]])
        y = np.log(rows["epoch_s"].to_numpy(float))
        compute = np.exp((x["ln_samples"] + x["ln_parameters"] - x["ln_tflops"]).to_numpy(float)) / 1e12
        steps = np.exp((x["ln_samples"] - x["ln_batch"]).to_numpy(float))

        def residual(theta: FloatArray) -> FloatArray:
            return np.asarray(np.log(compute * np.exp(theta[index]) + steps * np.exp(theta[-1])) - y)

        start = np.r_[np.full(len(families), math.log(300.0)), math.log(0.01)]
        theta = least_squares(residual, start).x
        self.ln_c = {f: float(theta[i]) for i, f in enumerate(families)}
        self.ln_t0 = float(theta[-1])
        return self

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray:
        fallback = float(np.mean(list(self.ln_c.values())))
        ln_c = np.full(len(x), fallback)
        for family, value in self.ln_c.items():
            ln_c[x[f"family_{family}"].to_numpy() == 1.0] = value
        compute = np.exp((x["ln_samples"] + x["ln_parameters"] - x["ln_tflops"]).to_numpy(float) + ln_c) / 1e12
        steps = np.exp((x["ln_samples"] - x["ln_batch"]).to_numpy(float) + self.ln_t0)
        return np.asarray(np.log(compute + steps), dtype=float)


_LAW_COLUMNS = ("ln_parameters", "ln_samples", "ln_batch", *_FAMILY_COLUMNS, *_GPU_FEATURES)
FAMILY_PENALTIES = (1.0, 10.0, 100.0)


@dataclass
class ScalingLaw:
    """The log-linear part of the learned model (module docstring): weights over ``_LAW_COLUMNS``."""

    penalty: float = 10.0
    intercept: float = 0.0
    weights: FloatArray = field(default_factory=lambda: np.zeros(len(_LAW_COLUMNS)))

    def fit(self, x: FloatArray, y: FloatArray) -> ScalingLaw:
        """``x``: the rows' ``_LAW_COLUMNS`` (:func:`_law_matrix`); ``y``: ln(epoch_s)."""
        a = np.c_[np.ones(len(x)), x]
        k = a.shape[1]
        ridge = np.zeros((k, k))
        ridge[_FAMILY_AT, _FAMILY_AT] = math.sqrt(self.penalty)
        t, bw = _GPU_AT
        lower, upper = np.full(k, -np.inf), np.full(k, np.inf)
        lower[[t, bw]], upper[[t, bw]] = -1.0, 0.0
        design, target = np.r_[a, ridge], np.r_[y, np.zeros(k)]
        w = lsq_linear(design, target, bounds=(lower, upper), method="bvls").x
        if w[t] + w[bw] < -1.0:
            # The optimum lies on th_t + th_bw = -1: substitute th_bw = -1 - th_t and solve for th_t alone.
            reduced = design.copy()
            reduced[:, t] = design[:, t] - design[:, bw]
            reduced = np.delete(reduced, bw, axis=1)
            keep = [j for j in range(k) if j != bw]
            v = lsq_linear(reduced, target + np.r_[a[:, bw], np.zeros(k)], bounds=(lower[keep], upper[keep]),
                           method="bvls").x
            w = np.insert(v, bw, -1.0 - v[t])
        self.intercept, self.weights = float(w[0]), np.asarray(w[1:], dtype=float)
        return self

    def ln_epoch(self, x: FloatArray) -> FloatArray:
        return np.asarray(self.intercept + x @ self.weights, dtype=float)


_FAMILY_AT = [1 + _LAW_COLUMNS.index(c) for c in _FAMILY_COLUMNS]
_GPU_AT = tuple(1 + _LAW_COLUMNS.index(c) for c in _GPU_FEATURES)
"""Positions in the law's design matrix (column 0 is the intercept)."""


def _law_matrix(x: pd.DataFrame) -> FloatArray:
    return np.asarray(x[list(_LAW_COLUMNS)].to_numpy(float))


def _choose_penalty(x: FloatArray, y: FloatArray, workload: npt.NDArray[Any]) -> float:
    """The family penalty with the lowest mean |ln error| leaving one training workload out."""
    names = np.unique(workload)
    if len(names) < 3:
        return FAMILY_PENALTIES[1]
    scores = []
    for penalty in FAMILY_PENALTIES:
        errors = []
        for name in names:
            out = workload == name
            law = ScalingLaw(penalty).fit(x[~out], y[~out])
            errors.append(np.abs(law.ln_epoch(x[out]) - y[out]))
        scores.append(float(np.mean(np.concatenate(errors))))
    return FAMILY_PENALTIES[int(np.argmin(scores))]


_BOOSTED = ("ln_parameters", "ln_samples", "ln_batch", *_FAMILY_COLUMNS, *_GPU_FEATURES)


@dataclass
class Learned:
    """Scaling law + LightGBM on its residuals (module docstring)."""

    seed: int = 0
    law: ScalingLaw = field(default_factory=ScalingLaw)
    booster: Any = None

    def fit(self, rows: pd.DataFrame) -> Learned:
        x = _features(rows, rows["gpu_type"])
        y = np.log(rows["epoch_s"].to_numpy(float))
        law_x = _law_matrix(x)
        self.law = ScalingLaw(_choose_penalty(law_x, y, rows["workload"].to_numpy())).fit(law_x, y)
        monotone = [-1 if c in _GPU_FEATURES else 0 for c in _BOOSTED]
        self.booster = lgb.LGBMRegressor(
            n_estimators=200, learning_rate=0.05, num_leaves=8, min_child_samples=5, monotone_constraints=monotone,
            random_state=self.seed, n_jobs=1, verbose=-1,
        ).fit(x[list(_BOOSTED)], y - self.law.ln_epoch(law_x))
        return self

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray:
        return np.asarray(self.law.ln_epoch(_law_matrix(x)) + self.booster.predict(x[list(_BOOSTED)]), dtype=float)


_PREDICTORS: dict[str, Callable[[int], _Predictor]] = {MODEL: lambda seed: Learned(seed),
                                                       BASELINE: lambda _: Baseline()}


@dataclass
class RatioLaw:
    """ln(epoch_s(B) / epoch_s(A)) = e_t ln(TFLOPS_B / TFLOPS_A) + e_bw ln(bandwidth_B / bandwidth_A), a
    median regression over the pairs of types measured at one (workload, batch size), each workload
    weighing the same (module docstring)."""

    elasticity_tflops: float = float("nan")
    elasticity_bandwidth: float = float("nan")

    def fit(self, rows: pd.DataFrame) -> RatioLaw:
        """``rows``: :data:`TYPE_ROW_COLUMNS`, Zeus's and Gavel's alike (only ln_time differences are used)."""
        first, second = _unordered_pairs(rows)
        if first.size == 0:
            raise ValueError("no two types measured at one (workload, batch size): nothing to learn a ratio from")
        spec = np.array([_LN_SPECS[t] for t in rows["gpu_type"]], dtype=float).reshape(-1, 2)
        ln_time = rows["ln_time"].to_numpy(float)
        workload = rows["workload"].to_numpy(object)[first]
        _, index, count = np.unique(workload, return_inverse=True, return_counts=True)
        weight = 1.0 / count[index]
        n = first.size
        # Least absolute deviations as a linear programme: x = (e_t, e_bw, over, under), over, under >= 0.
        difference = sparse.csr_matrix(spec[second] - spec[first])
        identity = sparse.identity(n, format="csr")
        found = linprog(np.r_[0.0, 0.0, weight, weight],
                        A_ub=np.r_[-1.0, -1.0, np.zeros(2 * n)][None, :], b_ub=[1.0],
                        A_eq=sparse.hstack([difference, identity, -identity], format="csr"),
                        b_eq=ln_time[second] - ln_time[first],
                        bounds=[(-1.0, 0.0), (-1.0, 0.0)] + [(0.0, None)] * (2 * n), method="highs")
        if not found.success:
            raise RuntimeError(f"ratio law: {found.message}")
        self.elasticity_tflops, self.elasticity_bandwidth = (float(v) for v in found.x[:2])
        return self

    def type_term(self, x: pd.DataFrame) -> FloatArray:
        """The type's share of ln(epoch_s): differences between two types are ln ratios."""
        return np.asarray(self.elasticity_tflops * x["ln_tflops"].to_numpy(float)
                          + self.elasticity_bandwidth * x["ln_bandwidth"].to_numpy(float), dtype=float)


@dataclass
class EpochDifference:
    """The ratio a predictor of ln(epoch_s) implies, the difference of its two predictions: the baseline's
    ratio, fitted on the Zeus rows alone (Gavel's rows state no epoch time)."""

    predictor: Any

    def fit(self, rows: pd.DataFrame) -> EpochDifference:
        self.predictor = self.predictor.fit(rows[rows["source"] == ZEUS])
        return self

    def type_term(self, x: pd.DataFrame) -> FloatArray:
        return np.asarray(self.predictor.ln_epoch(x), dtype=float)


class _RatioPredictor(Protocol):
    def fit(self, rows: pd.DataFrame) -> _RatioPredictor: ...

    def type_term(self, x: pd.DataFrame) -> FloatArray: ...


_RATIO_PREDICTORS: dict[str, Callable[[int], _RatioPredictor]] = {
    MODEL: lambda _: RatioLaw(), BASELINE: lambda _: EpochDifference(Baseline())}


# ---------------------------------------------------------------------------------------------------------
# The fitted model
# ---------------------------------------------------------------------------------------------------------

BANDS = ("profiled", "workload", "type", "ratio_workload", "ratio_type")
"""Conformal bands (ln units) and their folds: "profiled" holds out whole batch sizes of each Zeus workload,
"workload" one Zeus workload and "type" one GPU type (epoch_s, Zeus); "ratio_workload" one workload of
either source (with "ratio_workload:<source>", each testbed's own, the larger of which it is) and
"ratio_type" one GPU chip of both (ratios, Zeus and Gavel)."""


@dataclass
class EpochTimeModel:
    """Seconds per epoch (P50, P90) on each GPU type of :data:`GPU_SPECS` from stated hyperparameters, and
    the ratio between two types."""

    predictor: Any
    source: str = SOURCE
    gpu_types: tuple[str, ...] = tuple(GPU_SPECS)
    measured_types: tuple[str, ...] = ()
    """Types with measured epoch times (Zeus)."""
    profiled: tuple[tuple[float, float], ...] = ()
    """(parameters, samples_per_epoch) of the training workloads."""
    bands: dict[str, float] = field(default_factory=dict)
    target: str = TARGET
    unit: str = "s"
    ratio_law: Any = None
    """What :meth:`ratio` answers from (a :class:`RatioLaw`); None: the quotient of two predictions."""
    ratio_types: tuple[str, ...] = ()
    """Types with measured ratios (Zeus and Gavel)."""
    ratio_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(testbed, the types it measured) of each source of ratios, whose band is ``bands["ratio_workload:<testbed>"]``
    (none: every measured pair gets "ratio_workload")."""

    def required_keys(self) -> tuple[str, ...]:
        return REQUIRED_KEYS

    def _check_type(self, gpu_type: str) -> None:
        if gpu_type not in self.gpu_types:
            raise ValueError(f"unknown gpu_type {gpu_type!r}; known: {', '.join(self.gpu_types)}")

    def _ln_p50(self, filled: pd.DataFrame, types: pd.Series) -> FloatArray:
        ok = filled[list(REQUIRED_KEYS)].notna().all(axis=1).to_numpy()
        out = np.full(len(filled), np.nan)
        if ok.any():
            out[ok] = self.predictor.ln_epoch(_features(filled[ok], types[ok]))
        return out

    def _band(self, filled: pd.DataFrame, types: pd.Series) -> FloatArray:
        pairs = set(self.profiled)
        known = np.array([(p, s) in pairs for p, s in zip(filled["parameters"], filled["samples_per_epoch"],
                                                             strict=True)], dtype=bool)
        measured = {_chip(m) for m in self.measured_types}
        new_type = np.array([_chip(str(t)) not in measured for t in types], dtype=bool)
        band = np.where(known, self.bands["profiled"], self.bands["workload"])
        band = np.where(new_type, np.where(known, self.bands["type"], np.maximum(band, self.bands["type"])), band)
        return np.asarray(band, dtype=float)

    def predict(self, hyperparams: pd.DataFrame, gpu_type: str) -> pd.DataFrame:
        """Columns p50, p90 (s per epoch), the index of ``hyperparams``; NaN where a required key is missing."""
        return self.predict_types(hyperparams, (gpu_type,))[gpu_type]

    def predict_types(self, hyperparams: pd.DataFrame, gpu_types: Sequence[str]) -> dict[str, pd.DataFrame]:
        """:meth:`predict` for each of ``gpu_types``, in one pass over the fitted models."""
        for gpu_type in gpu_types:
            self._check_type(gpu_type)
        filled = _fill(hyperparams)
        stacked = pd.concat([filled] * len(gpu_types), ignore_index=True)
        types = pd.Series(np.repeat(np.asarray(gpu_types, dtype=object), len(filled)), index=stacked.index)
        ln_p50 = self._ln_p50(stacked, types)
        band = self._band(stacked, types)
        return {gpu_type: pd.DataFrame({"p50": np.exp(ln_p50[part]), "p90": np.exp(ln_p50[part] + band[part])},
                                       index=hyperparams.index)
                for k, gpu_type in enumerate(gpu_types) for part in [slice(k * len(filled), (k + 1) * len(filled))]}

    def ratio(self, hyperparams: pd.DataFrame, from_type: str, to_type: str) -> pd.DataFrame:
        """Columns p50, p90 of epoch_s(to_type) / epoch_s(from_type): multiply a job's observed epoch time
        (or duration) on ``from_type`` by it to predict ``to_type``. From the ratio law (module docstring),
        which depends on the two types only: every row gets an answer, stated keys or not."""
        self._check_type(from_type)
        self._check_type(to_type)
        filled = _fill(hyperparams)
        if self.ratio_law is None:
            ln_ratio = (self._ln_p50(filled, pd.Series(to_type, index=filled.index))
                        - self._ln_p50(filled, pd.Series(from_type, index=filled.index)))
        else:
            ln_ratio = self._type_term(filled, to_type) - self._type_term(filled, from_type)
        band = self._ratio_band(from_type, to_type)
        return pd.DataFrame({"p50": np.exp(ln_ratio), "p90": np.exp(ln_ratio + band)}, index=hyperparams.index)

    def _type_term(self, filled: pd.DataFrame, gpu_type: str) -> FloatArray:
        return np.asarray(self.ratio_law.type_term(_features(filled, pd.Series(gpu_type, index=filled.index))),
                          dtype=float)

    def _ratio_band(self, from_type: str, to_type: str) -> float:
        """The ratio's band: the largest "ratio_workload:<testbed>" of the testbeds that measured both chips,
        or else of those that measured either ("ratio_workload", the largest of all, when none did); the larger
        with "ratio_type" when a side is a chip without measured ratios; 0 between a type and itself."""
        if from_type == to_type:
            return 0.0
        a, b = _chip(from_type), _chip(to_type)
        chips = {source: {_chip(t) for t in types} for source, types in self.ratio_sources}
        both = [s for s, mine in chips.items() if a in mine and b in mine]
        either = [s for s, mine in chips.items() if a in mine or b in mine]
        band = max((self.bands[f"ratio_workload:{s}"] for s in both or either), default=self.bands["ratio_workload"])
        measured = {_chip(t) for t in (self.ratio_types or self.measured_types)}
        if a not in measured or b not in measured:
            band = max(band, self.bands["ratio_type"])
        return float(band)


def _chip(gpu_type: str) -> tuple[float, float]:
    """What the model sees of a type: types with the same compute and bandwidth (e.g. V100 and V100M32) are
    one chip to it, so a measured chip's band serves its aliases."""
    spec = GPU_SPECS[gpu_type]
    return spec.peak_fp32_tflops, spec.memory_bw_gbs


def fit_epoch_time(zeus: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   gavel: tuple[pd.DataFrame, pd.DataFrame] | None = None, seed: int = 0) -> EpochTimeModel:
    """The learned model on every Zeus row (epoch_s) and every Zeus and Gavel row (ratios), with every
    conformal band (:data:`BANDS`). ``zeus``, ``gavel``: what ``load_zeus()``, ``load_gavel()`` return
    (loaded when None); a ``gavel`` with no solo rows fits the ratios on Zeus alone."""
    epochs = (zeus if zeus is not None else load_zeus())[0]
    solo = (gavel if gavel is not None else load_gavel())[0]
    return _fit(profile_rows(epochs), gavel_rows(solo), MODEL, seed, BANDS)


def _fit(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int, bands: Sequence[str],
         ratios: bool = True) -> EpochTimeModel:
    """``rows``: Zeus's (:func:`profile_rows`); ``gavel``: Gavel's (:func:`gavel_rows`), ratios only;
    ``ratios``: False for a model only asked for epoch times (its ``ratio`` is then the quotient)."""
    fitted = _PREDICTORS[predictor](seed).fit(rows)
    typed = _type_rows(rows, gavel if ratios else gavel.iloc[:0])
    model = EpochTimeModel(
        fitted, source=SOURCE if len(gavel) else ZEUS_SOURCE,
        measured_types=tuple(sorted(set(rows["gpu_type"]))),
        profiled=tuple(sorted(set(zip(rows["parameters"].astype(float), rows["samples_per_epoch"].astype(float),
                                      strict=True)))),
        bands={b: float("nan") for b in BANDS},
        ratio_law=_fit_ratio(typed, predictor, seed, fitted) if ratios else None,
        ratio_types=tuple(sorted(set(typed["gpu_type"]))),
    )
    wanted = set(bands)
    if "profiled" in wanted:
        model.bands["profiled"] = conformal_quantile(_residuals(rows, predictor, seed, _batch_folds(rows, seed)),
                                                     COVERAGE)
    if "workload" in wanted:
        # Held out by whole workloads, the rows are exchangeable by workload: each weighs the same.
        model.bands["workload"] = grouped_conformal_quantile(
            _residuals(rows, predictor, seed, _leave_one_out(rows["workload"])), rows["workload"], COVERAGE)
    if "type" in wanted:
        model.bands["type"] = conformal_quantile(_residuals(rows, predictor, seed, _leave_one_out(rows["gpu_type"])),
                                                 COVERAGE)
    if "ratio_workload" in wanted:
        residual, workload, source = _ratio_residuals(typed, predictor, seed, _leave_one_out(typed["workload"]))
        # One band per testbed, each workload weighing the same within it: pooled, the testbed with more pairs
        # would set the band of the other's chips.
        per_source = {}
        for name, types in typed.groupby("source")["gpu_type"]:
            mine = source == name
            band = grouped_conformal_quantile(residual[mine], workload[mine], COVERAGE)
            if math.isfinite(band):
                per_source[str(name)] = band, tuple(sorted(set(types)))
        model.bands.update({f"ratio_workload:{name}": band for name, (band, _) in per_source.items()})
        model.ratio_sources = tuple((name, types) for name, (_, types) in sorted(per_source.items()))
        model.bands["ratio_workload"] = max((band for band, _ in per_source.values()), default=math.nan)
    if "ratio_type" in wanted:
        chips = typed["gpu_type"].map(lambda t: str(_chip(str(t))))
        model.bands["ratio_type"] = conformal_quantile(
            _ratio_residuals(typed, predictor, seed, _leave_one_out(chips))[0], COVERAGE)
    return model


def _fit_ratio(typed: pd.DataFrame, predictor: str, seed: int, fitted: Any = None) -> _RatioPredictor:
    """The ratio part of ``predictor`` on ``typed`` (:data:`TYPE_ROW_COLUMNS`); the baseline's is the
    difference of its epoch predictions (``fitted``, when already fitted on these Zeus rows)."""
    if predictor == BASELINE and fitted is not None:
        return EpochDifference(fitted)
    return _RATIO_PREDICTORS[predictor](seed).fit(typed)


Folds = list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]


def _leave_one_out(key: pd.Series) -> Folds:
    values = key.to_numpy()
    return [(np.flatnonzero(values != k), np.flatnonzero(values == k)) for k in sorted(set(values))]


def _batch_folds(rows: pd.DataFrame, seed: int) -> Folds:
    """Whole batch sizes of each workload held out: each workload's batch sizes in a seeded order, dealt
    round-robin to :data:`BATCH_FOLDS` folds (every type of a held-out batch size goes out together)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(rows), dtype=int)
    for _, positions in sorted(rows.groupby("workload").indices.items()):
        sizes = np.unique(rows["batch_size"].to_numpy()[positions])
        order = {int(b): i % BATCH_FOLDS for i, b in enumerate(rng.permutation(sizes))}
        fold[positions] = [order[int(b)] for b in rows["batch_size"].to_numpy()[positions]]
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(BATCH_FOLDS)
            if (fold == k).any() and (fold != k).any()]


def _residuals(rows: pd.DataFrame, predictor: str, seed: int, folds: Folds) -> FloatArray:
    """Out-of-fold ln(measured / P50) of every Zeus row, in the order of ``rows`` (NaN where no fold holds a
    row out)."""
    out = np.full(len(rows), np.nan)
    for train, held in folds:
        fitted = _PREDICTORS[predictor](seed).fit(rows.iloc[train])
        part = rows.iloc[held]
        out[held] = np.log(part["epoch_s"].to_numpy(float)) - fitted.ln_epoch(_features(part, part["gpu_type"]))
    return out


def _ratio_residuals(typed: pd.DataFrame, predictor: str, seed: int,
                     folds: Folds) -> tuple[FloatArray, npt.NDArray[np.object_], npt.NDArray[np.object_]]:
    """Out-of-fold ln(measured / P50) of every ordered pair of types at one (workload, batch size) with a
    held-out row on at least one side (the other side held out or not), Zeus's and Gavel's rows alike; with
    each pair's workload and source."""
    out, workloads, sources = [], [], []
    keys = typed["workload"] + "|" + typed["batch_size"].astype(str)
    zeus = (typed["source"] == ZEUS).to_numpy()
    fitted: dict[bytes, _RatioPredictor] = {}
    for train, held in folds:
        # The baseline learns from the Zeus rows only: folds that hold out Gavel rows alone share one fit.
        key = (train[zeus[train]] if predictor == BASELINE else train).tobytes()
        if key not in fitted:
            fitted[key] = _fit_ratio(typed.iloc[train], predictor, seed)
        law = fitted[key]
        near = np.flatnonzero(keys.isin(set(keys.iloc[held])).to_numpy())
        part = typed.iloc[near]
        term = law.type_term(_features(part, part["gpu_type"]))
        first, second = _ordered_pairs(part, np.isin(near, held))
        ln_time = part["ln_time"].to_numpy(float)
        out.append((ln_time[second] - ln_time[first]) - (term[second] - term[first]))
        workloads.append(part["workload"].to_numpy(object)[first])
        sources.append(part["source"].to_numpy(object)[first])
    if not out:
        return np.array([]), np.array([], dtype=object), np.array([], dtype=object)
    return np.concatenate(out), np.concatenate(workloads), np.concatenate(sources)


def _unordered_pairs(part: pd.DataFrame) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Positions (i, j), i < j, of every two rows at one (workload, batch size)."""
    first, second = _ordered_pairs(part)
    keep = first < second
    return first[keep], second[keep]


def _ordered_pairs(part: pd.DataFrame, is_held: npt.NDArray[np.bool_] | None = None
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


# ---------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------

def evaluate_epoch_time(zeus: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                        gavel: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                        seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points): every check (module docstring) for the model and the baseline. errors columns
    :data:`ERROR_COLUMNS` (male = mean |ln(p50 / measured)|, p90_coverage = share measured <= p90); points
    columns :data:`POINT_COLUMNS`."""
    rows = profile_rows((zeus if zeus is not None else load_zeus())[0])
    extra = gavel_rows((gavel if gavel is not None else load_gavel())[0])
    frames = []
    for predictor in (MODEL, BASELINE):
        frames.append(_holdout(rows, extra, predictor, seed, CHECK_BATCH, _batch_folds(rows, seed), ("profiled",)))
        epoch, ratio = _holdout_with_ratios(rows, extra, predictor, seed)
        frames += [epoch, ratio]
        frames.append(_holdout(rows, extra, predictor, seed, CHECK_TYPE, _leave_one_out(rows["gpu_type"]),
                               ("type",)))
        frames.append(_gavel_holdout(rows, extra, predictor, seed))
    points = pd.concat([f for f in frames if len(f)], ignore_index=True)[list(POINT_COLUMNS)]
    return error_table(points), points


def _points(target: str, check: str, predictor: str, measured: FloatArray, ln_p50: FloatArray,
            band: float | FloatArray) -> pd.DataFrame:
    return pd.DataFrame({"target": target, "check": check, "predictor": predictor, "measured": measured,
                         "p50": np.exp(ln_p50), "p90": np.exp(ln_p50 + band)})


def _holdout(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int, check: str, folds: Folds,
             bands: tuple[str, ...]) -> pd.DataFrame:
    frames = []
    for train, held in folds:
        model = _fit(rows.iloc[train], gavel, predictor, seed, bands, ratios=False)
        part = rows.iloc[held]
        for gpu_type, typed in part.groupby("gpu_type"):
            out = model.predict(typed, str(gpu_type))
            frames.append(_points(TARGET, check, predictor, typed["epoch_s"].to_numpy(float),
                                  np.log(out["p50"].to_numpy(float)),
                                  np.log(out["p90"].to_numpy(float) / out["p50"].to_numpy(float))))
    return pd.concat(frames, ignore_index=True)


def _holdout_with_ratios(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str,
                         seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave one Zeus workload out (every Gavel row stays in): its epoch times and its cross-type ratios,
    from one fit per fold."""
    epoch, ratio = [], []
    for train, held in _leave_one_out(rows["workload"]):
        model = _fit(rows.iloc[train], gavel, predictor, seed, ("workload", "ratio_workload"))
        part = rows.iloc[held]
        ln_p50 = model.predictor.ln_epoch(_features(part, part["gpu_type"]))
        epoch.append(_points(TARGET, CHECK_WORKLOAD, predictor, part["epoch_s"].to_numpy(float), ln_p50,
                             model.bands["workload"]))
        ratio.append(_ratio_points(model, _type_rows(part, gavel.iloc[:0]), CHECK_RATIO, predictor))
    return pd.concat(epoch, ignore_index=True), pd.concat(ratio, ignore_index=True)


def _gavel_holdout(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int) -> pd.DataFrame:
    """Leave one Gavel model out (every Zeus row stays in): its ratios between Gavel's types."""
    frames = [pd.DataFrame(columns=list(POINT_COLUMNS))]
    for train, held in _leave_one_out(gavel["workload"]):
        model = _fit(rows, gavel.iloc[train], predictor, seed, ("ratio_workload",))
        frames.append(_ratio_points(model, gavel.iloc[held], CHECK_GAVEL, predictor))
    return pd.concat([f for f in frames if len(f)] or frames, ignore_index=True)


def _ratio_points(model: EpochTimeModel, part: pd.DataFrame, check: str, predictor: str) -> pd.DataFrame:
    """Every ordered pair of types of ``part`` (:data:`TYPE_ROW_COLUMNS`) at one (workload, batch size):
    the measured ratio and the model's (what ``model.ratio`` answers, computed once per row)."""
    part = part.reset_index(drop=True)
    first, second = _ordered_pairs(part)
    ln_time = part["ln_time"].to_numpy(float)
    x = _features(part, part["gpu_type"])
    term = model.ratio_law.type_term(x) if model.ratio_law is not None else model.predictor.ln_epoch(x)
    types = part["gpu_type"].to_numpy(object)
    ln_p50 = term[second] - term[first]
    band = np.array([model._ratio_band(str(a), str(b)) for a, b in zip(types[first], types[second], strict=True)])
    return _points(RATIO_TARGET, check, predictor, np.exp(ln_time[second] - ln_time[first]), ln_p50, band)


def gavel_ratios(solo: pd.DataFrame) -> pd.DataFrame:
    """Gavel's measured epoch-time ratios between its types, alone at scale factor 1, for the models of
    :data:`GAVEL_MODELS`: columns model, batch_size, from_type, to_type, ratio = throughput(from) /
    throughput(to) (steps/s at one batch size, so the same ratio of epoch times)."""
    rows = gavel_rows(solo)
    first, second = _ordered_pairs(rows)
    ln_time = rows["ln_time"].to_numpy(float)
    out = pd.DataFrame({"model": rows["workload"].to_numpy()[first],
                        "batch_size": rows["batch_size"].to_numpy()[first],
                        "from_type": rows["gpu_type"].to_numpy()[first], "to_type": rows["gpu_type"].to_numpy()[second],
                        "ratio": np.exp(ln_time[second] - ln_time[first])})
    return out


_COLOURS = {MODEL: "tab:green", BASELINE: "tab:grey"}


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path) -> Path:
    """Log-log measured against predicted P50, one panel per check, the model and the baseline, y = x."""
    checks = list(dict.fromkeys(points["check"]))
    fig, axes = plt.subplots(1, len(checks), figsize=(4.2 * len(checks), 4.2), squeeze=False)
    for ax, check in zip(axes[0], checks, strict=True):
        part = points[points["check"] == check]
        for predictor in (BASELINE, MODEL):  # the model last, on top
            rows = part[part["predictor"] == predictor]
            ax.scatter(rows["measured"], rows["p50"], s=7, alpha=0.55, label=predictor,
                       color=_COLOURS[predictor])
        lo = float(part[["measured", "p50"]].min().min())
        hi = float(part[["measured", "p50"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        unit = "s" if (part["target"] == TARGET).all() else "x"
        ax.set(xscale="log", yscale="log", title=check, xlabel=f"measured ({unit})")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("predicted P50")
    return save_png(fig, path)
