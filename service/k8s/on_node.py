"""The placement of a pod whose node is already chosen (by kube-scheduler at bind, or by another scheduler
that bound it): on that node, if it fits there in gpuplace's books."""

from __future__ import annotations

from dataclasses import dataclass, replace

from placement import ClusterSnapshot, Decision, Job, Verdict, place_on


@dataclass(frozen=True)
class OnNode:
    """A policy for one job: the machine called ``node``; ``policy`` names the decision."""

    node: str
    policy: str = "k8s-bind"

    def __call__(self, snapshot: ClusterSnapshot, job: Job) -> Decision:
        machine = snapshot.cluster.index.get(self.node)
        if machine is None:
            return Decision(job.job_id, self.policy, Verdict.CAN_NEVER_FIT, snapshot.generation,
                            reasons=(f"node {self.node} is not a machine of gpuplace's cluster",))
        decision = place_on(snapshot, job, machine, self.policy)
        if not decision.placed:
            return replace(decision, reasons=(f"pod does not fit node {self.node}: {decision.reasons[0]}",))
        return decision
