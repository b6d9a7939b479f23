"""The scorers, registered by name: how good each machine is for one instance (``placement.scorers.base``).

The online policies (``placement.policies``) are weighted sums of these; the Kubernetes extender's
prioritize answers a policy's sum, bounded (``placement.nodes.score_nodes``).
"""

from __future__ import annotations

from placement.scorers.base import Scorer
from placement.scorers.best_fit import BestFit
from placement.scorers.gpu_type import TypeCost
from placement.scorers.least_allocated import LeastAllocated
from placement.scorers.load import Load
from placement.scorers.machine_order import MachineOrder
from placement.scorers.most_allocated import MostAllocated
from placement.scorers.network import Network
from placement.scorers.scarcity import Scarcity
from placement.scorers.tier import Tier
from placement.scorers.uniform import Uniform

SCORERS: dict[str, Scorer] = {s.name: s for s in (
    Network(), Load(), TypeCost(), Scarcity(), BestFit(), Tier(), MostAllocated(), LeastAllocated(), MachineOrder(),
    Uniform())}


def scorer_named(name: str) -> Scorer:
    """The scorer called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in SCORERS:
        raise KeyError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")
    return SCORERS[name]
