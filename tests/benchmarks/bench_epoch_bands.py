"""Benchmark (not a timed test): how two calibrations of a new workload's epoch-time P90 cover held-out
Zeus workloads, on the shipped data and on variants of it with one workload removed.

Both calibrate on fits with one more workload left out than the model they serve (nested: a held-out
workload never enters its own band), each workload weighing the same:

* split conformal, which the estimator ships: the leave-one-workload-out residuals added to the
  prediction of the model fitted on every training workload (``scoring.grouped_conformal_quantile``);
* jackknife+ (Barber, Candes, Ramdas and Tibshirani 2021), tried and not shipped: each residual added to the
  prediction of the very fit that made it, so that a fold's miss and its centre come from one fit.

Each variant drops one of the six workloads from the data and runs the same leave-one-workload-out check
over the other five: a world with five workloads, the sixth never seen. Prints the P90 coverage of each
calibration per variant, and the median P90 / P50.

    python tests/benchmarks/bench_epoch_bands.py [--seed N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from training.needs import epoch_time  # noqa: E402
from training.needs.epoch_time.model import leave_one_out  # noqa: E402
from training.needs.epoch_time.rows import feature_frame  # noqa: E402
from training.needs.scoring import grouped_conformal_quantile  # noqa: E402
from training.performance.profiles import load_zeus  # noqa: E402


def jackknife_plus(centres: list[np.ndarray], residuals: list[np.ndarray]) -> np.ndarray:
    """Per row, the grouped conformal quantile of centres[g][row] + residuals[g] (each group weighing the
    same): the fit without group g made both its prediction and group g's residuals."""
    groups = np.concatenate([np.full(len(r), g) for g, r in enumerate(residuals)])
    values = np.concatenate([c[:, None] + r[None, :] for c, r in zip(centres, residuals, strict=True)], axis=1)
    return np.array([grouped_conformal_quantile(row, groups, epoch_time.COVERAGE) for row in values])


def check(rows: pd.DataFrame, seed: int) -> dict[str, float]:
    """Leave one workload out of ``rows``; both calibrations' P90 for its rows from the others."""
    covered: dict[str, list[np.ndarray]] = {"split": [], "jackknife+": []}
    widths: dict[str, list[np.ndarray]] = {"split": [], "jackknife+": []}
    for train, held in leave_one_out(rows["workload"]):
        inner = rows.iloc[train].reset_index(drop=True)
        part = rows.iloc[held]
        x = feature_frame(part, part["gpu_type"])
        measured = np.log(part["epoch_s"].to_numpy(float))
        p50 = epoch_time.Learned(seed).fit(inner).ln_epoch(x)
        fits, residuals = [], []
        for inner_train, inner_held in leave_one_out(inner["workload"]):
            fit = epoch_time.Learned(seed).fit(inner.iloc[inner_train])
            own = inner.iloc[inner_held]
            fits.append(fit)
            predicted = fit.ln_epoch(feature_frame(own, own["gpu_type"]))
            residuals.append(np.log(own["epoch_s"].to_numpy(float)) - predicted)
        groups = np.concatenate([np.full(len(r), g) for g, r in enumerate(residuals)])
        split = p50 + grouped_conformal_quantile(np.concatenate(residuals), groups, epoch_time.COVERAGE)
        plus = np.maximum(jackknife_plus([f.ln_epoch(x) for f in fits], residuals), p50)
        for name, upper in (("split", split), ("jackknife+", plus)):
            covered[name].append(measured <= upper + 1e-12)
            widths[name].append(np.exp(upper - p50))
    out = {}
    for name in covered:
        out[f"{name} coverage"] = float(np.concatenate(covered[name]).mean())
        out[f"{name} P90/P50"] = float(np.median(np.concatenate(widths[name])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = epoch_time.profile_rows(load_zeus()[0])
    variants = {"all six workloads": rows}
    for name in sorted(set(rows["workload"])):
        variants[f"without {name}"] = rows[rows["workload"] != name].reset_index(drop=True)
    table = []
    for label, data in variants.items():
        print(f"  {label} ...", file=sys.stderr, flush=True)
        table.append({"data": label, "rows": len(data), **check(data, args.seed)})
    frame = pd.DataFrame(table)
    derived = frame.iloc[1:]
    summary = {"data": "variants: mean (min-max)", "rows": int(derived["rows"].sum())}
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for column in frame.columns[2:]:
        values = derived[column]
        summary[column] = f"{values.mean():.3f} ({values.min():.3f}-{values.max():.3f})"
    print(pd.DataFrame([summary]).to_string(index=False))


if __name__ == "__main__":
    main()
