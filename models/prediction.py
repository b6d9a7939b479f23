"""What every estimator returns: a point estimate, P50 and P90 per job, and the model version."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Prediction:
    """Per-job estimates in the target's own unit (seconds, GPUs, GiB, ...).

    ``p90`` is NaN where an estimator gives no upper quantile (the history baselines).
    """

    point: FloatArray
    p50: FloatArray
    p90: FloatArray
    model_version: str
    mean: FloatArray | None = None
    """The expected value where the estimator gives one (what shortest-expected-job-first orders by)."""

    def __post_init__(self) -> None:
        if not (len(self.point) == len(self.p50) == len(self.p90)):
            raise ValueError("point, p50 and p90 must have one value per job")

    def __len__(self) -> int:
        return len(self.point)
