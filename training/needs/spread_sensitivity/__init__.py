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

The package, in the order its parts build on each other: ``facts`` (the names, Pollux's models and how a job
names one), ``law`` (the fitted law and one step's time under it), ``data`` (the profile rows as arrays, and a
job's stated hyperparameters read), ``fitting`` (the law, its baselines and margins fitted), ``model``
(:class:`SpreadSensitivityModel`) and ``evaluation`` (the checks and the plot).
"""

from training.needs.spread_sensitivity.evaluation import evaluate_spread_sensitivity, plot_measured_vs_predicted
from training.needs.spread_sensitivity.facts import (
    ANALYTICAL,
    BYTES_PER_GRADIENT,
    CLASS_BLIND,
    COMPUTE_GROUP,
    MODEL,
    NO_SLOWDOWN,
    PARAMETER_TOLERANCE,
    POLLUX_MODELS,
    QUANTILE,
    REFERENCE_SPREAD,
    SOURCE,
    STEP_TARGET,
    TARGET,
    UNSEEN_BATCH,
    UNSEEN_MODEL,
    VERSUS,
    PolluxModel,
    pollux_hyperparams,
    profiled_workload,
)
from training.needs.spread_sensitivity.law import SpreadLaw
from training.needs.spread_sensitivity.model import SpreadSensitivityModel, fit_spread_sensitivity

__all__ = [
    "ANALYTICAL", "BYTES_PER_GRADIENT", "CLASS_BLIND", "COMPUTE_GROUP", "MODEL", "NO_SLOWDOWN", "PARAMETER_TOLERANCE",
    "POLLUX_MODELS", "QUANTILE", "REFERENCE_SPREAD", "SOURCE", "STEP_TARGET", "TARGET", "UNSEEN_BATCH", "UNSEEN_MODEL",
    "VERSUS", "PolluxModel", "SpreadLaw", "SpreadSensitivityModel", "evaluate_spread_sensitivity",
    "fit_spread_sensitivity", "plot_measured_vs_predicted", "pollux_hyperparams", "profiled_workload",
]
