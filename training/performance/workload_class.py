"""Which measured workload a trace job behaves like: a deterministic rule on what the trace records.

A trace job carries no model name, so it gets one of the six profiled workload classes (Pollux's
models: ``bert``, ``cifar10`` = ResNet-18, ``deepspeech2``, ``imagenet`` = ResNet-50, ``ncf``,
``yolov3``) from its shape, and within the classes its shape allows, by a seeded hash of its
recurrence group (its user where it has no group), so every rerun of a group keeps its class:

| the job | candidate classes | why |
|---|---|---|
| no GPU | none: trace speed | no profile measures CPU jobs |
| a parameter-server task | ``ncf`` | PAI's PS jobs are recommendation models; NCF is the profiled one |
| a share of a GPU (< 1) per instance | ``cifar10``, ``ncf`` | the profiled small models fit a share |
| 8 or more GPUs in all | ``bert``, ``deepspeech2``, ``imagenet``, ``yolov3`` | large jobs train large models |
| 1 to 7 whole GPUs | all six | nothing narrows it |

``class = candidates[crc32("<seed>:<group>") mod len(candidates)]``. The rule is an assumption: the
PAI job table says nothing about models. ``class_mix`` shows what it gives on a trace.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from itertools import repeat

ALL_CLASSES = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
SMALL = ("cifar10", "ncf")
LARGE = ("bert", "deepspeech2", "imagenet", "yolov3")
PS_CLASSES = ("ncf",)
LARGE_JOB_GPUS = 8.0


def candidates(gpu_per_instance: float, instances: int, has_ps: bool) -> tuple[str, ...]:
    """The classes a job of this shape may have (empty: none, it runs at trace speed)."""
    if gpu_per_instance <= 0:
        return ()
    if has_ps:
        return PS_CLASSES
    if gpu_per_instance < 1:
        return SMALL
    return LARGE if gpu_per_instance * instances >= LARGE_JOB_GPUS else ALL_CLASSES


def workload_class(gpu_per_instance: float, instances: int, has_ps: bool, group: str, seed: int = 0) -> str:
    """The class of one job by the rule above; ``""`` when no profiled class applies."""
    options = candidates(gpu_per_instance, instances, has_ps)
    if not options:
        return ""
    return options[zlib.crc32(f"{seed}:{group}".encode()) % len(options)]


def class_mix(classes: Iterable[str], gpus: Iterable[float] | None = None) -> dict[str, float]:
    """Share of jobs (or, with ``gpus``, of GPUs requested) per class, ``""`` named ``none``."""
    weights: dict[str, float] = {}
    for name, weight in zip(classes, gpus if gpus is not None else repeat(1.0), strict=False):
        weights[name or "none"] = weights.get(name or "none", 0.0) + weight
    total = sum(weights.values()) or 1.0
    return {name: weights[name] / total for name in sorted(weights)}
