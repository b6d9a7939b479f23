"""A job's estimate from its tasks', and the heuristic that answers when no model is registered."""

from __future__ import annotations

import pytest

from models.estimate import Quantiles, TaskEstimate, job_estimate
from models.heuristic import HEURISTIC, RequestHeuristic


def _task(duration: Quantiles | None) -> TaskEstimate:
    return TaskEstimate("3", {"duration": duration, "gpu_request": Quantiles(1.0, 1.0, 2.0, "GPUs")})


@pytest.mark.parametrize(("durations", "expected"), [
    # one task: its own duration
    ([Quantiles(60.0, 50.0, 90.0, "s")], Quantiles(60.0, 50.0, 90.0, "s")),
    # the job lasts as long as its longest task, per quantity: max(60, 70), max(50, 40), max(90, 80)
    ([Quantiles(60.0, 50.0, 90.0, "s", mean=65.0), Quantiles(70.0, 40.0, 80.0, "s", mean=75.0)],
     Quantiles(70.0, 50.0, 90.0, "s", mean=75.0)),
    # a mean only where every task has one
    ([Quantiles(60.0, 50.0, 90.0, "s", mean=65.0), Quantiles(70.0, 40.0, 80.0, "s")],
     Quantiles(70.0, 50.0, 90.0, "s")),
    # a task whose duration is unknown does not count; none known: unknown
    ([None, Quantiles(10.0, 10.0, 20.0, "s")], Quantiles(10.0, 10.0, 20.0, "s")),
    ([None, None], None),
])
def test_a_job_lasts_as_long_as_its_longest_task(durations: list[Quantiles | None],
                                                 expected: Quantiles | None) -> None:
    tasks = [_task(d) for d in durations]
    estimate = job_estimate("j-1", tasks)
    assert estimate.duration_s == expected
    assert (estimate.job_id, estimate.model_version, estimate.tasks) == ("j-1", "3", tuple(tasks))


def test_the_heuristic_repeats_the_request_and_knows_no_duration() -> None:
    (answer, bare) = RequestHeuristic().predict([{"req_gpu": 0.5, "req_cpu_cores": 4, "req_mem_gib": None}, {}])
    assert answer.model_version == HEURISTIC and answer.targets["duration"] is None
    assert answer.targets["gpu_request"] == Quantiles(0.5, 0.5, 0.5, "GPUs")
    assert answer.targets["cpu_request"] == Quantiles(4.0, 4.0, 4.0, "cores")
    assert answer.targets["mem_request"] is None and answer.targets["bandwidth_request"] is None  # not requested
    assert answer.sources is None and answer.needs is None  # nothing trained, no hyperparameters read
    assert all(value is None for value in bare.targets.values())
