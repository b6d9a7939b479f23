"""Scorer ``best-fit``: the free whole GPUs a machine has before the instance; fewer is better, so the
fullest machine that fits wins and whole free machines stay free (Liquid's tie-break)."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class BestFit:
    name = "best-fit"
    unit = "free whole GPUs"

    def cost(self, step: Step) -> Costs | None:
        return step.candidates.free_whole

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return step.candidates.free_whole[machines]
