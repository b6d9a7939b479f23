"""Every plot the command line writes (evaluate, models drift, retrain, simulate) has a title and labelled
axes with units, read off the figure as it is saved."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

from models.prediction import Prediction
from placement.sim.engine import SimResult
from training.pipeline import plots
from training.pipeline.drift import plot_drift
from training.pipeline.promote import Decision
from training.pipeline.retrain import plot_comparison
from training.replay.plots import allocation_over_time, jct_by_runtime, jct_cdf, scheduled_runs

UNIT_MARKS = ("(", ", s", ", h", "count", "fraction", "no unit")
"""How a unit shows in a label: in parentheses, after a comma, or said to be a count, a fraction or none."""
CATEGORIES = ("target", "placement policy", "run", "queue (guaranteed GPUs)")
"""Axis labels of categories, which have no unit."""


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The title and axis labels of each figure saved while the test runs."""
    seen: list[dict[str, Any]] = []
    original = Figure.savefig

    def record(fig: Figure, *args: Any, **kwargs: Any) -> None:
        suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
        axes = [{"title": ax.get_title(), "x": ax.get_xlabel(), "y": ax.get_ylabel()} for ax in fig.axes
                if ax.get_visible() and ax.axison]
        seen.append({"suptitle": suptitle, "axes": axes})
        original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    yield seen


def _evaluation() -> dict[str, Any]:
    depth = {"0": {"male": 0.5, "p90_coverage": 0.8, "n": 10}, "1-4": {"male": 0.4, "p90_coverage": 0.9, "n": 20}}
    return {"median": {"by_depth": depth, "male": 0.45},
            "lgbm": {"by_depth": depth, "male": 0.4, "p90_coverage": 0.88, "raw_p90_coverage": 0.8}}


def _prediction(n: int) -> Prediction:
    values = np.linspace(1.0, 100.0, n)
    return Prediction(values, values, values * 2, "1")


def _drift() -> dict[str, Any]:
    return {"duration": {"target": "duration", "model_version": "1", "jobs": 60, "train_male": 0.4,
                         "recent_male": 0.5, "rolling_male": [0.5, 0.6, 0.55]}}


def _replays() -> dict[str, SimResult]:
    return {"fifo/liquid": SimResult(records=[], samples=[(0.0, 2.0, 6.0, 0), (3600.0, 4.0, 4.0, 1)], total_gpus=8)}


def _scheduled() -> dict[str, Any]:
    run = {"wait_mean_s": 600.0, "jct_mean_s": 7200.0, "wait_mean_s_by_queue": {"a": 300.0, "shared": 900.0},
           "preempted_gpu_h": 12.0, "idle_gpu_h_while_waiting": 40.0}
    return {"jobs": 100, "load": 2.0, "cluster": "big-node-64", "gpus": 64, "estimate": "group-gpu",
            "placement": "first-fit", "guaranteed_gpus": {"a": 16.0, "shared": 48.0},
            "runs": {"full": run, "no-preemption": {**run, "preempted_gpu_h": 0.0}}}


PLOTS: dict[str, Callable[[Path], Path]] = {
    "predicted_vs_actual": lambda p: plots.predicted_vs_actual({"lgbm": _prediction(50)}, np.linspace(1, 90, 50), p,
                                                               "s", "openb2023 duration"),
    "calibration": lambda p: plots.calibration(_evaluation(), p, "openb2023 duration"),
    "error_by_depth": lambda p: plots.error_by_depth(_evaluation(), p, "openb2023 duration"),
    "drift": lambda p: plot_drift(_drift(), p),
    "retrain": lambda p: plot_comparison(Decision(True, "2", "1", "better", {
        "challenger": {"duration.male": 0.4, "duration.p90_coverage": 0.9},
        "champion": {"duration.male": 0.5, "duration.p90_coverage": 0.85}}), p),
    "jct_cdf": lambda p: jct_cdf(_replays(), p, "100 jobs on pai"),
    "allocation": lambda p: allocation_over_time(_replays(), p, "100 jobs on pai"),
    "scheduled": lambda p: scheduled_runs(_scheduled(), p),
    "jct_by_runtime": lambda p: jct_by_runtime({"liquid": {"trace": 3600.0, "measured": 4000.0}}, p, "JCT"),
}


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_plot_has_a_title_and_axes_with_units(name: str, tmp_path: Path, saved: list[dict[str, Any]]) -> None:
    path = PLOTS[name](tmp_path / f"{name}.png")
    assert path.stat().st_size > 0 and len(saved) == 1
    figure = saved[0]
    for ax in figure["axes"]:
        assert figure["suptitle"] or ax["title"], f"{name}: an untitled panel in an untitled figure"
        for axis in ("x", "y"):
            label = ax[axis]
            assert label, f"{name}: no {axis} label on panel {ax['title']!r}"
            if label not in CATEGORIES:
                assert any(mark in label for mark in UNIT_MARKS), f"{name}: no unit in {axis} label {label!r}"
