"""The scorers, registered by name: how good each machine is for one instance (``placement.online.scorers.base``).

The online policies (``placement.online.policies``) are weighted sums of these; the Kubernetes extender's
prioritize answers a policy's sum, bounded (``placement.online.nodes.score_nodes``).
"""

from __future__ import annotations

from placement.online.scorers.base import Scorer
from placement.online.scorers.best_fit import BestFit
from placement.online.scorers.cpu_pods_to_fullest import CpuPodsToFullest
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.scorers.gpu_type import TypeCost
from placement.online.scorers.least_allocated import LeastAllocated
from placement.online.scorers.load import Load
from placement.online.scorers.machine_order import MachineOrder
from placement.online.scorers.most_allocated import MostAllocated
from placement.online.scorers.network import Network
from placement.online.scorers.scarcity import Scarcity
from placement.online.scorers.tier import Tier
from placement.online.scorers.uniform import Uniform

SCORERS: dict[str, Scorer] = {s.name: s for s in (
    Network(), Load(), TypeCost(), Scarcity(), BestFit(), Tier(), MostAllocated(), LeastAllocated(), MachineOrder(),
    Uniform(), Fragmentation(), CpuPodsToFullest())}


def scorer_named(name: str) -> Scorer:
    """The scorer called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in SCORERS:
        raise KeyError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")
    return SCORERS[name]
