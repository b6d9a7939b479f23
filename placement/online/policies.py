"""The online policies, registered by name. Each is a weighted sum of scorers (``placement.online.scorers``)
over the machines the filters pass (``placement.filters``); lower is better.

* ``liquid`` (default) - Liquid's network-aware best fit, made aware of fragmentation and of type-restricted
  demand. For an instance where no network cost is at stake (:func:`one_pod`: its job has one instance,
  or it asks for a share of a GPU): w_frag x ``fragmentation`` + w_frag x ``type-demand`` (the pressure
  that recent type-restricted instances put on the free GPUs of the machine's type, in the same steps, so
  that instances which could go anywhere keep off the types restricted ones need; it applies once some
  recent instance was restricted), with w_frag = 2 x (w_load + w_scarce); ties go to the first machine in
  cluster order, as in FGD, but a CPU-only instance's to the fullest machine (``cpu-pods-to-fullest``, weighted
  ``EPSILON``; ``PlacementConfig.cpu_pods_to_fullest``). For the other instances, Liquid's terms:
  w_network x ``network`` (the network-cost increment of ``placement.model.network``; with a speed model
  in the config, the measured seconds lost to spread of ``placement.online.spread_cost`` for the jobs it
  knows) + w_load x ``load`` (workers pack onto busy machines: 1 - allocated share; parameter servers
  spread: allocated share) + w_scarce x ``scarcity`` for jobs that name no GPU type (the tier of the
  machine's GPU: keeps scarce high-end GPUs for jobs that require them) + the best-fit tie-break
  (``best-fit``: fewest free whole GPUs left, weighted ``EPSILON``). For a
  job of a class the speed model knows, w_network x ``type-cost`` (the measured seconds lost per hour on
  the machine's type, ``placement.online.type_cost``) weighs the type instead of the tier, for every
  instance. For lone instances, the tier sent pods that could go anywhere to the low-tier types restricted
  pods need, and the load term and best fit broke the ties of a fragmentation step worse than cluster
  order (docs/placement.md has the figures); they apply to multi-instance jobs only. ``type-demand`` applies
  to every instance (w_frag x its cost, once some recent instance was restricted), the instances of a
  multi-instance job included, beside the tier: one pressure per decision, that of the snapshot it started
  from.
* ``first-fit`` - the first machine, in cluster order, that fits (``machine-order``).
* ``pack`` - the PAI paper's reserving-and-packing: jobs of at least ``big_job_gpus`` GPUs go to the
  highest-tier machines, smaller ones to the lowest (10 x ``tier``); within a tier, the busiest
  machine (``most-allocated``).
* ``balance`` - the PAI paper's load balancing: the least allocated machine (``least-allocated``).
* ``random`` - a uniformly random machine that fits (``random``, seeded by ``seed`` and the job id).
* ``fgd`` - FGD's fragmentation gradient descent (Weng et al., ATC'23): the machine, and the GPU in it,
  where the instance adds the least expected fragmentation for the typical shapes of recent arrivals
  (``fragmentation``, FGD's node score, ties to the first machine in cluster order), + ``type-demand``
  (in the same points: one unit of pressure as about a whole GPU of expected fragmentation), + the tie-break
  of a CPU-only instance, ``cpu-pods-to-fullest`` (as in ``liquid``).

``liquid`` and ``fgd`` learn (the shapes and type restrictions of recent arrivals): every policy object made
by :func:`online_policy` gets a fragmentation scorer of its own (``LEARNING``) and, after the greedy step,
puts each share on the GPU of its machine that adds the least fragmentation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import cast

from placement.model.decision import Decision
from placement.model.demand import Job, Role
from placement.model.layout import IntArray
from placement.model.snapshot import ClusterSnapshot
from placement.online.greedy import Chooser, Fills, PlacementConfig, Step, breakdown, never_fills, place_greedy
from placement.online.scorers import SCORERS
from placement.online.scorers.base import Costs, LocalScorer, Term, WeightedSum
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.scorers.type_demand import TypeDemand
from placement.online.shape_mix import ShapeMix

EPSILON = 1e-6
"""Weight of a tie-break (Liquid's best fit, ``cpu-pods-to-fullest``): far below any other term's differences."""
TIER_WEIGHT = 10.0
"""Weight of ``pack``'s tier: a tier apart outweighs any difference in load (0..1)."""



def one_pod(step: Step) -> bool:
    """Whether no network cost is at stake for the instance of ``step``: its job has one instance, or the
    instance asks for a share of a GPU (worked out once per task)."""
    found = step.memo.get(one_pod)
    if found is None:
        found = step.memo[one_pod] = sum(t.instances for t in step.job.tasks) == 1 or \
            0 < step.job.tasks[step.task_index].gpu < 1
    return bool(found)


class ForGangs:
    """A scorer asked only for the instances :func:`one_pod` leaves out (``None`` for the others): Liquid's load,
    tier and best-fit terms, which for a lone instance the fragmentation and type-demand terms replace (cluster
    order breaks their ties, as in FGD)."""

    def __init__(self, name: str) -> None:
        self.scorer = SCORERS[name]
        self.name, self.unit = f"gang-{name}", self.scorer.unit

    def cost(self, step: Step) -> Costs | None:
        return None if one_pod(step) else self.scorer.cost(step)

    def local(self, step: Step) -> bool:
        return one_pod(step) or (callable(getattr(self.scorer, "cost_at", None))
                                 and cast(LocalScorer, self.scorer).local(step))

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return None if one_pod(step) else cast(LocalScorer, self.scorer).cost_at(step, machines)


class ForLonePods:
    """A local scorer asked only for the instances :func:`one_pod` names (``None`` for the others): the tie-break
    of a lone instance's fragmentation score, which Liquid's own terms replace for the other instances."""

    def __init__(self, name: str) -> None:
        self.scorer = cast(LocalScorer, SCORERS[name])
        self.name, self.unit = f"lone-{name}", self.scorer.unit

    def cost(self, step: Step) -> Costs | None:
        return self.scorer.cost(step) if one_pod(step) else None

    def local(self, step: Step) -> bool:
        return not one_pod(step) or self.scorer.local(step)

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return self.scorer.cost_at(step, machines) if one_pod(step) else None


class OnePodFragmentation:
    """Liquid's fragmentation term: ``fragmentation``'s cost (FGD's score points lost) for an
    instance of a one-instance job or one asking for a share of a GPU; ``None`` for the other instances, whose
    job is still counted in the shape mix."""

    name = "one-pod-fragmentation"
    unit = Fragmentation.unit

    def __init__(self, fragmentation: Fragmentation) -> None:
        self.fragmentation = fragmentation

    def cost(self, step: Step) -> Costs | None:
        if one_pod(step):
            return self.fragmentation.cost(step)
        self.fragmentation.mix.observe(step.job)
        return None

    def local(self, step: Step) -> bool:
        return not one_pod(step) or self.fragmentation.local(step)

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        if one_pod(step):
            return self.fragmentation.cost_at(step, machines)
        self.fragmentation.mix.observe(step.job)
        return None


def frag_weight(config: PlacementConfig) -> float:
    """Liquid's w_frag: a step of added fragmentation outweighs the load and type terms together."""
    return 2.0 * (config.w_load + config.w_scarce)


def fullest_weight(config: PlacementConfig) -> float:
    """The weight of ``cpu-pods-to-fullest``: a tie-break (``EPSILON``), or nothing where the configuration keeps
    FGD's own rule (the first machine in cluster order)."""
    return EPSILON if config.cpu_pods_to_fullest else 0.0


def liquid_terms(fragmentation: Fragmentation) -> tuple[Term, ...]:
    """Liquid's terms around its own fragmentation scorer (see the module docstring)."""
    return (Term(SCORERS["network"], lambda c: c.w_network), Term(ForGangs("load"), lambda c: c.w_load),
            Term(ForGangs("scarcity"), lambda c: c.w_scarce), Term(ForGangs("best-fit"), EPSILON),
            Term(SCORERS["type-cost"], lambda c: c.w_network), Term(OnePodFragmentation(fragmentation), frag_weight),
            Term(TypeDemand(fragmentation.mix), frag_weight), Term(ForLonePods("cpu-pods-to-fullest"), fullest_weight))


def fgd_terms(fragmentation: Fragmentation) -> tuple[Term, ...]:
    """fgd's terms around its own fragmentation scorer (see the module docstring)."""
    return (Term(fragmentation), Term(TypeDemand(fragmentation.mix)),
            Term(SCORERS["cpu-pods-to-fullest"], fullest_weight))


LEARNING: dict[str, Callable[[Fragmentation], tuple[Term, ...]]] = {"liquid": liquid_terms, "fgd": fgd_terms}
"""Policies whose scorers learn from the jobs they are asked about, and their terms around one fragmentation
scorer: each policy object, and each per-machine score (:func:`fresh_chooser`), gets a fresh one;
``POLICIES`` names the registered instance."""
POLICIES: dict[str, tuple[Term, ...]] = {
    "liquid": liquid_terms(Fragmentation()),
    "first-fit": (Term(SCORERS["machine-order"]),),
    "pack": (Term(SCORERS["tier"], TIER_WEIGHT), Term(SCORERS["most-allocated"])),
    "balance": (Term(SCORERS["least-allocated"]),),
    "random": (Term(SCORERS["random"]),),
    "fgd": fgd_terms(Fragmentation()),
}
"""Each policy's scorers and weights, added in this order."""
CHOOSERS: dict[str, Chooser] = {name: WeightedSum(terms) for name, terms in POLICIES.items()}
ONLINE_POLICY_NAMES = tuple(CHOOSERS)


def _always(job: Job, task_index: int) -> bool:
    return True


def _liquid_fills(job: Job, task_index: int) -> bool:
    """Liquid packs workers (fill) and spreads parameter servers (rescore after each)."""
    return not (job.has_ps and job.tasks[task_index].role is Role.PS)


FILLS: dict[str, Fills] = {"liquid": _liquid_fills, "first-fit": _always, "pack": _always}
"""Packing policies: a chosen machine takes further identical instances while it has room."""
OnlinePolicy = Callable[[ClusterSnapshot, Job], Decision]
"""Decides one job on a snapshot; an allocation it returns has passed the feasibility checker on that
snapshot (:func:`placement.online.greedy.place_greedy` raises ``RuntimeError`` otherwise)."""


def fresh_chooser(name: str) -> Chooser:
    """The chooser of the policy ``name`` for one new user of it: a learning policy's with a scorer that has
    seen nothing yet (so a per-machine score, :func:`placement.online.nodes.score_nodes`, stays a pure
    function of the snapshot and the job), any other policy's registered one."""
    return WeightedSum(LEARNING[name](Fragmentation())) if name in LEARNING else CHOOSERS[name]


def online_policy(name: str, config: PlacementConfig | None = None, explain: bool = True,
                  mix: ShapeMix | None = None) -> OnlinePolicy:
    """The online policy called ``name``; ``KeyError`` naming the known ones otherwise.

    ``explain=False``: no reasons and no empty-cluster verdict for jobs that do not fit (faster). ``mix``: the
    typical shapes a learning policy (``liquid``, ``fgd``) scores fragmentation with (default: its own, learned
    from the jobs it is asked about).
    """
    if name not in CHOOSERS:
        raise KeyError(f"unknown placement policy {name!r}; known: {', '.join(CHOOSERS)}")
    chooser, settings, fills = CHOOSERS[name], config or PlacementConfig(), FILLS.get(name, never_fills)
    if name in LEARNING:
        return _learning(name, LEARNING[name], settings, explain, fills, mix)

    def place(snapshot: ClusterSnapshot, job: Job) -> Decision:
        return place_greedy(snapshot, job, name, chooser, settings, explain, fills)

    return place


def _learning(name: str, terms: Callable[[Fragmentation], tuple[Term, ...]], settings: PlacementConfig,
              explain: bool, fills: Fills, mix: ShapeMix | None) -> OnlinePolicy:
    """The policy ``name`` with its own fragmentation scorer, which also chooses the GPUs of what it placed."""
    scorer = Fragmentation(mix)
    chooser = WeightedSum(terms(scorer))
    one_at_a_time = threading.Lock()

    def place(snapshot: ClusterSnapshot, job: Job) -> Decision:
        # The scorer learns from each job and keeps what it worked out for the next decision: a decision made
        # while another thread's changed it could read a shape table without its kernel (the service decides
        # from several threads with one policy object).
        with one_at_a_time:
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
