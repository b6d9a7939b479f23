"""The estimator the service answers with: the registry's champion, swapped atomically on reload.

``reload`` loads the version behind the alias; if that fails the last good model keeps answering and
the error is kept for ``/readyz``. A poller (``start``) reloads when the alias moves. With no model
at all, the documented heuristic answers (:mod:`models.heuristic`, model version ``heuristic``).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from models.estimate import CacheCounts, CachingEstimator, JobRecord, TaskEstimate
from models.heuristic import HEURISTIC, RequestHeuristic
from service.loop_batch import LoopBatcher

__all__ = ["HEURISTIC", "EstimatorHolder", "Loaded", "Registry", "settle_heap"]

log = logging.getLogger(__name__)
FALLBACK = RequestHeuristic()


class Registry(Protocol):
    """Where the versions of the model come from (``training.pipeline.serving.RegisteredEstimators``)."""

    def alias_version(self, alias: str) -> str | None: ...

    def load(self, alias_or_version: str) -> tuple[str, CachingEstimator]: ...


@dataclass(frozen=True)
class Loaded:
    version: str
    estimator: CachingEstimator
    loaded_at: float


def settle_heap() -> None:
    """Collect once, then exempt every object alive now from the garbage collector's later passes.

    A loaded model is hundreds of thousands of long-lived Python objects (its history tables). Left
    to the collector, every full pass walks them all, and a pass under load stops the event loop long
    enough to be the service's tail latency. Frozen, they are walked no more; they are still freed by
    reference counting. Called after start-up and after each model swap (the collection that comes
    first frees what the replaced model left in cycles).
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class EstimatorHolder:
    """The current model behind a lock-free reference swap (readers never block).

    Predictions asked from the event loop are batched there (:mod:`service.loop_batch`): every request
    that asks during one pass of the loop is answered by one model call, made at the start of the next
    pass, as a model call costs about the same however few rows it has.
    """

    def __init__(self, registry: Registry | None, alias: str) -> None:
        self.registry, self.alias = registry, alias
        self.current: Loaded | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._reload_lock = threading.Lock()
        self._batcher = LoopBatcher(self._answer_together)

    def reload(self) -> str | None:
        """Load the alias's version if it differs from the current one; returns the version answering."""
        with self._reload_lock:
            if self.registry is None:
                self.last_error = "no model registry configured"
                return None
            try:
                version = self.registry.alias_version(self.alias)
                if version is None:
                    self.last_error = f"no model carries the alias {self.alias!r} yet"
                elif self.current is None or self.current.version != version:
                    loaded_version, estimator = self.registry.load(version)
                    self.current = Loaded(loaded_version, estimator, time.time())
                    settle_heap()
                    log.info("model loaded", extra={"model_version": loaded_version})
                    self.last_error = None
                else:
                    self.last_error = None
            except Exception as exc:  # a broken registry or artifact must not take the service down
                self.last_error = f"loading {self.alias!r} failed: {exc}"
                log.warning("model reload failed", extra={"error": str(exc)})
            return self.current.version if self.current else None

    def start(self, every_s: float) -> None:
        if every_s <= 0:
            return

        def poll() -> None:
            while not self._stop.wait(every_s):
                self.reload()

        threading.Thread(target=poll, name="model-poller", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def version(self) -> str:
        return self.current.version if self.current else HEURISTIC

    def cache_counts(self) -> tuple[str, CacheCounts] | None:
        """The answering version and its answer-cache counts; ``None`` while the heuristic answers."""
        current = self.current
        return (current.version, current.estimator.cache_counts()) if current else None

    @property
    def degraded(self) -> bool:
        return self.current is None or self.last_error is not None

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        """One estimate per record, from the current model (the heuristic without one)."""
        current = self.current
        return (FALLBACK if current is None else current.estimator).predict(records)

    async def predict_async(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        """:meth:`predict` from the event loop, batched with the other requests of the same pass."""
        if self.current is None:
            return FALLBACK.predict(records)
        return await self._batcher.submit(records)

    def _answer_together(self, requests: list[Sequence[JobRecord]]) -> list[list[TaskEstimate] | BaseException]:
        try:
            answers = self.predict([record for records in requests for record in records])
        except Exception:  # one bad request must not fail the others: answer each on its own
            return [self._answer_alone(records) for records in requests]
        out: list[list[TaskEstimate] | BaseException] = []
        start = 0
        for records in requests:
            out.append(answers[start:start + len(records)])
            start += len(records)
        return out

    def _answer_alone(self, records: Sequence[JobRecord]) -> list[TaskEstimate] | BaseException:
        try:
            return self.predict(records)
        except Exception as exc:
            return exc
