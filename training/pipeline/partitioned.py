"""The estimators trained and scored on a Dask cluster's partitions, for a trace whose feature matrix does not fit
in one process.

The single-process path (``time_split``, the estimators' ``fit``, ``evaluate``) holds every job's features in the
calling process. Here the features stay in the partitions :func:`training.features.distributed.causal_features`
makes, on the workers, and only a few numbers per job come back:

* the split: each partition's count of labelled jobs (one integer per partition);
* the learners: LightGBM's boosters are fitted by ``lightgbm.dask`` on the workers' own partitions, never
  gathered: for the rule-corrected estimator (``models.residual``) the residual and cold-start boosters, on blocks
  the workers build (inputs made relative to the history rule, the residual, the recency weight from the job's
  position); for the stacked one (``models.calibrated``, targets without a rule) the median and P90 boosters, on
  the features as they are;
* ln(1 + target) of the training jobs (one float per job: their median is the fallback);
* for the calibration jobs, the few numbers calibrating reads (the estimator's ``calibration_columns``: six for
  the rule-corrected estimator, five for the stacked one) and their ln(1 + target);
* for the held-out jobs, P50, P90, the actual value and the history depth, to score.

So the calling process holds O(jobs) floats, a few per job, where the single-process path holds the whole
feature matrix (about 60 per job on the PAI trace). The fitted estimator is the one the single-process path
makes: its learners are local LightGBM models and everything else is computed by the same methods, so it
predicts, pickles and serves without a cluster.

What equals the single-process path: the split, the fallback, the calibration given the same learners, the whole
of the ``history`` family (no learner). What does not: the boosters (LightGBM's distributed learner bins features
per worker and bags per worker; ``training.pipeline.distributed``). The forest has no distributed learner and is
refused.

Rows must come in submission order (the trace's index order), as the single-process split orders them: each
partition's submit times are checked, and the first job out of order is named.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from models.calibrated import CalibratedEstimator
from models.prediction import FloatArray, Prediction
from models.protocol import Estimator
from models.residual import ResidualEstimator
from training.features.distributed import causal_features, causal_state
from training.features.frames import TargetSpec, target_rows
from training.features.history import HistoryState
from training.ingest.partitioned import row_starts
from training.pipeline.distributed import DaskLightGBMLearner, DaskResidualLearner
from training.pipeline.evaluate import by_depth
from training.pipeline.metrics import scores

if TYPE_CHECKING:
    import dask.dataframe as dd

TARGET = "_target"
"""The label's column beside the features in a partitioned split's frames."""
SUBMIT = "_submit_s"
FAMILIES = ("lgbm", "history")
STACKED_FAMILIES = ("lgbm",)
CALIBRATION_COLUMNS = ("rule", "bucket", "scale", "history_mean", "correction", "cold_correction")
"""The columns of ``ResidualEstimator.calibration_columns``, in its order."""
STACKED_CALIBRATION_COLUMNS = ("p50", "p90", "baseline", "bucket", "history_mean")
"""The columns of ``CalibratedEstimator.calibration_columns``, in its order."""
Partitionable = TypeVar("Partitionable", bound=ResidualEstimator | CalibratedEstimator)


@dataclass(frozen=True)
class PartitionedSplit:
    """Labelled jobs in submission order: ``train`` the earlier, ``test`` the later ``test_share``; each frame
    holds the feature columns and :data:`TARGET`, partitioned as the trace is."""

    train: dd.DataFrame
    test: dd.DataFrame
    train_rows: int
    test_rows: int
    held: dd.DataFrame
    """Every labelled job, persisted on the workers: ``train`` and ``test`` read it, and the workers keep it only
    while some collection refers to it."""
    state: HistoryState | None = None
    """The history state after every finished job of the trace (what a registered model serves from), when asked."""


def split_partitioned(trace: Any, spec: TargetSpec, test_share: float = 0.3,
                      state: bool = False) -> PartitionedSplit:
    """``time_split`` of a trace on Dask: the causal features of every job, the labelled ones cut by count in
    submission order; with ``state``, also the history state serving starts from. ``trace``: a sorted, unique
    index with known divisions, in submission order."""
    lazy: Any = importlib.import_module("dask.dataframe")
    lazy_features: Any = causal_features(trace, spec)
    features = lazy_features.persist() if state else lazy_features  # the history state reads them again
    label = _labeller(spec)
    # Held on the workers once computed: the split, the fit and the scoring each read it again, and the causal
    # features' shuffles would otherwise run for each of them.
    labelled = lazy.map_partitions(label, features, trace, align_dataframes=False,
                                   meta=label(features._meta, trace._meta)).persist()
    _check_order(labelled)
    counts = labelled.map_partitions(len).compute().tolist()
    total = int(sum(counts))
    cut = round(total * (1.0 - test_share))
    without_submit = labelled.drop(columns=[SUBMIT])
    return PartitionedSplit(_rows(without_submit, counts, 0, cut), _rows(without_submit, counts, cut, total),
                            cut, total - cut, labelled,
                            causal_state(trace, spec, features) if state else None)


def _labeller(spec: TargetSpec) -> Any:
    """The function that keeps a partition's labelled jobs (``target_rows``) with their label and submit time."""
    def label(features: pd.DataFrame, part: pd.DataFrame) -> pd.DataFrame:
        rows = target_rows(part, spec)
        kept = features.iloc[rows].copy()
        kept[TARGET] = part[spec.column].to_numpy(dtype=float)[rows]
        kept[SUBMIT] = part["submit_time_s"].to_numpy(dtype=float)[rows]
        return kept
    return label


def _check_order(labelled: Any) -> None:
    """Refuse labelled jobs that are not in submission order, naming the first one out of order."""
    bounds = labelled[SUBMIT].map_partitions(_bounds, meta=pd.DataFrame({"first": [0.0], "last": [0.0],
                                                                           "bad": [""]})).compute()
    previous, where = -np.inf, None
    for i, (first, last, bad) in enumerate(bounds.itertuples(index=False)):
        if bad:
            where = f"partition {i}, job {bad}"
        elif not np.isnan(first) and first < previous:
            where = f"partition {i}, its first labelled job, submitted before the last one of an earlier partition"
        if where:
            raise ValueError(f"trace: labelled jobs must come in submission order (sort the trace by submit_time_s "
                             f"and index it in that order); out of order at {where}")
        previous = last if not np.isnan(last) else previous


def _bounds(submit: pd.Series) -> pd.DataFrame:
    values = np.nan_to_num(submit.to_numpy(dtype=float), nan=-np.inf)
    drop = np.flatnonzero(np.diff(values) < 0)
    bad = str(submit.index[drop[0] + 1]) if drop.size else ""
    first, last = (float(values[0]), float(values[-1])) if len(values) else (np.nan, np.nan)
    return pd.DataFrame({"first": [first], "last": [last], "bad": [bad]})


def _rows(frame: Any, counts: list[int], start: int, stop: int) -> Any:
    """The rows at positions [start, stop) of ``frame`` (positions count across partitions), in the partitions
    of ``frame`` that hold some of them."""
    wanted, bounds = _bounds_of(counts, start, stop)
    if not wanted:
        return frame.partitions[:1].map_partitions(_slice, 0, 0, meta=frame._meta)
    return frame.partitions[wanted].map_partitions(_slice_numbered, bounds, meta=frame._meta)


def _bounds_of(counts: list[int], start: int, stop: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The partitions holding positions [start, stop), and the rows of each they hold."""
    starts = row_starts(counts)
    wanted = [i for i, (first, count) in enumerate(zip(starts, counts, strict=True))
              if first < stop and first + count > start]
    return wanted, [(max(start - starts[i], 0), min(stop - starts[i], counts[i])) for i in wanted]


def _slice(part: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    return part.iloc[lo:hi]


def _slice_numbered(part: pd.DataFrame, bounds: list[tuple[int, int]],
                    partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    assert partition_info is not None  # dask passes it to a function that names it
    lo, hi = bounds[partition_info["number"]]
    return part.iloc[lo:hi]


def fit_partitioned(estimator: Partitionable, frame: dd.DataFrame) -> Partitionable:
    """Fit ``estimator`` on ``frame`` (features and :data:`TARGET`, in submission order, e.g. a
    :class:`PartitionedSplit`'s ``train``) where its rows are: see the module docstring. The rule-corrected
    estimator of family ``lgbm`` or ``history``, or the stacked one of family ``lgbm``."""
    rows: Any = frame  # dask's collections carry no annotations
    _check_family(estimator)
    names = [c for c in rows.columns if c != TARGET]
    counts = rows.map_partitions(len).compute().tolist()
    total = int(sum(counts))
    split = estimator.prepare(names, total)
    z = np.log1p(rows[TARGET].compute().to_numpy(dtype=float))
    estimator.fallback_ = float(np.median(z[:split]))
    training = _rows(rows, counts, 0, split)
    if isinstance(estimator, CalibratedEstimator):
        target = training[TARGET].map_partitions(np.log1p, meta=(TARGET, float))
        estimator.learner_ = DaskLightGBMLearner(seed=estimator.seed, params=estimator.params).fit(
            training[estimator.feature_names_], target)
    else:
        _fit_residual_learners(estimator, training, [hi - lo for lo, hi in _bounds_of(counts, 0, split)[1]], split)
    meta = pd.DataFrame({name: pd.Series(dtype=float) for name in ("z", *_calibration_names(estimator))})
    calibrating = _rows(rows, counts, split, total).map_partitions(_calibration_frame, estimator, meta=meta).compute()
    estimator.calibrate(calibrating["z"].to_numpy(dtype=float), calibrating.drop(columns=["z"]).to_numpy(dtype=float))
    return estimator


def _check_family(estimator: Partitionable) -> None:
    stacked = isinstance(estimator, CalibratedEstimator)
    known = STACKED_FAMILIES if stacked else FAMILIES
    if estimator.family not in known:
        kind = "the stacked estimator" if stacked else "the rule-corrected estimator"
        raise ValueError(f"model family {estimator.family!r} has no fit on Dask partitions for {kind}; one of "
                         f"{', '.join(known)} (the forest fits in one process)")


def _fit_residual_learners(estimator: ResidualEstimator, training: Any, counts: list[int], split: int) -> None:
    """``counts``: the training rows of each of ``training``'s partitions."""
    estimator.learner_ = estimator.cold_ = None
    if estimator.family == "history":
        return
    columns = _training_frame(estimator, training, counts, split).persist()
    inputs = [c for c in columns.columns if c.startswith("in_")]
    cold = [c for c in columns.columns if c.startswith("cold_")]
    estimator.learner_ = DaskResidualLearner(estimator.family, estimator.seed, estimator.params).fit(
        columns[inputs], columns["residual"], columns["weight"])
    estimator.cold_ = DaskResidualLearner(estimator.family, estimator.seed, estimator.cold_params()).fit(
        columns[cold], columns["z"], columns["unit"])


def _training_frame(estimator: ResidualEstimator, rows: Any, counts: list[int], split: int) -> Any:
    """Per training row: the residual learner's inputs (``in_*``), residual and recency weight; the cold-start
    learner's inputs (``cold_*``), ln(1 + target) and a unit weight. Kept on the workers. ``counts``: the rows of
    each partition of ``rows`` (their positions give the recency weights)."""
    build = partial(_training_columns, estimator=estimator, starts=row_starts(counts), split=split)
    return rows.map_partitions(build, meta=build(rows._meta, partition_info={"number": 0}))


def _training_columns(part: pd.DataFrame, estimator: ResidualEstimator, starts: list[int], split: int,
                      partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    assert partition_info is not None
    start = starts[partition_info["number"]] if starts else 0
    matrix = part[estimator.feature_names_].to_numpy(dtype=float)
    z = np.log1p(part[TARGET].to_numpy(dtype=float))
    rule = estimator._rule(matrix)
    inputs = estimator._inputs(matrix, rule)
    cold = matrix[:, estimator.absolute_index_]
    columns = {f"in_{k}": inputs[:, k] for k in range(inputs.shape[1])}
    columns |= {"residual": z - rule, "weight": estimator.recency(np.arange(start, start + len(part)), split)}
    columns |= {f"cold_{k}": cold[:, k] for k in range(cold.shape[1])}
    columns |= {"z": z, "unit": np.ones(len(part))}
    return pd.DataFrame(columns, index=part.index)


def _calibration_names(estimator: Partitionable) -> tuple[str, ...]:
    return STACKED_CALIBRATION_COLUMNS if isinstance(estimator, CalibratedEstimator) else CALIBRATION_COLUMNS


def _calibration_frame(part: pd.DataFrame, estimator: Partitionable) -> pd.DataFrame:
    """ln(1 + target) and the estimator's ``calibration_columns`` of each calibration row."""
    columns = estimator.calibration_columns(part[estimator.feature_names_].to_numpy(dtype=float))
    frame = pd.DataFrame(columns, columns=list(_calibration_names(estimator)), index=part.index)
    frame.insert(0, "z", np.log1p(part[TARGET].to_numpy(dtype=float)))
    return frame


def fit_on_targets(estimators: Mapping[str, Estimator], frame: dd.DataFrame) -> dict[str, Estimator]:
    """Fit estimators that read only the training targets (the causal baselines of ``evaluate.baselines``: the
    history chain and the global median take the median, the request nothing): the target comes back, one float
    per job, once for all of them."""
    rows: Any = frame
    target = rows[TARGET].compute().to_numpy(dtype=float)
    empty = rows._meta.drop(columns=[TARGET])
    return {name: estimator.fit(empty, target) for name, estimator in estimators.items()}


def predict_partitioned(estimator: Estimator, frame: dd.DataFrame) -> dd.DataFrame:
    """P50, P90 and mean of every row of ``frame`` (its feature columns), partitioned as ``frame`` is."""
    def answer(part: pd.DataFrame) -> pd.DataFrame:
        predicted = estimator.predict(part.drop(columns=[TARGET], errors="ignore"))
        mean = predicted.mean if predicted.mean is not None else np.full(len(part), np.nan)
        return pd.DataFrame({"p50": predicted.p50, "p90": predicted.p90, "mean": mean}, index=part.index)
    rows: Any = frame
    return cast("dd.DataFrame", rows.map_partitions(answer, meta=pd.DataFrame({"p50": [], "p90": [], "mean": []},
                                                                                dtype=float)))


class Scored(NamedTuple):
    """An estimator's scores on held-out rows, and its answers on a sample of them (for a plot)."""

    scores: dict[str, Any]
    sample: Prediction
    actual: FloatArray


def score_partitioned(estimator: Estimator, frame: dd.DataFrame, sample: npt.NDArray[np.intp] | None = None) -> Scored:
    """:func:`training.pipeline.metrics.scores` of ``estimator`` on ``frame`` (with :data:`TARGET`), and the same
    per history depth (``by_depth``, as ``evaluate`` reports it): P50, P90, the actual value and the depth come
    back, four floats per row. ``sample``: positions among the rows whose answers are kept (none by default)."""
    lazy: Any = importlib.import_module("dask.dataframe")
    rows: Any = frame
    both = lazy.concat([predict_partitioned(estimator, frame), rows[[TARGET, "depth"]]], axis=1).compute()
    predicted = Prediction(both["p50"].to_numpy(float), both["p50"].to_numpy(float), both["p90"].to_numpy(float),
                           "", both["mean"].to_numpy(float))
    actual = both[TARGET].to_numpy(float)
    kept = np.zeros(0, dtype=np.intp) if sample is None else sample
    mean = predicted.mean[kept] if predicted.mean is not None else None
    return Scored({**scores(predicted.point, predicted.p90, actual),
                   "by_depth": by_depth(predicted, actual, both["depth"].to_numpy(float))},
                  Prediction(predicted.point[kept], predicted.p50[kept], predicted.p90[kept], "", mean), actual[kept])
