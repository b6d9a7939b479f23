"""The rule that gives a trace job a profiled workload class, and the class mix of the real PAI jobs."""

from __future__ import annotations

import pytest

from training.ingest.sources import get_source
from training.performance.workload_class import ALL_CLASSES, LARGE, SMALL, class_mix, workload_class
from training.replay.trace_jobs import sim_jobs


@pytest.mark.parametrize(("gpu", "instances", "has_ps", "allowed"), [
    (0.0, 4, False, ("",)),           # CPU only: no profile
    (1.0, 2, True, ("ncf",)),         # parameter servers: recommendation
    (0.25, 20, False, SMALL),         # a share of a GPU: a small model
    (1.0, 8, False, LARGE),           # 8 GPUs in all: a large model
    (2.0, 2, False, ALL_CLASSES),     # 4 whole GPUs: any
])
def test_the_shape_of_a_job_bounds_its_class(gpu: float, instances: int, has_ps: bool,
                                             allowed: tuple[str, ...]) -> None:
    for group in ("g1", "g2", "g3", "g4", "g5", "g6"):
        assert workload_class(gpu, instances, has_ps, group) in allowed


def test_reruns_of_a_group_keep_their_class_and_the_seed_changes_it() -> None:
    first = [workload_class(1.0, 1, False, f"group-{k}") for k in range(60)]
    assert first == [workload_class(1.0, 1, False, f"group-{k}") for k in range(60)]
    assert first != [workload_class(1.0, 1, False, f"group-{k}", seed=1) for k in range(60)]
    assert set(first) == set(ALL_CLASSES)  # 60 groups reach all six


def test_real_pai_jobs_get_a_mix_of_classes_and_their_own_gpu_type_as_reference() -> None:
    table = get_source("pai2020-jobs").load().iloc[:3000]
    jobs = sim_jobs(table, table[[]], constrain_types=True)
    mix = class_mix([j.workload_class for j in jobs])
    assert set(mix) == {"none", *ALL_CLASSES}
    assert sum(mix.values()) == pytest.approx(1.0)
    # a job's reference type is the type it ran on in the trace; CPU jobs have none
    by_id = {str(k): str(v) for k, v in zip(table["job_id"], table["assigned_gpu_type"], strict=True)}
    for job in jobs:
        expected = "" if job.job.gpus == 0 else by_id[job.job_id]
        assert job.reference_gpu_type == expected
        assert (job.workload_class == "") == (job.job.gpus == 0)
