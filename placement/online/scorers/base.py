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
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from placement.model.layout import BoolArray, FloatArray

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


@dataclass(frozen=True)
class WeightedSum:
    """A policy's cost per machine: the sum of its terms' weighted costs, added in the terms' order (the
    order fixes the floating-point sums, hence the ties). Terms that do not apply add nothing."""

    terms: tuple[Term, ...]

    def __call__(self, step: Step) -> FloatArray:
        total: npt.NDArray[Any] | None = None  # float, or int while every term is an integer count
        for term in self.terms:
            costs = term.scorer.cost(step)
            if costs is None:
                continue
            weight = term.weight(step.config) if callable(term.weight) else term.weight
            part = costs if weight is None else weight * costs
            total = part if total is None else total + part
        if total is None:
            return np.zeros(step.working.n_machines)
        result: FloatArray = total.astype(np.float64, copy=False)
        return result
