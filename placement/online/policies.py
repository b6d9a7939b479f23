"""The online policies, registered by name. Each is a weighted sum of scorers (``placement.online.scorers``)
over the machines the filters pass (``placement.filters``); lower is better.

* ``liquid`` (default) - Liquid's network-aware best fit: w_network x ``network`` (the network-cost
  increment of ``placement.model.network``; with a speed model in the config, the measured seconds lost to
  spread of ``placement.online.spread_cost`` for the jobs it knows) + w_load x ``load`` (workers pack onto
  busy machines: 1 - allocated share; parameter servers spread: allocated share) + a GPU-type term + a
  best-fit tie-break (``best-fit``: fewest free whole GPUs left). The type term, for a job of a class
  the speed model knows, is w_network x ``type-cost``, the measured seconds lost per hour on the
  machine's type (``placement.online.type_cost``); for any other job that does not ask for a GPU type it is
  w_scarce x ``scarcity``, the tier of the machine's GPU (keeps scarce high-end GPUs for jobs that
  require them).
* ``first-fit`` - the first machine, in cluster order, that fits (``machine-order``).
* ``pack`` - the PAI paper's reserving-and-packing: jobs of at least ``big_job_gpus`` GPUs go to the
  highest-tier machines, smaller ones to the lowest (10 x ``tier``); within a tier, the busiest
  machine (``most-allocated``).
* ``balance`` - the PAI paper's load balancing: the least allocated machine (``least-allocated``).
* ``random`` - a uniformly random machine that fits (``random``, seeded by ``seed`` and the job id).
* ``fgd`` - FGD's fragmentation gradient descent (Weng et al., ATC'23): the machine, and the GPU in it,
  where the instance adds the least expected fragmentation for the typical shapes of recent arrivals
  (``fragmentation``). The scorer learns those shapes from the jobs it is asked about, so every policy
  object made by :func:`online_policy` gets a scorer of its own (``LEARNING``), and after the greedy step
  puts each share on the GPU that adds the least (:meth:`Fragmentation.choose_gpus`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from placement.model.decision import Decision
from placement.model.demand import Job, Role
from placement.model.snapshot import ClusterSnapshot
from placement.online.greedy import Chooser, Fills, PlacementConfig, breakdown, never_fills, place_greedy
from placement.online.scorers import SCORERS
from placement.online.scorers.base import Term, WeightedSum
from placement.online.scorers.fragmentation import Fragmentation

EPSILON = 1e-6
"""Weight of Liquid's best-fit tie-break: far below any other term's differences."""
TIER_WEIGHT = 10.0
"""Weight of ``pack``'s tier: a tier apart outweighs any difference in load (0..1)."""

POLICIES: dict[str, tuple[Term, ...]] = {
    "liquid": (Term(SCORERS["network"], lambda c: c.w_network), Term(SCORERS["load"], lambda c: c.w_load),
               Term(SCORERS["scarcity"], lambda c: c.w_scarce), Term(SCORERS["best-fit"], EPSILON),
               Term(SCORERS["type-cost"], lambda c: c.w_network)),
    "first-fit": (Term(SCORERS["machine-order"]),),
    "pack": (Term(SCORERS["tier"], TIER_WEIGHT), Term(SCORERS["most-allocated"])),
    "balance": (Term(SCORERS["least-allocated"]),),
    "random": (Term(SCORERS["random"]),),
    "fgd": (Term(SCORERS["fragmentation"]),),
}
"""Each policy's scorers and weights, added in this order."""
CHOOSERS: dict[str, Chooser] = {name: WeightedSum(terms) for name, terms in POLICIES.items()}
ONLINE_POLICY_NAMES = tuple(CHOOSERS)


def _always(job: Job, task_index: int) -> bool:
    return True


def _liquid_fills(job: Job, task_index: int) -> bool:
    """Liquid packs workers (fill) and spreads parameter servers (rescore after each)."""
    return not (job.has_ps and job.tasks[task_index].role is Role.PS)


LEARNING: dict[str, Callable[[], Fragmentation]] = {"fgd": Fragmentation}
"""Policies whose scorer learns from the jobs it is asked about: each policy object, and each per-machine
score (:func:`fresh_chooser`), gets a fresh one; ``POLICIES`` names the registered instance."""
FILLS: dict[str, Fills] = {"liquid": _liquid_fills, "first-fit": _always, "pack": _always}
"""Packing policies: a chosen machine takes further identical instances while it has room."""
OnlinePolicy = Callable[[ClusterSnapshot, Job], Decision]
"""Decides one job on a snapshot; an allocation it returns has passed the feasibility checker on that
snapshot (:func:`placement.online.greedy.place_greedy` raises ``RuntimeError`` otherwise)."""


def fresh_chooser(name: str) -> Chooser:
    """The chooser of the policy ``name`` for one new user of it: a learning policy's with a scorer that has
    seen nothing yet (so a per-machine score, :func:`placement.online.nodes.score_nodes`, stays a pure
    function of the snapshot and the job), any other policy's registered one."""
    return WeightedSum((Term(LEARNING[name]()),)) if name in LEARNING else CHOOSERS[name]


def online_policy(name: str, config: PlacementConfig | None = None, explain: bool = True) -> OnlinePolicy:
    """The online policy called ``name``; ``KeyError`` naming the known ones otherwise.

    ``explain=False``: no reasons and no empty-cluster verdict for jobs that do not fit (faster).
    """
    if name not in CHOOSERS:
        raise KeyError(f"unknown placement policy {name!r}; known: {', '.join(CHOOSERS)}")
    chooser, settings, fills = CHOOSERS[name], config or PlacementConfig(), FILLS.get(name, never_fills)
    if name in LEARNING:
        return _learning(name, LEARNING[name](), settings, explain, fills)

    def place(snapshot: ClusterSnapshot, job: Job) -> Decision:
        return place_greedy(snapshot, job, name, chooser, settings, explain, fills)

    return place


def _learning(name: str, scorer: Fragmentation, settings: PlacementConfig, explain: bool,
              fills: Fills) -> OnlinePolicy:
    """The policy ``name`` with its own ``scorer``, which also chooses the GPUs of what it placed."""
    chooser = WeightedSum((Term(scorer),))

    def place(snapshot: ClusterSnapshot, job: Job) -> Decision:
        decision = place_greedy(snapshot, job, name, chooser, settings, explain, fills)
        chosen = scorer.choose_gpus(snapshot, job, decision)
        if explain and chosen is not decision and chosen.allocation is not None:
            score = breakdown(snapshot, job, chosen.allocation, settings)
            score["latency_ms"] = decision.score["latency_ms"]
            chosen = replace(chosen, score=MappingProxyType(score))
        return chosen

    return place


def place(snapshot: ClusterSnapshot, job: Job, policy: str = "liquid",
          config: PlacementConfig | None = None) -> Decision:
    """``job`` decided on ``snapshot`` by the online policy called ``policy`` (see :func:`online_policy`)."""
    return online_policy(policy, config)(snapshot, job)
