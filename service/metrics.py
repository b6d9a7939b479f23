"""The service's Prometheus metrics, served at ``GET /metrics`` (``docs/service.md``, "Metrics").

Three kinds of families:

* **Counted where it happens**, in the process that served the request: request latency, placement
  decisions, preemptions, the Kubernetes extender's calls, the prediction answer cache, and the error of
  completed jobs' estimates against what was measured. With several worker processes
  (``PROMETHEUS_MULTIPROC_DIR`` set, as ``gpuplace serve --workers N`` does) each process writes its
  values to files of its own in that folder (prometheus_client's multiprocess mode), and a scrape,
  whichever worker answers it, adds up every worker's counters and histograms, those of workers that
  have exited included.
* **Read from the database at scrape time** (:class:`StoredState`): capacity and allocation per GPU
  type, running jobs, the state generation, each queue's pending jobs, usage, quota and borrowing limit,
  and the P90 coverage of the most recent completions. Every worker reads the same database, so these
  are the same whichever worker answers; they are never written to the multiprocess files.
* **About the processes**: prometheus_client's process metrics (``process_*``: CPU, memory, file
  descriptors, start time; in multiprocess mode one series per live worker, labelled ``pid``),
  ``python_info``, ``gpuplace_workers`` and ``gpuplace_model_info`` (gauges that combine the live
  workers' values: their sum, and the largest).
"""

from __future__ import annotations

import collections
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from placement import MILLI, ClusterSnapshot
from service.estimator import HEURISTIC, EstimatorHolder
from service.store import JobRow, Planner, Store
from training.pipeline.drift import Pair, pairs

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable that turns prometheus_client's multiprocess mode on (read when it is first
imported): the folder where every worker process writes its counters."""
RECENT_COMPLETIONS = 200
"""How many of the most recently completed jobs ``gpuplace_prediction_p90_coverage`` is over."""
EXTENDER_OUTCOMES = {"filter": ("ok", "refused", "error"), "prioritize": ("ok", "error"),
                     "bind": ("ok", "refused", "error")}
"""The Kubernetes extender's verbs and the outcomes each counts (``service.k8s.extender``)."""
LOG_ERROR_BUCKETS = (-2.0, -1.0, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
"""ln(measured / P50): ±0.1 is within about 10 %, ±0.69 a factor of 2, ±2 a factor of about 7.4."""
_MIB = 2**20


def multiprocess_dir() -> Path | None:
    """The folder of prometheus_client's multiprocess mode, if it is on in this process."""
    folder = os.environ.get(MULTIPROC_DIR)
    return Path(folder) if folder else None


class Metrics:
    """The families counted in this process, and the registry a scrape reads (in multiprocess mode: every
    worker's files, through prometheus_client's ``MultiProcessCollector``)."""

    def __init__(self) -> None:
        self.folder = multiprocess_dir()
        self.registry = CollectorRegistry()
        own: CollectorRegistry | None = self.registry
        if self.folder is not None:
            multiprocess.MultiProcessCollector(self.registry, str(self.folder))  # type: ignore[no-untyped-call]
            self.registry.register(WorkerProcesses(self.folder))
            own = None  # written to this process's files; the scrape reads them all
        else:
            ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.latency = Histogram("gpuplace_request_seconds", "request latency by route, in seconds",
                                 ["method", "route", "status"], registry=own,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.decisions = Counter("gpuplace_decisions", "placement decisions by policy, verdict and whether stored",
                                 ["policy", "verdict", "committed"], registry=own)
        self.model = Gauge("gpuplace_model_info", "model version answering: 1 while some worker answers with it, "
                           "0 once none does", ["version"], registry=own, multiprocess_mode="livemax")
        self.workers = Gauge("gpuplace_workers", "worker processes serving the API", registry=own,
                             multiprocess_mode="livesum")
        self.preemptions = Counter("gpuplace_preemptions", "running jobs preempted by scheduling passes (back to "
                                   "pending), by queue and reason", ["queue", "reason"], registry=own)
        self.scheduling_pass = Histogram(
            "gpuplace_scheduling_pass_seconds", "time a scheduling pass took to decide its plan (every pending job "
            "decided on the state as committed, before the plan is written), in seconds", registry=own,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
        self.extender = Counter("gpuplace_extender_requests", "Kubernetes scheduler extender calls by verb and "
                                "outcome: ok; refused (no node passes the filter, or the bind's reservation does "
                                "not fit); error (the pod or the request cannot be read, or the Kubernetes API "
                                "failed)", ["verb", "outcome"], registry=own)
        self.cache = Counter("gpuplace_prediction_cache_rows", "estimator rows (one per task and target) by "
                             "model version and where the answer came from: the answer cache (hit) or the "
                             "model (miss)", ["version", "result"], registry=own)
        self.log_error = Histogram(
            "gpuplace_prediction_log_error", "ln(measured / estimated P50) of completed jobs, by target: duration "
            "(the job's estimate against its reported duration_s) and usage targets of one-task jobs (against "
            "the reported usage); 0 is a hit on the median, +0.69 twice the P50, -0.69 half of it. Only where "
            "the job was placed with an estimate and both numbers are positive", ["target"], registry=own,
            buckets=LOG_ERROR_BUCKETS)
        self.p90_checks = Counter(
            "gpuplace_prediction_p90_checks", "completed jobs' estimates compared with what was measured, by "
            "target and whether the measurement was at or under the estimate's P90 (covered)",
            ["target", "covered"], registry=own)
        for verb, outcomes in EXTENDER_OUTCOMES.items():
            for outcome in outcomes:
                self.extender.labels(verb, outcome)
        self.workers.set(1)
        self._answering: str | None = None
        self._counted: dict[tuple[str, float], tuple[int, int]] = {}
        """The model swapped in whose cache rows were counted last (its version and when it was loaded),
        and its hits and misses then."""
        self._lock = threading.Lock()

    @property
    def multiprocess(self) -> bool:
        return self.folder is not None

    def serve_state(self, store: Store, planner: Planner) -> None:
        """Serve what ``store`` holds (capacity, allocation, queues, recent coverage), read at scrape time."""
        self.registry.register(StoredState(store, planner))

    def preemption_counts(self) -> PublishedCounts:
        """A tally of preemptions by (queue, reason) that adds each increase to ``gpuplace_preemptions``:
        the scheduling cycle's (``Cycle.preemptions``)."""
        return PublishedCounts(self.preemptions)

    def publish(self, estimator: EstimatorHolder) -> None:
        """What this process knows and nobody increments: the model version answering and the answer
        cache's rows since the last call. Called at each scrape, and, in multiprocess mode, after each
        request (a worker that answers no scrape must still have its part counted)."""
        current = estimator.current
        version = current.version if current is not None else HEURISTIC
        with self._lock:
            if version != self._answering:
                if self._answering is not None:
                    self.model.labels(self._answering).set(0)
                self.model.labels(version).set(1)
                self._answering = version
            if current is None:
                return
            counts = current.estimator.cache_counts()
            hits, misses = counts.hits - current.counted_before.hits, counts.misses - current.counted_before.misses
            loaded = (version, current.loaded_at)
            before = self._counted.get(loaded, (0, 0))
            if hits > before[0]:
                self.cache.labels(version, "hit").inc(hits - before[0])
            if misses > before[1]:
                self.cache.labels(version, "miss").inc(misses - before[1])
            self._counted = {loaded: (max(hits, before[0]), max(misses, before[1]))}

    def observe_completion(self, job: JobRow) -> None:
        """The error of a completed job's estimate (as stored with its placement) against what its completion
        reported (``duration_s``, ``usage``), per target with both numbers."""
        for pair in _pairs([job]):
            self.p90_checks.labels(pair.target, str(pair.observed <= pair.p90).lower()).inc()
            if pair.observed > 0 and pair.p50 > 0 and math.isfinite(pair.p50):
                self.log_error.labels(pair.target).observe(math.log(pair.observed / pair.p50))

    def scrape(self, estimator: EstimatorHolder) -> bytes:
        """The text exposition of every family."""
        self.publish(estimator)
        return generate_latest(self.registry)

    def close(self) -> None:
        """This worker is stopping: its live gauges (workers, model version) stop counting."""
        if self.folder is not None:
            multiprocess.mark_process_dead(os.getpid(), str(self.folder))  # type: ignore[no-untyped-call]


class PublishedCounts(collections.Counter[tuple[str, str]]):
    """A tally by (queue, reason) whose every increase is also counted in a Prometheus counter: the
    scheduling cycle's preemptions, counted the moment a pass decides them (in multiprocess mode, into
    this worker's files, whether or not it ever answers a scrape)."""

    def __init__(self, family: Counter) -> None:
        self.family = family
        super().__init__()

    def __setitem__(self, key: tuple[str, str], value: int) -> None:
        added = value - self.get(key, 0)
        super().__setitem__(key, value)
        if added > 0:
            self.family.labels(*key).inc(added)


class StoredState(Collector):
    """The families read from the database at scrape time (the same whichever worker answers)."""

    def __init__(self, store: Store, planner: Planner) -> None:
        self.store, self.planner = store, planner

    def collect(self) -> Iterator[Metric]:
        snapshot, queued = self.store.queued()
        yield from _capacity_and_allocation(snapshot)
        yield _gauge("gpuplace_running_jobs", "jobs holding an allocation", [((), len(snapshot.allocations))])
        yield _gauge("gpuplace_state_generation", "state generation (one more per committed change)",
                     [((), snapshot.generation)])
        queues = self.planner.queues(queued.spec, snapshot.cluster)
        usage = self.planner.usage(snapshot, queued)
        waiting = collections.Counter(job.queue for job in queued.pending)
        names = sorted({*queues.queues, *waiting})
        yield _gauge("gpuplace_pending_jobs", "jobs waiting, by queue", [((q,), waiting.get(q, 0)) for q in names],
                     ["queue"])
        keys = "by queue and resource key: gpus (GPUs), gpus:<TYPE> (GPUs of that type), cpu_cores, mem_gib (GiB)"
        yield _gauge("gpuplace_queue_usage", f"quota usage (the queue's guaranteed running jobs), {keys}",
                     [((q, k), v) for q in sorted(usage) for k, v in sorted(usage[q].items())], ["queue", "resource"])
        yield _gauge("gpuplace_queue_quota", f"guaranteed quota, {keys}",
                     [((q.name, k), v) for q in queues.queues.values() for k, v in sorted(q.guarantee.items())],
                     ["queue", "resource"])
        yield _gauge("gpuplace_queue_borrowing_limit", f"how much beyond its quota a queue may borrow, {keys} "
                     "(absent: as much as its cohort leaves idle)",
                     [((q.name, k), v) for q in queues.queues.values() for k, v in sorted(q.borrowing_limit.items())],
                     ["queue", "resource"])
        yield from _recent_coverage(self.store.completions(newest=RECENT_COMPLETIONS))


def _gauge(name: str, documentation: str, values: Iterable[tuple[Sequence[str], float]],
           labels: Sequence[str] = ()) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for label_values, value in values:
        family.add_metric(list(label_values), float(value))
    return family


def _capacity_and_allocation(snapshot: ClusterSnapshot) -> Iterator[GaugeMetricFamily]:
    """Per GPU type (``CPU`` for CPU-only machines): what the machines have, and what is allocated, in
    the integer units placement keeps (GPU milli-shares, CPU milli-cores, MiB)."""
    layout = snapshot.layout
    types = layout.gpu_types
    machine_type = np.asarray(layout.gpu_type)
    gpu_type = machine_type[np.asarray(layout.gpu_machine)]

    def per_type(weights: Any, of_gpus: bool = False) -> list[tuple[tuple[str], float]]:
        sums = np.bincount(gpu_type if of_gpus else machine_type, weights=np.asarray(weights, dtype=np.float64),
                           minlength=len(types))
        return [((name,), float(sums[i])) for i, name in enumerate(types)]

    milli = np.asarray(snapshot.gpu_milli_used)
    labels = ["gpu_type"]
    yield _gauge("gpuplace_capacity_gpus", "GPUs of the cluster, by GPU type", per_type(layout.gpu_count), labels)
    yield _gauge("gpuplace_allocated_gpus", "GPUs allocated, by GPU type; a share of a GPU counts as its fraction "
                 "(milli-shares / 1000)", [(k, v / MILLI) for k, v in per_type(milli, of_gpus=True)], labels)
    yield _gauge("gpuplace_partially_allocated_gpus", "GPUs of which some milli-shares are allocated but not all "
                 "1000 (shared by fractional jobs, or a fragment), by GPU type",
                 per_type((milli > 0) & (milli < MILLI), of_gpus=True), labels)
    yield _gauge("gpuplace_capacity_cpu_cores", "CPU cores of the cluster, by the GPU type of their machine",
                 [(k, v / MILLI) for k, v in per_type(layout.cpu_cap)], labels)
    yield _gauge("gpuplace_allocated_cpu_cores", "CPU cores allocated, by the GPU type of their machine",
                 [(k, v / MILLI) for k, v in per_type(snapshot.cpu_used)], labels)
    yield _gauge("gpuplace_capacity_memory_bytes", "machine memory of the cluster in bytes, by GPU type of the "
                 "machine", [(k, v * _MIB) for k, v in per_type(layout.mem_cap)], labels)
    yield _gauge("gpuplace_allocated_memory_bytes", "machine memory allocated in bytes, by GPU type of the machine",
                 [(k, v * _MIB) for k, v in per_type(snapshot.mem_used)], labels)
    yield _gauge("gpuplace_capacity_gpu_memory_bytes", "GPU memory of the cluster in bytes, by GPU type",
                 [(k, v * _MIB) for k, v in per_type(layout.gpu_mem_cap, of_gpus=True)], labels)
    yield _gauge("gpuplace_allocated_gpu_memory_bytes", "GPU memory allocated in bytes, by GPU type",
                 [(k, v * _MIB) for k, v in per_type(snapshot.gpu_mem_used, of_gpus=True)], labels)


def _pairs(completed: Iterable[JobRow]) -> list[Pair]:
    """The (estimate, measurement) pairs of completed jobs, as the drift report makes them
    (``training.pipeline.drift``), with a finite measurement and P90."""
    jobs = [{"details": row.details, "completion": row.completion} for row in completed
            if isinstance(row.details, dict) and isinstance(row.completion, dict)]
    return [p for p in pairs(jobs) if math.isfinite(p.observed) and math.isfinite(p.p90)]


def _recent_coverage(completed: Sequence[JobRow]) -> Iterator[GaugeMetricFamily]:
    """P90 coverage per target over the most recent completions that carry an estimate and a measurement."""
    found = _pairs(completed)
    covered: collections.Counter[str] = collections.Counter()
    seen: collections.Counter[str] = collections.Counter()
    for pair in found:
        seen[pair.target] += 1
        covered[pair.target] += pair.observed <= pair.p90
    targets = sorted(seen)
    yield _gauge("gpuplace_prediction_p90_coverage", f"share of the estimates at or above what was measured (P90 "
                 f"coverage), by target, over the estimated jobs among the {RECENT_COMPLETIONS} most recently "
                 "completed (read from the database; the pairs as gpuplace_prediction_p90_checks counts them)",
                 [((t,), covered[t] / seen[t]) for t in targets], ["target"])
    yield _gauge("gpuplace_prediction_p90_coverage_jobs", "how many jobs gpuplace_prediction_p90_coverage is over, "
                 "by target", [((t,), seen[t]) for t in targets], ["target"])


class WorkerProcesses(Collector):
    """prometheus_client's process metrics of every live worker (labelled ``pid``), in multiprocess mode;
    the live gauges of a worker that died without stopping (killed) are dropped here."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._collectors: dict[int, ProcessCollector] = {}

    def _workers(self) -> list[int]:
        pids = set()
        for path in self.folder.glob("gauge_live*_*.db"):
            written_by = path.stem.rsplit("_", 1)[-1]
            if written_by.isdigit():
                pids.add(int(written_by))
        alive = []
        for pid in sorted(pids):
            if _alive(pid):
                alive.append(pid)
            else:
                multiprocess.mark_process_dead(pid, str(self.folder))  # type: ignore[no-untyped-call]
                self._collectors.pop(pid, None)
        return alive

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for pid in self._workers():
            collector = self._collectors.get(pid)
            if collector is None:
                collector = self._collectors[pid] = ProcessCollector(pid=_constant(pid), registry=None)
            for family in collector.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type,
                                                            family.unit)
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, "pid": str(pid)}, sample.value)
        yield from families.values()


def _constant(pid: int) -> Callable[[], int]:
    return lambda: pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
