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

The package, in the order its parts build on each other: ``facts`` (the workloads, Gavel's models and the GPU
specs, with their sources), ``rows`` (training rows and the features every predictor reads), ``predictors``
(the baseline, the laws and the boosted model), ``model`` (:class:`EpochTimeModel` with its bands and folds) and
``evaluation`` (the checks and the plot).
"""

from training.needs.epoch_time.evaluation import evaluate_epoch_time, gavel_ratios, plot_measured_vs_predicted
from training.needs.epoch_time.facts import (
    BASELINE,
    CHECK_BATCH,
    CHECK_GAVEL,
    CHECK_RATIO,
    CHECK_TYPE,
    CHECK_WORKLOAD,
    COVERAGE,
    GAVEL_MODELS,
    GPU_SPECS,
    MODEL,
    PROFILED_WORKLOADS,
    RATIO_TARGET,
    REQUIRED_KEYS,
    SOURCE,
    TARGET,
    ZEUS_SOURCE,
    GpuSpec,
    Workload,
)
from training.needs.epoch_time.model import BANDS, EpochTimeModel, fit_epoch_time
from training.needs.epoch_time.predictors import Baseline, Learned, RatioLaw, ScalingLaw
from training.needs.epoch_time.rows import gavel_rows, profile_rows

__all__ = [
    "BANDS", "BASELINE", "CHECK_BATCH", "CHECK_GAVEL", "CHECK_RATIO", "CHECK_TYPE", "CHECK_WORKLOAD", "COVERAGE",
    "GAVEL_MODELS", "GPU_SPECS", "MODEL", "PROFILED_WORKLOADS", "RATIO_TARGET", "REQUIRED_KEYS", "SOURCE", "TARGET",
    "ZEUS_SOURCE", "Baseline", "EpochTimeModel", "GpuSpec", "Learned", "RatioLaw", "ScalingLaw", "Workload",
    "evaluate_epoch_time", "fit_epoch_time", "gavel_ratios", "gavel_rows", "plot_measured_vs_predicted",
    "profile_rows",
]
