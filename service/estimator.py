"""The estimator the service answers with: the registry's champion, swapped atomically on reload.

``reload`` loads the version behind the alias; if that fails the last good model keeps answering and
the error is kept for ``/readyz``. A poller (``start``) reloads when the alias moves. With no model
at all, the documented heuristic answers (model version ``heuristic``): each resource estimate is the
resource requested, and the duration is unknown (``null``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Mapping, Sequence
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


def settle_heap() -> None:
    """Collect once, then exempt every object alive now from the garbage collector's later passes.

    A loaded model is hundreds of thousands of long-lived Python objects (its history tables). Left
    to the collector, every full pass walks them all, and a pass stops the event loop for hundreds of
    milliseconds under load, which is the service's tail latency. Frozen, they are walked no more;
    they are still freed by reference counting. Called after start-up and after each model swap (the
    collection that comes first frees what the replaced model left in cycles).
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class EstimatorHolder:
    """The current model behind a lock-free reference swap (readers never block).

    Predictions asked from the event loop are batched there: every request that asks during one pass of
    the loop is answered by one model call, made at the start of the next pass. Under load many requests
    share a call (a model call costs about a millisecond however few rows it has); when idle a request
    waits for nobody. The call runs on the loop's own thread: a model call from a second thread would
    contend with the loop for the GIL, and each handover can wait the interpreter's switch interval.
    """

    def __init__(self, registry: Registry | None, alias: str, cache_rows: int | None = None) -> None:
        self.registry, self.alias, self.cache_rows = registry, alias, cache_rows
        self.current: Loaded | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._reload_lock = threading.Lock()
        self._pending: list[tuple[Sequence[Mapping[str, Any]], asyncio.Future[list[dict[str, Any]]]]] = []

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
                    if self.cache_rows is not None and hasattr(bundle, "set_cache_rows"):
                        bundle.set_cache_rows(self.cache_rows)
                    self.current = Loaded(loaded_version, bundle, time.time())
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

    def cache_stats(self) -> tuple[str, dict[str, int]] | None:
        """The answering version's answer-cache counts (rows from the cache, rows from the model), if it
        keeps any."""
        current = self.current
        stats = getattr(current.bundle, "cache_stats", None) if current else None
        return (current.version, stats()) if current and stats else None

    @property
    def degraded(self) -> bool:
        return self.current is None or self.last_error is not None

    def predict(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Per record: ``model_version`` and per target ``{point, p50, p90}`` (``None`` = unknown)."""
        current = self.current
        if current is None:
            return self._heuristic(records)
        answers: list[dict[str, Any]] = current.bundle.predict_records(records)
        return answers

    async def predict_async(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`predict` from the event loop, batched with the other requests of the same pass."""
        if self.current is None:
            return self._heuristic(records)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
        self._pending.append((records, future))
        if len(self._pending) == 1:
            loop.call_soon(self._answer_pending)
        return await future

    def _answer_pending(self) -> None:
        pending, self._pending = self._pending, []
        try:
            answers = self.predict([r for records, _ in pending for r in records])
        except Exception:  # one bad request must not fail the others: answer each on its own
            for records, future in pending:
                try:
                    result = self.predict(records)
                except Exception as exc:
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
            return
        start = 0
        for records, future in pending:
            if not future.done():  # its request may have gone
                future.set_result(answers[start:start + len(records)])
            start += len(records)

    @staticmethod
    def _heuristic(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for record in records:
            answer: dict[str, Any] = {"model_version": HEURISTIC, "duration": None}
            for target, field in _REQUESTED.items():
                value = record.get(field)
                answer[target] = None if value is None else {"point": value, "p50": value, "p90": value}
            out.append(answer)
        return out
