"""The estimate when no registered model answers: each resource is what the task requests (point, P50
and P90 alike), and the duration is unknown. It learns nothing, so it answers the same every time."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from models.estimate import JobRecord, Quantiles, TaskEstimate, unit_of

HEURISTIC = "heuristic"
"""The model version of its answers."""
REQUESTED = MappingProxyType({"gpu_request": "req_gpu", "cpu_request": "req_cpu_cores",
                              "mem_request": "req_mem_gib", "bandwidth_request": "req_net_gbps"})
"""The record field each resource target repeats."""


class RequestHeuristic:
    """A :class:`models.estimate.JobEstimator` that repeats the request; a resource not requested (the
    field absent or null) is unknown, as is the duration."""

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        return [self._estimate(record) for record in records]

    @staticmethod
    def _estimate(record: JobRecord) -> TaskEstimate:
        targets: dict[str, Quantiles | None] = {"duration": None}
        for target, field in REQUESTED.items():
            value = record.get(field)
            requested = None if value is None else float(value)
            targets[target] = None if requested is None else Quantiles(requested, requested, requested,
                                                                       unit_of(target))
        return TaskEstimate(HEURISTIC, targets)
