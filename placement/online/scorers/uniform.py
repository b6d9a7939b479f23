"""Scorer ``random``: a uniformly random cost per machine, seeded by the configuration's seed, the job
id and the instances placed so far, so a decision is reproducible."""

from __future__ import annotations

import zlib

import numpy as np

from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class Uniform:
    name = "random"
    unit = "uniform on [0, 1)"

    def cost(self, step: Step) -> Costs | None:
        seed = zlib.crc32(f"{step.config.seed}:{step.job.job_id}:{len(step.placed)}".encode())
        return np.random.default_rng(seed).random(step.working.n_machines)
