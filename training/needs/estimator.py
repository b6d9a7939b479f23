"""The needs a job's stated hyperparameters answer, from every estimator trained on measurements, in one
picklable object that the registered bundle carries beside its trace-trained targets.

Per task of a job that states hyperparameters (``training.needs.vocabulary``), where the keys each
estimator needs are given:

* ``gpu_mem_peak_gib``: peak GPU memory per GPU, P50/P90 (GPUMemNet);
* ``gpu_util_pct``: mean GPU utilisation, P50/P90 (GPUMemNet);
* ``epoch_s``: seconds per epoch on each GPU type the model answers for, P50/P90 (Zeus; the ratio
  between types also Gavel);
* ``spread_slowdown``: how much slower a step of the task's replicas is on two machines of one rack
  than on one machine, P50/P90 (Pollux), with the predicted iteration-time curve that placement
  charges (``Job.sync_curve``).

Each answer names its ``source``. A missing key leaves that target out; it is never guessed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from placement.model.speed import SyncCurve
from training.needs.epoch_time import EpochTimeModel, fit_epoch_time
from training.needs.memory import NeedModel, fit_memory_models
from training.needs.spread_sensitivity import SpreadSensitivityModel, fit_spread_sensitivity
from training.needs.vocabulary import validate

MIB_PER_GIB = 1024.0
SPREAD_MACHINES = 2
"""The spread the slowdown is quoted for: the task's replicas split over two machines of one rack."""


@dataclass
class NeedsEstimator:
    memory: NeedModel | None
    utilisation: NeedModel | None
    epoch: EpochTimeModel | None
    spread: SpreadSensitivityModel | None

    def sources(self) -> dict[str, str]:
        found = {"gpu_mem_peak_gib": self.memory, "gpu_util_pct": self.utilisation, "epoch_s": self.epoch,
                 "spread_slowdown": self.spread}
        return {target: model.source for target, model in found.items() if model is not None}

    def answer(self, hyperparams: Mapping[str, Any], replicas: int = 1) -> dict[str, Any]:
        """Every target the stated keys allow (see the module docstring); ``replicas``: GPUs of the task."""
        stated = validate(hyperparams)
        frame = pd.DataFrame([stated])
        out: dict[str, Any] = {}
        if self.memory is not None:
            out.update(_quantiles("gpu_mem_peak_gib", self.memory.predict(frame), self.memory.source,
                                  scale=1.0 / MIB_PER_GIB, unit="GiB"))
        if self.utilisation is not None:
            out.update(_quantiles("gpu_util_pct", self.utilisation.predict(frame), self.utilisation.source,
                                  unit="%"))
        if self.epoch is not None:
            per_type = {t: out.iloc[0] for t, out in self.epoch.predict_types(frame, self.epoch.gpu_types).items()}
            if all(_finite(row["p50"]) and _finite(row["p90"]) for row in per_type.values()):
                out["epoch_s"] = {"p50": {t: float(r["p50"]) for t, r in per_type.items()},
                                  "p90": {t: float(r["p90"]) for t, r in per_type.items()},
                                  "unit": "s", "source": self.epoch.source}
        if self.spread is not None and replicas > 1:
            slowdown = self.spread.predict(frame, replicas, SPREAD_MACHINES)
            answer = _quantiles("spread_slowdown", slowdown, self.spread.source, unit="x")
            curve = self.spread.curve(stated, "p50")
            if answer and curve is not None:
                answer["spread_slowdown"].update(replicas=replicas, machines=SPREAD_MACHINES,
                                                 curve=curve_json(curve))
                out.update(answer)
        return out


def curve_json(curve: SyncCurve) -> dict[str, Any]:
    """A sync curve as the API shows it (and :func:`curve_of` reads it back)."""
    return {"grad_s": curve.grad_s, "local_s": list(curve.local_s), "network_s": list(curve.network_s),
            "gamma": curve.gamma}


def curve_of(answer: Mapping[str, Any] | None) -> SyncCurve | None:
    """The P50 iteration-time curve in a task's needs answer, if it has one."""
    found = (answer or {}).get("spread_slowdown", {}).get("curve")
    if not found:
        return None
    return SyncCurve(float(found["grad_s"]), tuple(found["local_s"]), tuple(found["network_s"]),
                     float(found["gamma"]))


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, int | float) and math.isfinite(value)


def _quantiles(target: str, predicted: pd.DataFrame, source: str, scale: float = 1.0,
               unit: str = "") -> dict[str, Any]:
    p50, p90 = float(predicted["p50"].iloc[0]), float(predicted["p90"].iloc[0])
    if not (math.isfinite(p50) and math.isfinite(p90)):
        return {}
    return {target: {"p50": p50 * scale, "p90": p90 * scale, "unit": unit, "source": source}}


def fit_needs(progress: Callable[[str], None] | None = None) -> NeedsEstimator:
    """Fit every estimator on the shipped measurements (GPUMemNet, Zeus, Gavel, Pollux)."""
    say = progress or (lambda _: None)
    started = time.perf_counter()
    say("needs: GPU memory and utilisation (GPUMemNet)")
    memory = fit_memory_models()
    say("needs: epoch time per GPU type (Zeus, Gavel)")
    epoch = fit_epoch_time()
    say("needs: spread sensitivity (Pollux)")
    spread = fit_spread_sensitivity()
    say(f"needs: fitted in {time.perf_counter() - started:.1f} s")
    return NeedsEstimator(memory.get("gpu_mem_peak_mib"), memory.get("gpu_util_pct"), epoch, spread)


_SHIPPED: list[NeedsEstimator] = []


def shipped_needs(progress: Callable[[str], None] | None = None) -> NeedsEstimator:
    """:func:`fit_needs` once per process: the shipped measurements do not change between trainings."""
    if not _SHIPPED:
        _SHIPPED.append(fit_needs(progress))
    return _SHIPPED[0]


def stated(text: Any) -> dict[str, Any] | None:
    """The hyperparameters of a record's ``hyperparams`` field (JSON object text, or a mapping); None
    when it states none."""
    if text is None or (isinstance(text, float) and math.isnan(text)) or text is pd.NA:
        return None
    value = json.loads(text) if isinstance(text, str) else text
    if not isinstance(value, Mapping):
        raise ValueError(f"hyperparams must be a JSON object, got {text!r}")
    return dict(value) or None
