"""How much slower a job's training step gets when its replicas are spread over machines, predicted from the
hyperparameters it states, learned from Pollux's six measured workloads; a job that names one of those six
models gets that workload's own measured fit and a band calibrated for it (see "A profiled model").

**The quantity.** The spread slowdown of a job on ``K`` replicas over ``n`` machines is

    step(K replicas on n machines) / step(K replicas on one machine)          n > 1  (1 for n = 1)

and the scaling slowdown ``step(K on n) / step(1 GPU)`` is offered beside it. Both come from a
:class:`placement.model.speed.SyncCurve` predicted for the job at its local batch, so what the replay applies
and what this module reports are the same arithmetic.

**The six workloads, described by hyperparameters.** The Pollux profiles (``data/profiles/pollux``) name a
workload, not a model size. :data:`POLLUX_MODELS` gives each one the public facts of the model it trains,
so that every profile row reads as a job stating ``parameters``, ``model_family``, ``precision`` and
``batch_size`` (the row's local batch). Counts are trainable parameters as the model papers define them:

| workload    | model                               | parameters | family      | source                        |
|-------------|-------------------------------------|-----------:|-------------|-------------------------------|
| bert        | BERT-base, SQuAD span head          | 110M       | transformer | model paper, Devlin 2019      |
| cifar10     | ResNet-18, CIFAR variant (3x3 stem) | 11.2M      | cnn         | model paper, He 2016          |
| deepspeech2 | DeepSpeech2, 2 conv + 5 biGRU x 800 | 41.2M      | rnn         | model paper, Amodei 2016 (*)  |
| imagenet    | ResNet-50                           | 25.6M      | cnn         | model paper, He 2016          |
| ncf         | NeuMF, 8 predictive factors, ML-1M  | 0.235M     | recommender | model paper, He 2017 (*)      |
| yolov3      | YOLOv3 (Darknet-53), 20 VOC classes | 61.6M      | detection   | model paper, Redmon 2018      |

(*) Counted: summed from the architecture the paper describes at the configuration named, because
the paper gives no single total: DeepSpeech2 on 161 spectrogram bins (convolutions 0.25M, first recurrent
layer 10.1M, four more 7.7M each, output 0.02M); NeuMF on MovieLens-1M (6,040 users, 3,706 items; GMF
embeddings of 8, MLP embeddings of 16, MLP 32-16-8). They are the least certain rows: another layer width
in the profiled runs would move them. BERT is the base model: local batches of up to 12 SQuAD sequences
per GPU fit BERT-base's memory, not BERT-large's. All six are taken to train in fp32 (no profile says
otherwise).

**The predictor** (seconds per step, ``P`` parameters, ``m`` local batch, ``G`` gradient gigabytes):

    G          = P x bytes per gradient value / 1e9      4 bytes for fp32 and amp (mixed precision keeps
                                                          fp32 gradients), 2 for fp16 and bf16
    grad(m)    = o_0 + o_1 P + c_f P m                   compute: a fixed overhead, an optimizer update that
                                                          touches every parameter, and per-sample work with
                                                          FLOPs proportional to P; c_f depends on the family
    sync(K, n) = 0                                       K = 1
               = a_r + b_r (K - 2)                       n = 1, each term = latency + seconds per GB x G
               = a_n + b_n (K - 2)                       n > 1, a_n >= a_r and b_n >= b_r
    step       = (grad ** gamma + sync ** gamma) ** (1 / gamma)

Each sync term is a latency plus the gradient bytes over an effective bandwidth, one within a machine and
one across machines. A ring all-reduce moves ``2 (K - 1) / K x G`` per link, a factor 1 at K = 2: the
``a`` terms are the two-replica all-reduce. Past two replicas the ring factor saturates below 2 while the
measured sync time keeps growing (more hops, waiting for the slowest replica), so the growth is Pollux's
linear ``b (K - 2)``, again latency plus bytes. That is exactly the shape of ``SyncCurve``.

Fitted in two stages, both on measured rows only:

1. each workload's own Pollux fit (:func:`training.performance.spread.fit_spread`) gives its compute line
   ``alpha_s + beta_s m``;
2. across the training workloads: ``o_0, o_1`` by least squares on ``log alpha_s`` (non-negative);
   ``c_f`` = geometric mean of ``beta_s / P`` over the workloads of the job's compute group, where
   ``cnn`` and ``detection`` are one (convolutional) group, ``rnn``, ``transformer`` and ``mlp`` (dense),
   and ``recommender`` (embedding lookups) the others; a group no training workload has, and a job that
   states no family, get the median over all training workloads (the median, because NCF's embedding
   lookups cost a twentieth or less of any other workload's work per parameter). The eight sync coefficients and
   a single ``gamma`` are fitted by least squares on ``log step`` of every multi-GPU row, each workload
   with its own measured compute line, every workload weighing the same (a workload's rows share
   ``1 / n_rows``).

**A profiled model.** A job whose ``model`` is one of the six model names of :data:`POLLUX_MODELS`
(``bert_base_uncased``, ``resnet18_cifar``, ``deepspeech2``, ``resnet50``, ``neumf``, ``yolov3``; matched
without regard to case or to separators, so "ResNet-50", "resnet_50" and "bert-base-uncased" match, while
"resnet18", "resnet101" or a workload name such as "imagenet" do not: :func:`profiled_workload`) takes the
"profiled" path: its P50 curve is that workload's own Pollux fit
(:func:`training.performance.spread.fit_spread` on all its rows) at the job's local batch, and its P90 the
"profiled" margin below. The keys it leaves out (``parameters``, ``model_family``, ``precision``) come from
the table, so a name and a ``batch_size`` are enough. A job that names the model but states facts of
another (``parameters`` more than :data:`PARAMETER_TOLERANCE` from the table's, a precision other than
fp32) trains something Pollux did not measure and takes the hyperparameter path, as does a job that names
no profiled model. Batch sizes outside a workload's measured range extrapolate its compute line
``alpha_s + beta_s m``; the profiled band was calibrated on held-out batch sizes inside or at the edge of
that range.

The own fit was chosen over the hyperparameter model for these jobs by the "unseen batch sizes" check
(below): on held-out batch sizes the refitted law's P50 has MALE 0.132 on the spread slowdown and 0.257 on
the step time, the workload's refitted own fit 0.084 and 0.087.

**P90, unseen model.** Split-conformal on leave-one-model-out residuals: each workload's rows are predicted
by the model fitted on the other five, from hyperparameters alone, and scored by the signed residual
``log(measured / P50)``. The exchangeable unit is the model, not the row: rows of one model share its
error. With ``G`` calibration models the conformal rank of a 0.9 bound is ``ceil(0.9 (G + 1))``, more than
``G`` for every ``G < 9``, so the bound falls back to the largest of the models' scores: the margin ``q``
is the largest over the calibration workloads of their own 0.9 quantile of the residuals (the smallest
margin that covers 90% of the rows of every workload seen), never below 0 (P90 >= P50); the P90 is
``P50 x exp(q)``. With five calibration models a new model's rows are covered at 90% with probability
5/6 under exchangeability, not 0.9: six models are few. One ``q`` per quantity: spread slowdown, scaling
slowdown, step time.

**P90, profiled.** Split-conformal on out-of-fold residuals of the profiled path: each workload's distinct
local batches are dealt into up to :data:`BATCH_FOLDS` folds by rank (every fourth value); the rows of one
fold are predicted by the workload's own fit on its other folds and scored by ``log(measured / P50)``. The
margin is the ``ceil(0.9 (N + 1))``-th smallest of the ``N`` residuals of all workloads pooled
(:func:`training.needs.scoring.conformal_quantile`, the rule of the other estimators' "profiled" bands),
never below 0. Here the rows are the unit, not the model: the job's model is one of those the residuals
come from, and only its batch size is new. On the shipped profiles the margins are 0.132 (spread), 0.176
(scaling) and 0.138 (step): P90 / P50 = 1.14 for the spread slowdown, against 1.94 (0.660) for a job that
names no profiled model.

Either way, the P90 ``SyncCurve`` scales the cross-machine terms ``network_s`` until its spread slowdown at
the reference placement (:data:`REFERENCE_SPREAD`, 8 replicas on 2 machines, or the one asked for) equals
the P90 there; its one-machine terms stay the P50's.

**What hyperparameters cannot tell.** The sync side is well determined by the gradient bytes (the five
workloads above 10M parameters need 11-13 ms per million fp32 parameters across machines at K = 2). The
compute side is not: per-sample work per parameter spans a factor of 200 over the six (input size and
layer reuse, which no stated key gives), and a family no training workload has gets the median. The
fixed latencies are pinned by the one small model (NCF). Because compute and gradient bytes both grow in
proportion to ``P``, the predicted spread slowdown of a compute-heavy family at a fixed batch moves with
``P`` only through the fixed parts: it rises with ``P`` at small batches and falls a little at large ones
(on the shipped fit the cross-machine latency, 17 ms, outweighs the fixed compute overhead, 6 ms, relative
to their per-parameter parts). It grows with ``P`` where compute does not (embedding lookups), and always
with the gradient bytes at fixed compute (fp32 over fp16).

**Baselines.** "no slowdown": a factor 1 (P90 1). "class-blind": the median over the other workloads (one
vote each, the workload's median over its rows) of the measured slowdown at the same (K, n), with a
conformal P90 by the same leave-one-model-out rule. For step time, "analytical": ``step = t P m``, one
throughput constant (the geometric mean over the training rows, every workload weighing the same), no
sync; it gets a conformal P90 too.

**Evaluation** (:func:`evaluate_spread_sensitivity`), every P90 calibrated without the held-out rows:

* "unseen model": fit on five workloads, predict every row of the sixth from its hyperparameters (the rows
  name no model: it is the one held out); the margins come from an inner leave-one-model-out over the five.
* "unseen batch sizes": each batch fold of each workload (as for the profiled margin) in turn is held out;
  the workload's own fit and the law are refitted on everything else (the solver starting from those rows
  alone), and the held-out rows, which name their model, take the profiled path of that refitted model.
  Its profiled margin comes from an inner batch-fold split of the training rows only: the held-out
  workload's remaining folds each predicted from the others, every other workload's folds as above. The
  baselines keep the margins of the "unseen model" fold of the same workload (calibrated without it):
  neither reads the model's name.

On the shipped profiles (MALE = mean ``|log(P50 / measured)|``, cover = share of measured <= P90):

| target          | check              | n    | model MALE | cover | baseline    | MALE  | cover |
|-----------------|--------------------|------|------------|-------|-------------|-------|-------|
| spread_slowdown | unseen model       | 6884 | 0.304      | 0.928 | no slowdown | 0.454 | 0.013 |
|                 |                    |      |            |       | class-blind | 0.322 | 0.969 |
| step_s          | unseen model       | 7103 | 0.737      | 0.932 | analytical  | 1.360 | 0.995 |
| spread_slowdown | unseen batch sizes | 6884 | 0.084      | 0.899 | no slowdown | 0.454 | 0.013 |
|                 |                    |      |            |       | class-blind | 0.322 | 0.969 |
| step_s          | unseen batch sizes | 7103 | 0.087      | 0.901 | analytical  | 1.198 | 0.998 |

The model's coverage is within 0.88-0.95 on every check; the baselines' is not (their margins are the
unseen-model ones, and "no slowdown" has none). Pooled coverage hides the workloads: on unseen batch
sizes deepspeech2's rows are covered at 0.87 (spread) and 0.84 (step), ncf's at 0.88, the others' at
0.91-0.93. Most spread rows (6509 of 6884) have K > 4, whose measured spread slowdown divides by the
workload's fit on all its rows (below), held-out rows included; dividing instead by the fold's own refit
moves the spread MALE on unseen batch sizes from 0.084 to 0.088.

Measured spread slowdown of a multi-machine row: its measured step over the median measured step of the
same workload at the same K and local batch on one machine, or, where the profiles never put K replicas
on one machine (K > 4), the workload's own Pollux fit at (K, 1, local batch). Measured scaling slowdown
of a multi-GPU row: its step over the measured one-GPU step at the same local batch (the fit where none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import brentq, least_squares  # type: ignore[import-untyped]

from placement.model.speed import SyncCurve
from training.needs.scoring import POINT_COLUMNS, conformal_quantile, error_table
from training.performance.profiles import load_pollux
from training.performance.spread import SpreadFit, fit_all, fit_spread
from training.png import save_png

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
_GB = 1e9
_TINY_S = 1e-6

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


@dataclass(frozen=True)
class SpreadLaw:
    """The fitted cross-workload laws: compute from parameters and family, sync from gradient bytes."""

    overhead_s: tuple[float, float]
    """(o_0 s, o_1 s per parameter) of the per-step overhead."""
    per_sample_s: Mapping[str, float]
    """c_f by compute group: seconds per sample per parameter."""
    pooled_per_sample_s: float
    sync: tuple[float, ...]
    """(latency s, s per GB) of a_r, b_r, a_n, b_n: eight numbers."""
    gamma: float

    def terms(self, parameters: FloatArray, batch: FloatArray, groups: Iterable[str | None],
              gigabytes: FloatArray) -> tuple[FloatArray, ...]:
        """(grad_s, a_r, b_r, a_n, b_n) of each job."""
        c = np.array([self.per_sample_s.get(g, self.pooled_per_sample_s) if g else self.pooled_per_sample_s
                      for g in groups], dtype=float)
        grad = self.overhead_s[0] + self.overhead_s[1] * parameters + c * parameters * batch
        s = self.sync
        return (np.maximum(grad, _TINY_S), s[0] + s[1] * gigabytes, s[2] + s[3] * gigabytes,
                s[4] + s[5] * gigabytes, s[6] + s[7] * gigabytes)


@dataclass
class SpreadSensitivityModel:
    """Predicted sync curve and spread slowdown of a job from its hyperparameters (see the module doc)."""

    law: SpreadLaw
    margins: dict[str, float]
    """log margins of the P90 over the P50 of a job that names no profiled model ("unseen model"):
    "spread", "scaling", "step"."""
    workloads: tuple[str, ...]
    target: str = TARGET
    unit: str = "x"
    source: str = SOURCE
    reference_spread: tuple[int, int] = REFERENCE_SPREAD
    notes: dict[str, str] = field(default_factory=dict)
    profiled: dict[str, SpreadFit] = field(default_factory=dict)
    """Each profiled workload's own measured fit, by workload: the P50 of a job that names its model."""
    profiled_margins: dict[str, float] = field(default_factory=dict)
    """log margins of the P90 over the P50 of a job that names a profiled model ("profiled"): "spread",
    "scaling", "step"."""

    def required_keys(self) -> tuple[str, ...]:
        """What a job must state, or fill by naming a profiled ``model`` (which gives ``parameters``)."""
        return ("parameters", "batch_size")

    def curve(self, hyperparams: Mapping[str, Any], quantile: str = "p50",
              at: tuple[int, int] | None = None) -> SyncCurve | None:
        """The job's sync curve at its batch size (``quantile`` "p50" or "p90"); None where ``parameters`` or
        ``batch_size`` is missing. The P90 curve's spread slowdown at ``at`` (replicas, machines; default
        :data:`REFERENCE_SPREAD`) is the P90 there."""
        if quantile not in ("p50", "p90"):
            raise ValueError(f"quantile must be 'p50' or 'p90', got {quantile!r}")
        frame = _frame([hyperparams])
        if frame["_missing"].iloc[0]:
            return None
        terms, gamma = self._terms(frame)
        grad, ar, br, an, bn = (float(v[0]) for v in terms)
        p50 = SyncCurve(grad, (ar, br), (an, bn), float(gamma[0]))
        if quantile == "p50":
            return p50
        k, n = at if at is not None else self.reference_spread
        if k < 2 or n < 2:
            raise ValueError(f"the P90 curve is matched on a spread placement (K >= 2, n >= 2), got {(k, n)}")
        target = _slowdown(p50, k, n) * math.exp(float(self._margins(frame)["spread"][0]))
        return _scaled_network(p50, k, n, target)

    def predict(self, hyperparams: pd.DataFrame, replicas: int, machines: int,
                versus: str = "one machine") -> pd.DataFrame:
        """P50 and P90 of step(K = ``replicas`` on ``machines``) / step(K on one machine), or / step(one GPU)
        with ``versus="one gpu"``; one row per job (same index), NaN where a required key is missing."""
        if versus not in VERSUS:
            raise ValueError(f"versus must be one of {VERSUS}, got {versus!r}")
        if replicas < 1 or machines < 1 or machines > replicas:
            raise ValueError(f"need 1 <= machines <= replicas, got {replicas} replicas on {machines} machines")
        frame = _frame(hyperparams.to_dict("records"))
        k, n = np.full(len(frame), float(replicas)), np.full(len(frame), float(machines))
        key = "spread" if versus == VERSUS[0] else "scaling"
        p50 = self._quantities(frame, k, n)[key]
        moved = machines > 1 if versus == VERSUS[0] else replicas > 1
        margin = self._margins(frame)[key] if moved else np.zeros(len(frame))
        return pd.DataFrame({"p50": p50, "p90": p50 * np.exp(margin)}, index=hyperparams.index)

    def step_s(self, hyperparams: pd.DataFrame, replicas: FloatArray, machines: FloatArray) -> FloatArray:
        """P50 step time, s, of each job at its own (replicas, machines); NaN where a key is missing."""
        frame = _frame(hyperparams.to_dict("records"))
        k = np.broadcast_to(np.asarray(replicas, float), (len(frame),))
        n = np.broadcast_to(np.asarray(machines, float), (len(frame),))
        return self._quantities(frame, k, n)["step"]

    def _quantities(self, frame: pd.DataFrame, k: FloatArray, n: FloatArray) -> dict[str, FloatArray]:
        """P50 step time (s), spread and scaling slowdown of each job of a :func:`_frame` at its own (K, n);
        NaN where a required key is missing."""
        terms, gamma = self._terms(frame)
        ones = np.ones(len(frame))
        step = _step(terms, k, n, gamma)
        missing = frame["_missing"].to_numpy(bool)
        out = {"step": step, "spread": step / _step(terms, k, ones, gamma),
               "scaling": step / _step(terms, ones, ones, gamma)}
        return {key: np.where(missing, np.nan, value) for key, value in out.items()}

    def _is_profiled(self, frame: pd.DataFrame) -> NDArray[np.bool_]:
        return np.array([w in self.profiled for w in frame["_workload"]], dtype=bool)

    def _margins(self, frame: pd.DataFrame) -> dict[str, FloatArray]:
        """log margin of each job's P90 over its P50: the "profiled" one where it names a profiled model (the
        "unseen model" one where no profiled margin could be calibrated: no workload with two batch sizes)."""
        profiled = self._is_profiled(frame)
        out = {}
        for key in ("spread", "scaling", "step"):
            own = self.profiled_margins.get(key, math.nan)
            out[key] = np.where(profiled, own if math.isfinite(own) else self.margins[key], self.margins[key])
        return out

    def _terms(self, frame: pd.DataFrame) -> tuple[tuple[FloatArray, ...], FloatArray]:
        """((grad_s, a_r, b_r, a_n, b_n), gamma) of each job: the law's, or its workload's measured fit where
        the job names a profiled model."""
        p = frame["parameters"].to_numpy(float)
        m = np.nan_to_num(frame["batch_size"].to_numpy(float), nan=1.0)
        terms = tuple(np.array(t, dtype=float) for t in self.law.terms(
            np.where(np.isnan(p), 1.0, p), m, frame["_group"],
            np.nan_to_num(frame["_gigabytes"].to_numpy(float), nan=0.0)))
        gamma = np.full(len(frame), self.law.gamma)
        for i, workload in enumerate(frame["_workload"]):
            fit = self.profiled.get(workload) if workload else None
            if fit is None:
                continue
            values = (max(float(fit.grad_s(m[i])), _TINY_S), *fit.local_s, *fit.network_s)
            for term, value in zip(terms, values, strict=True):
                term[i] = value
            gamma[i] = fit.gamma
        return terms, gamma


def fit_spread_sensitivity(pollux: pd.DataFrame | None = None) -> SpreadSensitivityModel:
    """The model on every Pollux workload: its "unseen model" P90 margins from leave-one-model-out residuals,
    its "profiled" ones from residuals out of batch-size folds."""
    pollux = load_pollux() if pollux is None else pollux
    fits = fit_all(pollux)
    data = _Data.of(pollux, fits)
    workloads = tuple(sorted(fits))
    law = _fit_law(data, fits, workloads)
    residuals = _lomo_residuals(data, fits, workloads)
    margins = {k: _margin(data, v) for k, v in residuals.items() if k in ("spread", "scaling", "step")}
    everything = np.ones(len(data.step), dtype=bool)
    profiled = _profiled_margins(_profiled_residuals(data, fits, _batch_folds(data), everything, {}))
    return SpreadSensitivityModel(law, margins, workloads, notes={w: POLLUX_MODELS[w].source for w in workloads},
                                  profiled=dict(fits), profiled_margins=profiled)


def evaluate_spread_sensitivity(pollux: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points) of the two checks (see the module doc) on the given table (the shipped profiles
    when None). errors: target, check, predictor, n, male (mean |log(p50 / measured)|), p90_coverage."""
    pollux = load_pollux() if pollux is None else pollux
    fits = fit_all(pollux)
    data = _Data.of(pollux, fits)
    workloads = tuple(sorted(fits))
    frames: list[pd.DataFrame] = []
    margins_of: dict[str, dict[str, float]] = {}
    laws: dict[tuple[str, ...], SpreadLaw] = {}  # the pairs left out of the inner folds repeat across outer folds
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        inner = _lomo_residuals(data, fits, others, laws)
        margins = {k: _margin(data, v) for k, v in inner.items()}
        margins_of[held] = margins
        rows = data.workload == held
        predicted = _predict_rows(data, _cached_law(laws, data, fits, others), rows)  # the rows name no model
        band = {k: np.full(int(rows.sum()), margins[k]) for k in ("spread", "step")}
        frames.append(_check_points(data, rows, others, UNSEEN_MODEL, predicted, band, margins))
    fold = _batch_folds(data)
    own_fits: dict[tuple[str, tuple[int, ...]], SpreadFit] = {}  # the inner folds' fits repeat across outer folds
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        for f in sorted(set(fold[data.workload == held].tolist()) - {-1}):  # one batch size: nothing to hold out
            rows = (data.workload == held) & (fold == f)
            train = ~rows
            refit = dict(fits)
            refit[held] = _own_fit(own_fits, data, fits, held, train & (data.workload == held), fold)
            model = SpreadSensitivityModel(
                _fit_law(data, refit, workloads, exclude=rows),
                {k: margins_of[held][k] for k in ("spread", "scaling", "step")}, workloads, profiled=refit,
                profiled_margins=_profiled_margins(_profiled_residuals(data, fits, fold, train, own_fits)))
            frame = _frame(data.hyperparams[rows].to_dict("records"))  # the rows name their model
            if not model._is_profiled(frame).all():
                raise RuntimeError(f"held-out rows of {held} do not take the profiled path")
            frames.append(_check_points(data, rows, others, UNSEEN_BATCH,
                                        model._quantities(frame, data.gpus[rows], data.machines[rows]),
                                        model._margins(frame), margins_of[held], analytical_rows=train))
    points = pd.concat(frames, ignore_index=True)[list(POINT_COLUMNS)]
    return error_table(points), points


_COLOURS = {MODEL: "tab:green", NO_SLOWDOWN: "tab:grey", CLASS_BLIND: "tab:orange", ANALYTICAL: "tab:orange"}


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path, max_points: int = 1500, seed: int = 0) -> Path:
    """Log-log measured against predicted P50, one panel per (target, check), every predictor (at most
    ``max_points`` each, a seeded sample)."""
    panels = list(dict.fromkeys(zip(points["target"], points["check"], strict=True)))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (target, check) in zip(axes[0], panels, strict=True):
        part = points[(points["target"] == target) & (points["check"] == check)]
        for predictor, rows in reversed(list(part.groupby("predictor", sort=False))):  # the model on top
            rows = rows.sample(n=min(max_points, len(rows)), random_state=seed)
            ax.scatter(rows["measured"], rows["p50"], s=6, alpha=0.5, label=str(predictor),
                       color=_COLOURS.get(str(predictor), "tab:purple"))
        lo = float(part[["measured", "p50"]].min().min())
        hi = float(part[["measured", "p50"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        ax.set(xscale="log", yscale="log", title=f"{target}, {check}", xlabel="measured")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("predicted P50")
    return save_png(fig, path)


# ---------------------------------------------------------------------------------------------------------
# Data, fitting and calibration


@dataclass(frozen=True)
class _Data:
    """The Pollux rows as arrays, with their hyperparameters and measured slowdowns."""

    rows: pd.DataFrame
    hyperparams: pd.DataFrame
    workload: NDArray[np.str_]
    gpus: FloatArray
    machines: FloatArray
    batch: FloatArray
    step: FloatArray
    spread: FloatArray
    """Measured spread slowdown; NaN on one machine."""
    scaling: FloatArray
    """Measured scaling slowdown; NaN on one GPU."""

    @staticmethod
    def of(pollux: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> _Data:
        rows = pollux.reset_index(drop=True)
        return _Data(rows, pollux_hyperparams(rows), rows["workload"].to_numpy(str), rows["gpus"].to_numpy(float),
                     rows["machines"].to_numpy(float), rows["local_bsz"].to_numpy(float),
                     rows["step_time_s"].to_numpy(float), _measured_spread(rows, fits),
                     _measured_scaling(rows, fits))


def _measured_spread(rows: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> FloatArray:
    packed = rows[rows["machines"] == 1].groupby(["workload", "gpus", "local_bsz"])["step_time_s"].median()
    out = np.full(len(rows), np.nan)
    for i, (w, k, n, m, step) in enumerate(rows[["workload", "gpus", "machines", "local_bsz", "step_time_s"]]
                                           .itertuples(index=False)):
        if n > 1:
            base = packed.get((w, k, m))
            if base is None:
                base = float(fits[w].step_s(np.array([k]), np.array([1.0]), np.array([m]))[0])
            out[i] = step / base
    return out


def _measured_scaling(rows: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> FloatArray:
    single = rows[rows["gpus"] == 1].groupby(["workload", "local_bsz"])["step_time_s"].median()
    out = np.full(len(rows), np.nan)
    for i, (w, k, m, step) in enumerate(rows[["workload", "gpus", "local_bsz", "step_time_s"]]
                                        .itertuples(index=False)):
        if k > 1:
            base = single.get((w, m))
            if base is None:
                base = float(fits[w].step_s(np.array([1.0]), np.array([1.0]), np.array([m]))[0])
            out[i] = step / base
    return out


def _frame(records: Iterable[Mapping[Any, Any]]) -> pd.DataFrame:
    """Stated hyperparameters as the columns the model reads: parameters, batch_size (float, NaN where
    missing), _group, _gigabytes, _workload (the profiled workload the job names, None if none or if its
    stated parameters or precision say it trains another model), _missing. A job naming a profiled model
    takes the keys it leaves out (parameters, model_family, precision) from :data:`POLLUX_MODELS`."""
    parameters, batch, groups, gigabytes, workloads, missing = [], [], [], [], [], []
    for r in records:
        workload = profiled_workload(r.get("model"))
        facts = POLLUX_MODELS[workload] if workload is not None else None
        p, m = _number(r.get("parameters")), _number(r.get("batch_size"))
        stated_precision, family = r.get("precision"), r.get("model_family")
        precision = (stated_precision.lower() if isinstance(stated_precision, str)
                     else facts.precision if facts is not None else "fp32")
        if facts is not None:
            if not p > 0:  # NaN compares False
                p = float(facts.parameters)
            if not isinstance(family, str):
                family = facts.family
            if abs(p / facts.parameters - 1.0) > PARAMETER_TOLERANCE or precision != facts.precision:
                workload = None
        parameters.append(p)
        batch.append(m)
        groups.append(COMPUTE_GROUP.get(family.lower()) if isinstance(family, str) else None)
        gigabytes.append(p * BYTES_PER_GRADIENT.get(precision, 4) / _GB)
        workloads.append(workload)
        missing.append(not (p > 0 and m > 0))
    return pd.DataFrame({"parameters": np.array(parameters, dtype=float), "batch_size": np.array(batch, dtype=float),
                         "_group": groups, "_gigabytes": np.array(gigabytes, dtype=float),
                         "_workload": pd.Series(workloads, dtype=object), "_missing": missing})


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool | str):
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _step(terms: tuple[FloatArray, ...], k: FloatArray, n: FloatArray, gamma: float | FloatArray) -> FloatArray:
    grad, ar, br, an, bn = terms
    sync = np.where(n <= 1, ar + br * (k - 2), an + bn * (k - 2))
    sync = np.where(k <= 1, 0.0, np.maximum(sync, 0.0))
    return np.asarray(grad * (1.0 + (sync / grad) ** gamma) ** (1.0 / gamma), dtype=float)


def _slowdown(curve: SyncCurve, replicas: int, machines: int) -> float:
    return curve.step_s(replicas, machines) / curve.step_s(replicas, 1)


def _scaled_network(curve: SyncCurve, replicas: int, machines: int, target: float) -> SyncCurve:
    """``curve`` with network_s scaled by the factor that makes its spread slowdown ``target``."""
    def scaled(s: float) -> SyncCurve:
        return replace(curve, network_s=(curve.network_s[0] * s, curve.network_s[1] * s))

    if _slowdown(curve, replicas, machines) >= target:
        return curve
    high = 2.0
    while _slowdown(scaled(high), replicas, machines) < target:
        high *= 2
        if high > 1e12:
            raise ValueError(f"no scaling of the cross-machine terms of {curve} reaches a slowdown of {target}")
    s = brentq(lambda x: _slowdown(scaled(x), replicas, machines) - target, 1.0, high, xtol=1e-10, rtol=1e-12)
    return scaled(float(s))


def _fit_law(data: _Data, fits: Mapping[str, SpreadFit], workloads: tuple[str, ...],
             exclude: NDArray[np.bool_] | None = None) -> SpreadLaw:
    """Stage 2 on ``workloads`` (each with its own compute line from ``fits``), leaving out ``exclude`` rows."""
    facts = [POLLUX_MODELS[w] for w in workloads]
    p = np.array([f.parameters for f in facts], dtype=float)
    alpha = np.array([max(fits[w].alpha_s, _TINY_S) for w in workloads])
    beta = np.array([max(fits[w].beta_s, _TINY_S * 1e-3) for w in workloads])

    def overhead_residuals(x: FloatArray) -> FloatArray:
        return np.asarray(np.log(alpha) - np.log(np.maximum(x[0] + x[1] * p, _TINY_S)), dtype=float)

    start = np.array([float(np.min(alpha)) / 2, float(np.median(alpha / p)) / 2])
    overhead = least_squares(overhead_residuals, start, bounds=([0.0, 0.0], [np.inf, np.inf]), x_scale="jac").x
    log_c = np.log(beta / p)
    groups = [COMPUTE_GROUP[f.family] for f in facts]
    per_sample = {g: float(np.exp(np.mean([c for c, h in zip(log_c, groups, strict=True) if h == g])))
                  for g in sorted(set(groups))}

    use = np.isin(data.workload, workloads) & (data.gpus >= 2)
    if exclude is not None:
        use &= ~exclude
    w = data.workload[use]
    k, n, m, step = data.gpus[use], data.machines[use], data.batch[use], data.step[use]
    grad = np.empty(len(w))
    gigabytes = np.empty(len(w))
    weight = np.empty(len(w))
    for name in workloads:
        mine = w == name
        grad[mine] = fits[name].grad_s(m[mine])
        gigabytes[mine] = POLLUX_MODELS[name].parameters * BYTES_PER_GRADIENT[POLLUX_MODELS[name].precision] / _GB
        weight[mine] = 1.0 / math.sqrt(max(int(mine.sum()), 1))
    grad = np.maximum(grad, _TINY_S)

    def sync_terms(x: FloatArray) -> tuple[FloatArray, ...]:
        ar, br = x[0] + x[1] * gigabytes, x[2] + x[3] * gigabytes
        return grad, ar, br, ar + x[4] + x[5] * gigabytes, br + x[6] + x[7] * gigabytes

    def residuals(x: FloatArray) -> FloatArray:
        return np.asarray(weight * (np.log(step) - np.log(_step(sync_terms(x), k, n, float(x[8])))), dtype=float)

    x0 = _sync_start(fits, workloads)
    bounds = ([0.0] * 8 + [1.0], [np.inf] * 8 + [10.0])
    result = least_squares(residuals, x0, bounds=bounds, x_scale="jac", method="trf")
    x = result.x
    sync = (x[0], x[1], x[2], x[3], x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7])
    return SpreadLaw((float(overhead[0]), float(overhead[1])), per_sample, float(np.exp(np.median(log_c))),
                tuple(float(v) for v in sync), float(x[8]))


def _sync_start(fits: Mapping[str, SpreadFit], workloads: tuple[str, ...]) -> FloatArray:
    """Starting point of the sync fit: small latencies, the workloads' median seconds per GB, their median gamma."""
    gigabytes = np.array([POLLUX_MODELS[w].parameters * BYTES_PER_GRADIENT[POLLUX_MODELS[w].precision] / _GB
                          for w in workloads])
    terms = np.array([[*fits[w].local_s, fits[w].network_s[0] - fits[w].local_s[0],
                       fits[w].network_s[1] - fits[w].local_s[1]] for w in workloads])
    per_gb = np.median(np.maximum(terms, 0.0) / gigabytes[:, None], axis=0)
    gamma = float(np.clip(np.median([fits[w].gamma for w in workloads]), 1.0, 10.0))
    return np.array([1e-3, per_gb[0], 1e-4, per_gb[1], 1e-3, per_gb[2], 1e-4, per_gb[3], gamma])


def _predict_rows(data: _Data, law: SpreadLaw, rows: NDArray[np.bool_]) -> dict[str, FloatArray]:
    """P50 spread slowdown, scaling slowdown and step time of ``rows`` from their hyperparameters."""
    frame = _frame(data.hyperparams[rows].drop(columns="model").to_dict("records"))  # the hyperparameter path
    p = frame["parameters"].to_numpy(float)
    terms = law.terms(p, frame["batch_size"].to_numpy(float), frame["_group"], frame["_gigabytes"].to_numpy(float))
    k, n = data.gpus[rows], data.machines[rows]
    step = _step(terms, k, n, law.gamma)
    ones = np.ones(len(k))
    return {"step": step, "spread": step / _step(terms, k, ones, law.gamma),
            "scaling": step / _step(terms, ones, ones, law.gamma)}


def _class_blind(data: _Data, rows: NDArray[np.bool_], others: tuple[str, ...]) -> FloatArray:
    """Median over ``others`` (one vote each: its median) of the measured spread slowdown at each row's (K, n)."""
    table = pd.DataFrame({"w": data.workload, "k": data.gpus, "n": data.machines, "s": data.spread})
    table = table[table["w"].isin(others) & table["s"].notna()]
    per = table.groupby(["k", "n", "w"])["s"].median().groupby(["k", "n"]).median()
    overall = float(table.groupby("w")["s"].median().median())
    keys = zip(data.gpus[rows], data.machines[rows], strict=True)
    return np.array([float(per.get((k, n), overall)) if n > 1 else 1.0 for k, n in keys])


def _analytical_constant(data: _Data, rows: NDArray[np.bool_]) -> float:
    """t of step = t P m: the geometric mean over ``rows``, every workload weighing the same."""
    p = data.hyperparams["parameters"].to_numpy(float)
    log_t = np.log(data.step / (p * data.batch))
    means = [float(np.mean(log_t[rows & (data.workload == w)])) for w in np.unique(data.workload[rows])]
    return float(np.exp(np.mean(means)))


def _cached_law(laws: dict[tuple[str, ...], SpreadLaw], data: _Data, fits: Mapping[str, SpreadFit],
                workloads: tuple[str, ...]) -> SpreadLaw:
    key = tuple(sorted(workloads))
    if key not in laws:
        laws[key] = _fit_law(data, fits, key)
    return laws[key]


def _lomo_residuals(data: _Data, fits: Mapping[str, SpreadFit], workloads: tuple[str, ...],
                    laws: dict[tuple[str, ...], SpreadLaw] | None = None) -> dict[str, FloatArray]:
    """Signed log residuals log(measured / P50) of every row of ``workloads``, each predicted by the model (and
    the baselines) fitted on the others; NaN elsewhere. Keys: spread, scaling, step, class-blind, analytical."""
    out = {key: np.full(len(data.step), np.nan) for key in ("spread", "scaling", "step", CLASS_BLIND, ANALYTICAL)}
    p = data.hyperparams["parameters"].to_numpy(float)
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        rows = data.workload == held
        predicted = _predict_rows(data, _cached_law({} if laws is None else laws, data, fits, others), rows)
        out["spread"][rows] = np.log(data.spread[rows] / predicted["spread"])
        out["scaling"][rows] = np.log(data.scaling[rows] / predicted["scaling"])
        out["step"][rows] = np.log(data.step[rows] / predicted["step"])
        out[CLASS_BLIND][rows] = np.log(data.spread[rows] / _class_blind(data, rows, others))
        t = _analytical_constant(data, np.isin(data.workload, others))
        out[ANALYTICAL][rows] = np.log(data.step[rows] / (t * p[rows] * data.batch[rows]))
    return out


def _margin(data: _Data, residuals: FloatArray) -> float:
    """The log margin that covers 0.9 of the rows of every calibration workload: the largest of their 0.9
    quantiles of the signed residuals, at least 0 (see the module doc)."""
    ok = np.isfinite(residuals)
    quantiles = [float(np.quantile(residuals[ok & (data.workload == w)], QUANTILE))
                 for w in np.unique(data.workload[ok])]
    return max([*quantiles, 0.0])


def _check_points(data: _Data, rows: NDArray[np.bool_], others: tuple[str, ...], check: str,
                  predicted: Mapping[str, FloatArray], band: Mapping[str, FloatArray], margins: Mapping[str, float],
                  analytical_rows: NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """Points of one held-out set: spread slowdown of its multi-machine rows, step time of all its rows. The
    model's P50 are ``predicted`` and its log margins ``band`` (per row); the baselines' margins
    ``margins``."""
    spread = data.machines[rows] > 1
    measured = data.spread[rows][spread]
    model = predicted["spread"][spread]
    blind = _class_blind(data, rows, others)[spread]
    fit_rows = np.isin(data.workload, others) if analytical_rows is None else analytical_rows
    t = _analytical_constant(data, fit_rows)
    p = data.hyperparams["parameters"].to_numpy(float)[rows]
    analytical = t * p * data.batch[rows]
    step = data.step[rows]
    frames = [
        _points(TARGET, check, MODEL, measured, model, model * np.exp(band["spread"][spread])),
        _points(TARGET, check, NO_SLOWDOWN, measured, np.ones(len(measured)), np.ones(len(measured))),
        _points(TARGET, check, CLASS_BLIND, measured, blind, blind * math.exp(margins[CLASS_BLIND])),
        _points(STEP_TARGET, check, MODEL, step, predicted["step"], predicted["step"] * np.exp(band["step"])),
        _points(STEP_TARGET, check, ANALYTICAL, step, analytical, analytical * math.exp(margins[ANALYTICAL])),
    ]
    return pd.concat(frames, ignore_index=True)


def _batch_folds(data: _Data) -> NDArray[np.int64]:
    """The batch-size fold of every row: each workload's distinct local batches dealt into up to
    :data:`BATCH_FOLDS` folds by rank (every fourth value); -1 for a workload with one batch size."""
    fold = np.full(len(data.step), -1, dtype=np.int64)
    for w in np.unique(data.workload):
        own = data.workload == w
        values = np.unique(data.batch[own])  # sorted
        folds = min(BATCH_FOLDS, len(values))
        if folds >= 2:
            fold[own] = np.searchsorted(values, data.batch[own]) % folds
    return fold


def _own_fit(cache: dict[tuple[str, tuple[int, ...]], SpreadFit], data: _Data, fits: Mapping[str, SpreadFit],
             workload: str, rows: NDArray[np.bool_], fold: NDArray[np.int64]) -> SpreadFit:
    """``workload``'s own Pollux fit on ``rows`` (whole batch folds of it), cached by the folds it is fitted on;
    the solver starts from those rows alone (:func:`fit_spread`'s own start), not from the full fit."""
    key = (workload, tuple(sorted(set(fold[rows].tolist()))))
    if key not in cache:
        cache[key] = fit_spread(data.rows[rows], workload, fits[workload].reference_bsz)
    return cache[key]


def _profiled_residuals(data: _Data, fits: Mapping[str, SpreadFit], fold: NDArray[np.int64],
                        train: NDArray[np.bool_], cache: dict[tuple[str, tuple[int, ...]], SpreadFit],
                        ) -> dict[str, FloatArray]:
    """Signed log residuals log(measured / P50) of the profiled path, out of batch fold, on ``train`` rows
    only: each workload's rows of one batch fold predicted by its own fit on its other ``train`` rows; NaN
    elsewhere (and for a workload with fewer than two folds among ``train``). Keys: spread, scaling, step."""
    measured = {"spread": data.spread, "scaling": data.scaling, "step": data.step}
    out = {key: np.full(len(data.step), np.nan) for key in measured}
    for w in sorted(set(data.workload[train].tolist())):
        mine = train & (data.workload == w)
        present = sorted(set(fold[mine].tolist()) - {-1})
        for f in present if len(present) >= 2 else []:
            held = mine & (fold == f)
            predicted = _own_quantities(_own_fit(cache, data, fits, w, mine & ~held, fold), data, held)
            for name, values in measured.items():
                out[name][held] = np.log(values[held] / predicted[name])
    return out


def _own_quantities(fit: SpreadFit, data: _Data, rows: NDArray[np.bool_]) -> dict[str, FloatArray]:
    """P50 step time, spread and scaling slowdown of ``rows`` from one workload's own fit."""
    k, n, m = data.gpus[rows], data.machines[rows], data.batch[rows]
    ones = np.ones(len(k))
    step = fit.step_s(k, n, m)
    return {"step": step, "spread": step / fit.step_s(k, ones, m), "scaling": step / fit.step_s(ones, ones, m)}


def _profiled_margins(residuals: Mapping[str, FloatArray]) -> dict[str, float]:
    """The "profiled" log margins: the split-conformal 0.9 quantile of the out-of-fold residuals of every
    row, at least 0 (P90 >= P50); NaN where there is no residual."""
    quantiles = {key: conformal_quantile(values, QUANTILE) for key, values in residuals.items()}
    return {key: max(q, 0.0) if math.isfinite(q) else math.nan for key, q in quantiles.items()}


def _points(target: str, check: str, predictor: str, measured: FloatArray, p50: FloatArray,
            p90: FloatArray) -> pd.DataFrame:
    return pd.DataFrame({"target": target, "check": check, "predictor": predictor, "measured": measured,
                         "p50": p50, "p90": p90})
