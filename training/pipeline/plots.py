"""PNG plots of an evaluation: predicted vs actual, P90 calibration, error by history depth.

Each carries a title naming what was evaluated (``subject``: source and target) and axes with their units;
a log error is the mean of ``|ln(1 + predicted) - ln(1 + actual)|``, a ratio without unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from models.prediction import FloatArray, Prediction
from training.png import save_png

MALE_LABEL = "mean absolute log error (ln, no unit)"


def predicted_vs_actual(predictions: dict[str, Prediction], actual: FloatArray, path: Path, unit: str,
                        subject: str = "") -> Path:
    """Log-log density of predicted P50 against actual, one panel per estimator."""
    names = list(predictions)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.0), squeeze=False)
    lo, hi = 0.0, float(np.log10(1 + max(actual.max(), 1.0)))
    for ax, name in zip(axes[0], names, strict=True):
        x, y = np.log10(1 + actual), np.log10(1 + predictions[name].point)
        ax.hexbin(x, y, gridsize=40, bins="log", cmap="viridis", extent=(lo, hi, lo, hi))
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        ax.set_title(name)
        ax.set_xlabel(f"actual, log10(1 + {unit})")
        ax.set_ylabel(f"predicted P50, log10(1 + {unit})")
    fig.suptitle(f"{subject}: predicted P50 against actual on the later jobs held out (red: exact)".lstrip(": "),
                 wrap=True)
    return save_png(fig, path)


def calibration(results: dict[str, Any], path: Path, subject: str = "") -> Path:
    """P90 coverage per history-depth bucket, raw learner vs calibrated, against the nominal 0.9."""
    models = {n: r for n, r in results.items() if "raw_p90_coverage" in r}
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = list(next(iter(models.values()))["by_depth"]) if models else []
    width = 0.8 / max(1, len(models))
    for i, (name, entry) in enumerate(models.items()):
        coverage = [entry["by_depth"][b]["p90_coverage"] for b in labels]
        label = f"{name} (overall {entry['p90_coverage']:.3f}, raw {entry['raw_p90_coverage']:.3f})"
        ax.bar(np.arange(len(labels)) + i * width, coverage, width, label=label)
    ax.axhline(0.9, color="red", linestyle="--", linewidth=1, label="nominal 0.9")
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels)
    ax.set_xlabel("history depth (earlier finished jobs of the key, count)")
    ax.set_ylabel("share of jobs with actual <= P90 (fraction)")
    ax.set_title(f"{subject}: P90 coverage by history depth".lstrip(": "))
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower right")
    return save_png(fig, path)


def error_by_depth(results: dict[str, Any], path: Path, subject: str = "") -> Path:
    """Mean absolute log error per history-depth bucket, for every estimator."""
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = list(next(iter(results.values()))["by_depth"])
    width = 0.8 / len(results)
    for i, (name, entry) in enumerate(results.items()):
        ax.bar(np.arange(len(labels)) + i * width, [entry["by_depth"][b]["male"] for b in labels], width, label=name)
    counts = [int(next(iter(results.values()))["by_depth"][b]["n"]) for b in labels]
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, [f"{b}\n({c:,} jobs)" for b, c in zip(labels, counts,
                                                                                                   strict=True)])
    ax.set_xlabel("history depth (earlier finished jobs of the key, count)")
    ax.set_ylabel(MALE_LABEL)
    ax.set_title(f"{subject}: error by history depth".lstrip(": "))
    ax.legend(fontsize=7, ncol=2)
    return save_png(fig, path)

