"""A pending job may name the placement policy that places it; the others go by the cycle's (SYNTHETIC
clusters, worked out by hand)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placement.online.policies import online_policy
from placement.scheduling.cycle import plan_cycle, schedule
from placement.scheduling.jobs import JobMode
from placement.scheduling.settings import SchedulingSettings
from tests.placement.scheduling_cases import FIRST_FIT, gpu_job, pending, queues, running, synthetic_cluster

G = JobMode.GUARANTEED
POLICIES = {"balance": online_policy("balance", explain=False), "first-fit": FIRST_FIT}


@pytest.mark.parametrize("shortcuts", [True, False])
def test_a_job_that_names_a_policy_is_placed_by_it_and_alike_jobs_are_not_told_its_answer(shortcuts: bool) -> None:
    cluster = synthetic_cluster(8, 8)  # synthetic: two machines of 8 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 16}})
    snapshot, run = running(cluster, (gpu_job("r0", 4), "a", 0.0, 3600.0, G))  # first fit: on machine 0
    jobs = [pending(gpu_job("default", 1), "a", submit_s=1), replace(pending(gpu_job("spread", 1), "a", submit_s=2),
                                                                    policy="balance")]
    plan = plan_cycle(snapshot, jobs, run, qs, 10.0, FIRST_FIT, SchedulingSettings(), shortcuts=shortcuts,
                      policies=POLICIES)
    machine = {s.job_id: s.decision.allocation.instances[0].machine for s in plan.starts
               if s.decision.allocation is not None}
    assert machine == {"default": 0, "spread": 1}  # first fit packs machine 0; balance takes the emptier one
    assert {s.job_id: s.decision.policy for s in plan.starts} == {"default": "first-fit", "spread": "balance"}


def test_a_job_that_names_a_policy_the_cycle_lacks_is_refused_by_name() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster)
    job = replace(pending(gpu_job("j", 1), "a"), policy="pack")
    named = r"pending job 'j' names the placement policy 'pack'.*given: balance, first-fit"
    with pytest.raises(ValueError, match=named):
        schedule(snapshot, [job], run, qs, 0.0, FIRST_FIT, policies=POLICIES)
    with pytest.raises(ValueError, match="given: none"):
        schedule(snapshot, [job], run, qs, 0.0, FIRST_FIT)


def test_a_job_that_fits_nowhere_is_answered_by_its_own_policy_beside_a_reservation() -> None:
    cluster = synthetic_cluster(8, 8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 16}})
    snapshot, run = running(cluster, *((gpu_job(f"r{k}", 8), "elsewhere", 0.0, 3600.0, G) for k in range(2)))
    terse, explaining = online_policy("first-fit", explain=False), online_policy("balance")
    jobs = [pending(gpu_job("head", 4), "a", submit_s=1),  # waits, and holds the queue's reservation
            replace(pending(gpu_job("own", 2), "a", submit_s=2), policy="balance")]
    plan = schedule(snapshot, jobs, run, qs, 10.0, terse, SchedulingSettings(prescheduling_horizon_s=0.0),
                    policies={"balance": explaining})
    assert [r.job_id for r in plan.reservations] == ["head"]
    own = plan.waiting_for("own")
    assert own is not None and own.details  # balance explains why it fits nowhere; first fit, the cycle's, would not
