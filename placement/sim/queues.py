"""Queue policies: in which order waiting jobs are offered to the placement policy.

* ``fifo`` - by arrival.
* ``sjf-oracle`` - shortest true duration first (an upper bound no real scheduler has).
* ``sjf-<name>`` - shortest *estimated* duration first, with the estimate ``name`` attached to each
  job (``sjf-user`` = the PAI paper's SJU, ``sjf-group`` = SJG, ``sjf-group-gpu`` = SJGG,
  ``sjf-model`` = the registered model). A job without that estimate sorts as the median estimate.
* ``drf`` - dominant-resource fairness across users: the user whose dominant share (max over GPU and
  CPU of allocated / capacity) is smallest goes first; within a user, by arrival.

Ties break by arrival, then job id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from placement.sim.jobs import SimJob

UserShares = Mapping[str, float]
QueueOrder = Callable[[Sequence[SimJob], UserShares], list[SimJob]]


def _fifo(queue: Sequence[SimJob], shares: UserShares) -> list[SimJob]:
    return sorted(queue, key=lambda j: (j.submit_s, j.job_id))


def _oracle(queue: Sequence[SimJob], shares: UserShares) -> list[SimJob]:
    return sorted(queue, key=lambda j: (j.duration_s, j.submit_s, j.job_id))


def _by_estimate(name: str) -> QueueOrder:
    def order(queue: Sequence[SimJob], shares: UserShares) -> list[SimJob]:
        known = [j.estimate(name) for j in queue if not math.isnan(j.estimate(name))]
        default = float(np.median(known)) if known else 0.0

        def key(j: SimJob) -> tuple[float, float, str]:
            value = j.estimate(name)
            return (default if math.isnan(value) else value, j.submit_s, j.job_id)

        return sorted(queue, key=key)

    return order


def _drf(queue: Sequence[SimJob], shares: UserShares) -> list[SimJob]:
    return sorted(queue, key=lambda j: (shares.get(j.user, 0.0), j.submit_s, j.job_id))


def queue_policy(name: str) -> QueueOrder:
    """The queue order called ``name`` (``fifo``, ``sjf-oracle``, ``sjf-<estimate>``, ``drf``)."""
    fixed: dict[str, QueueOrder] = {"fifo": _fifo, "sjf-oracle": _oracle, "drf": _drf}
    if name in fixed:
        return fixed[name]
    if name.startswith("sjf-") and len(name) > 4:
        return _by_estimate(name[4:])
    raise KeyError(f"unknown queue policy {name!r}; known: fifo, sjf-oracle, sjf-<estimate name>, drf")
