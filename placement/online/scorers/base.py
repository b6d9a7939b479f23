"""The scorer extension point: how good each machine is for one instance (:class:`Scorer`), a policy
as a weighted sum of scorers (:class:`WeightedSum`), and scores bounded to [0, 1] (:func:`bounded`).

A scorer answers for every machine at once, as in the Kubernetes scheduler framework's Score plugins:
a cost in its own unit, lower is better, which policies weigh and add up as the papers define them
(Liquid: w_network x network + w_load x load + ...). Comparing machines across scorers or with another
scheduler needs a bounded score: :func:`bounded` maps costs to [0, 1] over the machines that can host
the instance, 1 for the cheapest (a Normalize step, done once; the Kubernetes extender's 0..10 is
10 x this).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from placement.model.layout import BoolArray, FloatArray, IntArray

if TYPE_CHECKING:
    from placement.online.greedy import PlacementConfig, Step

Costs = npt.NDArray[np.float64] | npt.NDArray[np.int64]
Weight = Callable[["PlacementConfig"], float] | float | None
"""A term's weight: read from the configuration, a constant, or ``None`` for the cost as it is."""


class Scorer(Protocol):
    """Scores every machine for the instance of a :class:`~placement.online.greedy.Step` (see the module docstring)."""

    name: str
    unit: str

    def cost(self, step: Step) -> Costs | None:
        """Per machine, lower is better, in ``unit``; ``None`` where the term does not apply to the instance."""
        ...


class LocalScorer(Scorer, Protocol):
    """A scorer that can say where its costs changed from one step of a task to the next, and answer for some
    machines alone: a policy made of such scorers rescores only those machines (:class:`WeightedSum`)."""

    def local(self, step: Step) -> bool:
        """Whether the costs for ``step`` differ from those of the task's step before on ``step.changed`` only
        (the same answer for every step of a task; so is whether the cost applies)."""
        ...

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        """``cost(step)[machines]`` (``None`` where the term does not apply), worked out for those machines."""
        ...


def bounded(costs: Costs, ok: BoolArray, among: Sequence[int] | None = None) -> FloatArray:
    """``costs`` as scores in [0, 1], higher is better, for every machine or for the machines ``among``:
    over those that can host the instance (``ok``), ``(dearest - cost) / (dearest - cheapest)``, 1 for all
    of them when they cost the same; 0 for the machines that cannot host it."""
    index = np.arange(len(costs)) if among is None else np.asarray(among, dtype=np.int64)
    picked, usable = costs[index].astype(np.float64), ok[index]
    if not usable.any():
        return np.zeros(len(index))
    low, high = float(picked[usable].min()), float(picked[usable].max())
    scores = (high - picked) / (high - low) if high > low else np.ones(len(index))
    result: FloatArray = np.where(usable, scores, 0.0)
    return result


def score(scorer: Scorer, step: Step) -> FloatArray:
    """``scorer``'s cost for ``step``'s instance, bounded (a term that does not apply scores every machine alike)."""
    costs = scorer.cost(step)
    ok = step.candidates.ok
    return bounded(np.zeros(len(ok)) if costs is None else costs, ok)


@dataclass(frozen=True)
class Term:
    """One scorer of a policy and its weight."""

    scorer: Scorer
    weight: Weight = None


RESCORE_SHARE = 8
"""A step rescores the machines that changed when they are fewer than one in this many, else every machine."""


@dataclass
class _Prefix:
    """What :class:`WeightedSum` keeps between the steps of a task: its leading local terms with their weights
    and whether each applied, and their sum (``None`` if none applied)."""

    leading: tuple[tuple[LocalScorer, float | None, bool], ...]
    total: npt.NDArray[Any] | None


@dataclass(frozen=True, eq=False)
class WeightedSum:
    """A policy's cost per machine: the sum of its terms' weighted costs, added in the terms' order (the
    order fixes the floating-point sums, hence the ties). Terms that do not apply add nothing.

    From one step of a task to the next, the sum of the leading terms whose scorers are local
    (:class:`LocalScorer`; which of them are, and which apply, stays for the task) is kept, and on the next
    step worked out again only on the machines that changed (``Step.changed``), term by term in the same order,
    so each machine that can host the instance has the same sum as worked out afresh; the terms after them are
    added over every machine."""

    terms: tuple[Term, ...]

    @cached_property
    def _can_rescore(self) -> tuple[bool, ...]:
        return tuple(callable(getattr(term.scorer, "cost_at", None)) for term in self.terms)

    def __call__(self, step: Step) -> FloatArray:
        changed, kept = step.changed, step.memo.get(self)
        if changed is not None and isinstance(kept, _Prefix) and len(changed) * RESCORE_SHARE < step.working.n_machines:
            again = self._rescored(step, kept, changed)
            if again is not None:
                return again
        return self._afresh(step)

    def _afresh(self, step: Step) -> FloatArray:
        leading = 0
        if step.more:
            for term, can in zip(self.terms, self._can_rescore, strict=True):
                if not (can and cast(LocalScorer, term.scorer).local(step)):
                    break
                leading += 1
        kept: list[tuple[LocalScorer, float | None, bool]] = []
        total: npt.NDArray[Any] | None = None  # float, or int while every term is an integer count
        for k, term in enumerate(self.terms):
            if k == leading:
                self._keep(step, kept, total)
            costs = term.scorer.cost(step)
            weight = term.weight(step.config) if callable(term.weight) else term.weight
            if k < leading:
                kept.append((cast(LocalScorer, term.scorer), weight, costs is not None))
            if costs is None:
                continue
            part = costs if weight is None else weight * costs
            total = part if total is None else total + part
        if leading == len(self.terms):
            self._keep(step, kept, total)
        if total is None:
            return np.zeros(step.working.n_machines)
        result: FloatArray = total.astype(np.float64, copy=False)
        return result

    def _keep(self, step: Step, leading: list[tuple[LocalScorer, float | None, bool]],
              total: npt.NDArray[Any] | None) -> None:
        if leading:
            step.memo[self] = _Prefix(tuple(leading), None if total is None else total.copy())
        else:
            step.memo.pop(self, None)

    def _rescored(self, step: Step, kept: _Prefix, changed: IntArray) -> FloatArray | None:
        """The sum with the kept leading terms worked out again on ``changed`` only; ``None`` where a term's
        applying changed (then every machine is worked out afresh)."""
        at: npt.NDArray[Any] | None = None
        for scorer, weight, applied in kept.leading if len(changed) else ():
            costs = scorer.cost_at(step, changed)
            if (costs is not None) != applied:
                return None
            if costs is None:
                continue
            part = costs if weight is None else weight * costs
            at = part if at is None else at + part
        total = kept.total
        if total is not None and at is not None:
            total[changed] = at
        for term in self.terms[len(kept.leading):]:
            costs = term.scorer.cost(step)
            if costs is None:
                continue
            weight = term.weight(step.config) if callable(term.weight) else term.weight
            part = costs if weight is None else weight * costs
            total = part if total is None else total + part
        if total is None:
            return np.zeros(step.working.n_machines)
        if total is kept.total:
            total = total.copy()
        result: FloatArray = total.astype(np.float64, copy=False)
        return result
