"""The estimator the service answers with: the registry's champion, swapped atomically on reload.

``reload`` loads the version behind the alias; if that fails the last good model keeps answering and
the error is kept for ``/readyz``. A poller (``start``) reloads when the alias moves. With no model
at all, the documented heuristic answers (model version ``heuristic``): each resource estimate is the
resource requested, and the duration is unknown (``null``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)
HEURISTIC = "heuristic"
_REQUESTED = {"gpu_request": "req_gpu", "cpu_request": "req_cpu_cores", "mem_request": "req_mem_gib",
              "bandwidth_request": "req_net_gbps"}


class Registry(Protocol):
    def alias_version(self, alias: str) -> str | None: ...

    def load(self, alias_or_version: str) -> tuple[str, Any]: ...


@dataclass(frozen=True)
class Loaded:
    version: str
    bundle: Any
    loaded_at: float


class EstimatorHolder:
    """The current model behind a lock-free reference swap (readers never block).

    Concurrent predictions are batched: one worker thread takes every request waiting (up to
    ``max_batch`` records) and asks the model once. A forest costs about the same for 1 row as for
    50, so under load this multiplies throughput instead of queueing requests one model call each.
    """

    def __init__(self, registry: Registry | None, alias: str, max_batch: int = 256) -> None:
        self.registry, self.alias = registry, alias
        self.current: Loaded | None = None
        self.last_error: str | None = None
        self.max_batch = max_batch
        self._stop = threading.Event()
        self._reload_lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[Sequence[Mapping[str, Any]], Future[list[dict[str, Any]]]]] = (
            queue.SimpleQueue())
        self._batcher: threading.Thread | None = None
        self._batcher_lock = threading.Lock()

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
                    loaded_version, bundle = self.registry.load(version)
                    self.current = Loaded(loaded_version, bundle, time.time())
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

    def _batch_worker(self) -> None:
        while True:
            pending = [self._requests.get()]
            size = len(pending[0][0])
            while size < self.max_batch:
                try:
                    pending.append(self._requests.get_nowait())
                except queue.Empty:
                    break
                size += len(pending[-1][0])
            current = self.current
            try:
                if current is None:
                    raise RuntimeError("no model loaded")
                answers = current.bundle.predict_records([r for records, _ in pending for r in records])
            except Exception:  # one bad request must not fail the others: answer each on its own
                for records, future in pending:
                    self._answer_alone(current, records, future)
                continue
            start = 0
            for records, future in pending:
                future.set_result(answers[start:start + len(records)])
                start += len(records)

    @staticmethod
    def _answer_alone(current: Loaded | None, records: Sequence[Mapping[str, Any]],
                      future: Future[list[dict[str, Any]]]) -> None:
        try:
            if current is None:
                raise RuntimeError("no model loaded")
            future.set_result(current.bundle.predict_records(records))
        except Exception as exc:
            future.set_exception(exc)

    def _batched(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        if self._batcher is None:
            with self._batcher_lock:
                if self._batcher is None:
                    self._batcher = threading.Thread(target=self._batch_worker, name="predict-batcher", daemon=True)
                    self._batcher.start()
        future: Future[list[dict[str, Any]]] = Future()
        self._requests.put((records, future))
        return future.result()

    @property
    def version(self) -> str:
        return self.current.version if self.current else HEURISTIC

    @property
    def degraded(self) -> bool:
        return self.current is None or self.last_error is not None

    def predict(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Per record: ``model_version`` and per target ``{point, p50, p90}`` (``None`` = unknown)."""
        if self.current is not None:
            return self._batched(records)
        out = []
        for record in records:
            answer: dict[str, Any] = {"model_version": HEURISTIC, "duration": None}
            for target, field in _REQUESTED.items():
                value = record.get(field)
                answer[target] = None if value is None else {"point": value, "p50": value, "p90": value}
            out.append(answer)
        return out
