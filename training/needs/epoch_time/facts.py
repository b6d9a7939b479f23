"""What the epoch-time model knows before it fits: the profiled workloads and Gavel's models as a job would
state them, with the source of every figure, and the GPU types' data-sheet specs (:mod:`training.needs.epoch_time`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from placement.model.gpu_types import GPU_MEM_GIB
from training.needs.vocabulary import FAMILIES
from training.performance.gpu_speed import DEFAULT_TYPE_ALIASES

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

LN_SPECS = {t: (math.log(s.peak_fp32_tflops), math.log(s.memory_bw_gbs)) for t, s in GPU_SPECS.items()}
"""ln(peak TFLOPS), ln(bandwidth) of every type."""

ONE_HOT_FAMILIES = tuple(f for f in FAMILIES if f not in ("other",))
GPU_FEATURES = ("ln_tflops", "ln_bandwidth")


