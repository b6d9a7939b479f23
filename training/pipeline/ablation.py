"""What the history rule leaves out, and why: each variant scored on the validation split and the holdout.

``python -m training.pipeline.ablation`` prints, for PAI duration, the MALE of the shipped rule and of
variants of it, and the P90 coverage of the rule-stacked LightGBM with its drift-scaled band against
a band fixed on the calibration slice:

* ``+ user+GPU+shape fallback``: the user's recent jobs of the same GPU type and shape, tried after the
  group's own;
* ``+ running-job lower bound``: at least as long as the group's longest-running unfinished job so far;
* ``started-before (leaks)``: a job's history also holds jobs that had *started* by its submission, with
  their final durations, which were not known then. It is not causal; it shows what a figure computed
  that way measures.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pandas as pd

from models.residual import ResidualEstimator
from training.features.activity import activity_features
from training.features.frames import TargetSpec, residual_inputs, with_keys
from training.features.recent import recent_history
from training.features.rule import first_available
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.evaluate import Split, time_split
from training.pipeline.metrics import male

Variant = Callable[[pd.DataFrame, pd.DataFrame], np.ndarray]


def _keys(spec: TargetSpec) -> list[str]:
    return [f"rec_{name}_rwmed" for name, _ in spec.recent_keys]


def rule_variants(table: pd.DataFrame, spec: TargetSpec) -> dict[str, Variant]:
    """Per variant, a function of (canonical table with keys, feature frame) giving each row's rule."""
    def shipped(_: pd.DataFrame, frame: pd.DataFrame) -> np.ndarray:
        return frame["rule"].to_numpy(dtype=float)

    def user_fallback(work: pd.DataFrame, frame: pd.DataFrame) -> np.ndarray:
        user, _ = recent_history(work, spec.column, {"user_gpu_shape": ("user", "gpu_key", "shape_key")},
                                 spec.recent_window, spec.recent_halflife)
        both = pd.concat([frame, user], axis=1)
        first, *rest = _keys(spec)
        return first_available(both, [first, "rec_user_gpu_shape_rwmed", *rest, "baseline"])

    def lower_bound(work: pd.DataFrame, frame: pd.DataFrame) -> np.ndarray:
        running = activity_features(work, {"group": ("group",)})["act_group_elapsed_s"].to_numpy(dtype=float)
        rule = frame["rule"].to_numpy(dtype=float)
        return np.where(np.isnan(running), rule, np.fmax(rule, running))

    def started_before(work: pd.DataFrame, frame: pd.DataFrame) -> np.ndarray:
        # a job "joins the history" a millisecond after it starts, so that it never counts for itself
        leaky = work.assign(end_time_s=work["start_time_s"] + 1e-3)
        recent, _ = recent_history(leaky, spec.column, dict(spec.recent_keys), spec.recent_window,
                                   spec.recent_halflife)
        return first_available(pd.concat([recent, frame[["baseline"]]], axis=1), [*_keys(spec), "baseline"])

    return {"rule (shipped)": shipped, "+ user+GPU+shape fallback": user_fallback,
            "+ running-job lower bound": lower_bound, "started-before (leaks)": started_before}


def _male(split: Split, rows: np.ndarray, rule: np.ndarray) -> float:
    fallback = np.median(split.target[split.train])
    return male(np.where(np.isnan(rule[rows]), fallback, rule[rows]), split.target[rows])


def _coverage(split: Split, fixed: bool) -> float:
    inputs = residual_inputs(target_spec("pai2020-jobs", "duration"))
    frame = split.features.assign(fixed_scale=1.0)
    estimator = ResidualEstimator("lgbm", relative=inputs.relative, log_relative=inputs.log_relative,
                                  excluded=[*inputs.excluded, "fixed_scale", "rule_err_q90"],
                                  scale_column="fixed_scale" if fixed else "rule_err_q90")
    predicted = estimator.fit(frame.iloc[split.train], split.target[split.train]).predict(frame.iloc[split.test])
    return float(np.mean(split.target[split.test] <= predicted.p90))


def main() -> None:
    table = get_source("pai2020-jobs").load()
    spec = target_spec("pai2020-jobs", "duration")
    validation, holdout = time_split(table, spec, validation=True), time_split(table, spec)
    work = with_keys(table)
    out = sys.stdout
    out.write("PAI duration, MALE on the validation split / the later 30% held out\n")
    for name, variant in rule_variants(table, spec).items():
        rule = variant(work, holdout.features)
        out.write(f"  {name:30s} {_male(validation, validation.test, rule):.4f} / "
                  f"{_male(holdout, holdout.test, rule):.4f}\n")
    out.write("lgbm P90 coverage, validation / holdout\n")
    for label, fixed in (("band scaled by rule_err_q90", False), ("band fixed at calibration", True)):
        out.write(f"  {label:30s} {_coverage(validation, fixed):.3f} / {_coverage(holdout, fixed):.3f}\n")


if __name__ == "__main__":
    main()
