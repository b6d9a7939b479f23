"""The estimator the service answers with: the registry's champion, probed, then swapped atomically.

``reload`` looks up the version behind the alias and loads it on a loader thread, waiting for the outcome
at most ``wait_s``, and at most ``lookup_wait_s`` for a registry that does not say which version the alias
is on: a registry that is down or silent holds up neither start-up nor a reload request, and a load that
takes longer is swapped in when it is done. A newly loaded version must first answer ``PROBE``
(jobs as the HTTP layer hands them over, through the same ``predict`` serving calls): one that raises, or
answers with malformed or non-finite estimates, is refused. On any failure the last good model keeps
answering and the error is kept for ``/readyz`` and ``/v1/models``. A poller (``start``) reloads when the
alias moves, and retries soon while no model answers because the registry is unreachable. With no model
at all, the documented heuristic answers (:mod:`models.heuristic`, model version ``heuristic``).
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from models.estimate import CacheCounts, CachingEstimator, JobEstimator, JobRecord, Json, Quantiles, TaskEstimate
from models.heuristic import HEURISTIC, RequestHeuristic
from service.loop_batch import LoopBatcher

__all__ = ["HEURISTIC", "PROBE", "EstimatorHolder", "Loaded", "Refusal", "Registry", "probe", "settle_heap"]

log = logging.getLogger(__name__)
FALLBACK = RequestHeuristic()

LOAD_WAIT_S = 20.0
"""How long start-up and a reload request wait for a load's outcome: long enough for a model to load from a
registry that answers, so the service starts with it; a load that takes longer finishes in the background."""
LOOKUP_WAIT_S = 5.0
"""How long they wait for the registry to say which version the alias is on: one small request, which a
registry that is up answers in milliseconds."""
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
"""The pauses, doubling, between tries while no model answers because the registry is unreachable."""


def _task(job_id: str, task_id: str = "0", role: str = "worker", instances: int = 1, gpu: float = 0.0,
          cpu_cores: float = 0.0, mem_gib: float = 0.0, **job: str | float | None) -> JobRecord:
    """One task's record with every field the HTTP layer sets (``JobIn.records``)."""
    return {"job_id": job_id, "user": None, "group": None, "workload": None, "app": None, "qos": None,
            "hyperparams": None, "task_id": task_id, "role": role, "instances": instances, "req_gpu": gpu,
            "req_cpu_cores": cpu_cores, "req_mem_gib": mem_gib, "req_gpu_mem_gib": None, "req_net_gbps": 0.0,
            "req_gpu_type": None, **job}


PROBE: tuple[JobRecord, ...] = (
    _task("probe-whole-gpu", gpu=1.0, cpu_cores=8.0, mem_gib=32.0, user="probe", qos="LS"),
    _task("probe-gpu-share", gpu=0.5, cpu_cores=4.0, mem_gib=16.0, req_gpu_type="T4|V100", qos="BE",
          group="probe-sweep", workload="probe", app="probe"),
    _task("probe-distributed", "0", "ps", 2, cpu_cores=4.0, mem_gib=8.0, req_net_gbps=10.0),
    _task("probe-distributed", "1", "worker", 8, gpu=1.0, cpu_cores=6.0, mem_gib=48.0, req_gpu_mem_gib=16.0),
    _task("probe-cpu-only", cpu_cores=2.0, mem_gib=4.0),
    _task("probe-bare"),
    _task("probe-hyperparams", instances=2, gpu=1.0, cpu_cores=8.0, mem_gib=32.0,
          hyperparams='{"batch_size": 64, "model": "resnet50", "model_family": "cnn", "optimizer": "sgd", '
                      '"precision": "amp"}'),
)
"""What a newly loaded version must answer before it is swapped in: jobs of the shapes the service is
asked about (whole and shared GPUs, several roles, CPU only, nothing stated, stated hyperparameters)."""


def probe(estimator: JobEstimator) -> str | None:
    """Why ``estimator`` must not answer, or ``None``: it is asked ``PROBE`` in one call, as serving asks,
    and every estimate must be well formed, finite and non-negative (a NaN would reach clients as a
    missing number, an exception as a 500 on every request)."""
    try:
        answers = estimator.predict(PROBE)
        if len(answers) != len(PROBE):
            return f"gave {len(answers)} estimates for {len(PROBE)} tasks"
        for record, answer in zip(PROBE, answers, strict=True):
            if (wrong := _malformed(answer)) is not None:
                return f"gave task {record['task_id']} of {record['job_id']} {wrong}"
    except Exception as exc:  # whatever it raises is what every request would get
        return f"raised {type(exc).__name__}: {exc}"
    return None


def _malformed(answer: object) -> str | None:
    if not isinstance(answer, TaskEstimate):
        return f"a {type(answer).__name__}, not a TaskEstimate"
    if not isinstance(answer.model_version, str) or not answer.model_version:
        return "no model version"
    for target, quantiles in answer.targets.items():
        if quantiles is None:  # unknown: a documented answer
            continue
        if not isinstance(quantiles, Quantiles):
            return f"a {type(quantiles).__name__} as its {target}"
        values = (quantiles.point, quantiles.p50, quantiles.p90) + (() if quantiles.mean is None else
                                                                   (quantiles.mean,))
        if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
            return f"a {target} that is not a finite non-negative number: {quantiles}"
        if quantiles.p50 > quantiles.p90:
            return f"a {target} whose P50 {quantiles.p50} is above its P90 {quantiles.p90}"
    if answer.needs is not None and not _finite(dict(answer.needs)):
        return f"needs with a non-finite number: {answer.needs}"
    return None


def _finite(value: Json) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


class Registry(Protocol):
    """Where the versions of the model come from (``training.pipeline.serving.RegisteredEstimators``).
    A registry that cannot be asked raises ``ConnectionError`` (``models.registry.RegistryUnavailable``)."""

    def alias_version(self, alias: str) -> str | None: ...

    def load(self, alias_or_version: str) -> tuple[str, CachingEstimator]: ...


NOTHING_COUNTED = CacheCounts(0, 0)


@dataclass(frozen=True)
class _Busy:
    doing: str
    since: float
    """``time.monotonic()``"""
    patience: float
    """After this many seconds it is news (``last_error``), and nobody waits for it any longer."""


@dataclass(frozen=True)
class Refusal:
    """A version behind the alias that failed its probe."""

    version: str
    reason: str
    """What predicting the probe jobs gave (``raised IndexError: ...``)."""
    at: float
    """When it was refused (Unix time, s)."""


@dataclass(frozen=True)
class Loaded:
    version: str
    estimator: CachingEstimator
    loaded_at: float
    counted_before: CacheCounts = NOTHING_COUNTED
    """The estimator's cache counts when it was swapped in: the probe's rows, not the service's."""


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

    Loads run one at a time on the loader thread; a reload asked while one runs is answered by the next,
    which starts when it ends (so it sees where the alias points after the ask).
    """

    def __init__(self, registry: Registry | None, alias: str, wait_s: float = LOAD_WAIT_S,
                 lookup_wait_s: float = LOOKUP_WAIT_S) -> None:
        self.registry, self.alias = registry, alias
        self.wait_s, self.lookup_wait_s = wait_s, min(wait_s, lookup_wait_s)
        self.current: Loaded | None = None
        self.refusal: Refusal | None = None
        """The last version behind the alias that failed its probe, until a version is swapped in or the alias
        is back on the one answering: the poller does not load it again (the same artifact answers the same);
        a reload request does."""
        self._error: str | None = None
        self._unreachable = False
        self._busy: _Busy | None = None
        """What the loader is doing, while it is."""
        self._stop = threading.Event()
        self._turn = threading.Condition()
        self._asked = self._done = 0
        self._retry_refused = False
        self._loader: threading.Thread | None = None
        self._batcher = LoopBatcher(self._answer_together)

    def reload(self) -> str | None:
        """Load the alias's version if it differs from the current one; returns the version answering once
        the load is done, or once ``wait_s`` has passed (``lookup_wait_s`` without a word from the registry)."""
        return self._ask(patient=False, retry_refused=True)

    def _ask(self, patient: bool, retry_refused: bool) -> str | None:
        if self.registry is None:
            self._error = "no model registry configured"
            return None
        with self._turn:
            self._asked += 1
            ticket = self._asked
            self._retry_refused = self._retry_refused or retry_refused
            if self._loader is None or not self._loader.is_alive():
                self._loader = threading.Thread(target=self._load_loop, name="model-loader", daemon=True)
                self._loader.start()
            self._turn.notify_all()
            asked = time.monotonic()
            while self._done < ticket and not self._stop.is_set():
                busy, now = self._busy, time.monotonic()
                until = math.inf if patient else asked + self.wait_s
                if busy is not None and not patient:
                    until = min(until, max(busy.since, asked) + busy.patience)
                if now >= until:
                    break
                self._turn.wait(None if until == math.inf else until - now)  # woken at each step of the load
        current = self.current
        return current.version if current else None

    def _step(self, doing: str, patience: float) -> None:
        with self._turn:
            self._busy = _Busy(doing, time.monotonic(), patience)
            self._turn.notify_all()

    def _load_loop(self) -> None:
        while True:
            with self._turn:
                self._turn.wait_for(lambda: self._asked > self._done or self._stop.is_set())
                if self._stop.is_set():
                    return
                ticket, retry_refused = self._asked, self._retry_refused
                self._retry_refused = False
            try:
                if (registry := self.registry) is not None:
                    self._load(registry, retry_refused)
            finally:
                with self._turn:
                    self._done, self._busy = ticket, None
                    self._turn.notify_all()

    def _load(self, registry: Registry, retry_refused: bool) -> None:
        self._step(f"looking up the alias {self.alias!r} in the model registry", self.lookup_wait_s)
        try:
            version = registry.alias_version(self.alias)
        except Exception as exc:  # a registry that is down must not take the service down
            self._failed(str(exc), unreachable=isinstance(exc, ConnectionError))
            return
        self._unreachable = False
        if version is None:
            self._failed(f"no model carries the alias {self.alias!r} yet")
            return
        if self.current is not None and self.current.version == version:
            self._error, self.refusal = None, None
            return
        if (refusal := self.refusal) is not None and version == refusal.version and not retry_refused:
            # it stands (and is again the news, if the registry was down)
            self._failed(self._refused(refusal), quiet=True)
            return
        self._step(f"loading version {version} from the model registry", self.wait_s)
        try:
            _, estimator = registry.load(version)
        except Exception as exc:  # a broken artifact likewise
            self._failed(f"loading version {version} of {self.alias!r} failed: {exc}",
                         unreachable=isinstance(exc, ConnectionError))
            return
        self._step(f"probing version {version}", self.wait_s)
        if (reason := probe(estimator)) is not None:
            self.refusal = Refusal(version, reason, time.time())
            self._failed(self._refused(self.refusal))
            return
        self.current = Loaded(version, estimator, time.time(), estimator.cache_counts())
        self._error, self.refusal = None, None
        settle_heap()
        log.info("model loaded", extra={"model_version": version})

    def _refused(self, refusal: Refusal) -> str:
        return f"version {refusal.version} of {self.alias!r} refused: predicting the probe jobs {refusal.reason}"

    @property
    def refused(self) -> str | None:
        """The version of :attr:`refusal`."""
        refusal = self.refusal
        return refusal.version if refusal is not None else None

    def _failed(self, error: str, unreachable: bool = False, quiet: bool = False) -> None:
        current = self.current
        self._error = f"{error}; {f'version {current.version}' if current else 'the heuristic'} answers"
        self._unreachable = unreachable
        if not quiet:
            log.warning("model reload failed", extra={"error": self._error})

    def start(self, every_s: float) -> None:
        """Reload every ``every_s`` (0: never), and, whatever ``every_s``, soon again while no model
        answers because the registry was unreachable."""
        if self.registry is None:
            return

        def poll() -> None:
            pause = RETRY_FIRST_S
            while True:
                with self._turn:  # start-up's load may still run: its outcome decides when to ask next
                    self._turn.wait_for(lambda: self._done >= self._asked or self._stop.is_set())
                if self.current is None and self._unreachable:
                    delay = min(pause, every_s) if every_s > 0 else pause
                    pause = min(2 * pause, RETRY_MAX_S)
                elif every_s > 0:
                    delay, pause = every_s, RETRY_FIRST_S
                else:
                    return
                if self._stop.wait(delay):
                    return
                self._ask(patient=True, retry_refused=False)

        threading.Thread(target=poll, name="model-poller", daemon=True).start()

    def stop(self) -> None:
        with self._turn:
            self._stop.set()
            self._turn.notify_all()

    @property
    def last_error(self) -> str | None:
        """Why the service is degraded: the last load's failure, or a step of a load that has run past its
        patience."""
        busy = self._busy
        if busy is not None and (waited := time.monotonic() - busy.since) >= busy.patience:
            still = f"{busy.doing}: no outcome after {waited:.0f} s, still waiting"
            return still if self._error is None else f"{still}; before that: {self._error}"
        return self._error

    @property
    def version(self) -> str:
        return self.current.version if self.current else HEURISTIC

    def cache_counts(self) -> tuple[str, CacheCounts] | None:
        """The answering version and its answer-cache counts since it was swapped in; ``None`` while the
        heuristic answers."""
        current = self.current
        if current is None:
            return None
        now, before = current.estimator.cache_counts(), current.counted_before
        return current.version, CacheCounts(now.hits - before.hits, now.misses - before.misses)

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
