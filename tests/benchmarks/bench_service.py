"""Benchmark (not a timed test): the REST service under load, from a separate client process.

Starts ``gpuplace serve`` on 127.0.0.1 (SQLite state database in a temporary folder unless
``--database-url``; the model registry of ``--home``, whose champion answers if it has one, else the
heuristic), then from this process with asyncio + aiohttp (a client several times lighter per request than httpx,
so that the client's own CPU use skews less on a 2-core machine). Every request carries the next job of
the shipped PAI job table in submission order, never one sent before: the service sees the trace's own
repetition (reruns, sweeps), which is what its answer cache serves. First ``--warm`` jobs (default 5,000)
go through ``/v1/predict`` as fast as the service answers, as a running service would have seen the jobs
before the measured ones; then:

1. ``/healthz`` at a fixed rate (the baseline of the same machine under the same load);
2. ``/v1/predict`` at a fixed rate (default 500 requests/s): p50 / p99 latency, the ratio of its p99
   to ``/healthz``'s, and the share of estimator rows answered from the cache (off ``/metrics``);
3. ``/v1/place`` at a fixed rate (default 300 placements/s): each job released as soon as it is
   acknowledged; durable placements per second (answers with ``committed: true``, sent only
   after the database transaction committed) and p50 / p99 of the place calls;
4. ``/v1/place`` closed loop: ``--clients`` concurrent clients each place a job and release it, as
   fast as answers come: the most the service sustains, and its latency there.

Targets on 2 cores: at least 300 durable placements/s through ``/v1/place`` with p99 under 25 ms, and
``/v1/predict`` p99 under 25 ms at 500 requests/s. Figures are printed and written to JSON, never
asserted on. ``--fast`` (CI): 2 s per phase at low rates.

    python tests/benchmarks/bench_service.py [--fast] [--home DIR] [--database-url URL] [--workers N] [--warm N]
                                             [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.service.conftest import API_KEY, Server, cache_rows, server_env  # noqa: E402

JOBS_CSV = REPO / "data" / "pai2020" / "pai_job_duration_estimate_100K_head.csv"


def real_jobs(limit: int = 10**9) -> list[dict[str, Any]]:
    """Single-pod rows of the shipped PAI job table as API jobs (GPUs as asked; CPU cores as asked)."""
    out = []
    with open(JOBS_CSV, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if (row["num_pod"] or "1") not in ("1", "1.0"):
                continue
            gpu = float(row["num_gpu"] or 0)
            gpu = float(round(gpu)) if gpu > 1 else gpu
            out.append({"user": row["user"] or None, "group": row["group"] or None,
                        "tasks": [{"gpu": gpu, "cpu_cores": min(float(row["num_cpu"] or 0), 64.0)}]})
            if len(out) == limit:
                break
    return out


class Jobs:
    """The trace's jobs in order, each handed out once; wraps around (and says so) if a run outlasts them."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies, self.next_index, self.wrapped = bodies, 0, False

    def next(self, job_id: str) -> dict[str, Any]:
        if self.next_index == len(self.bodies):
            self.next_index, self.wrapped = 0, True
        self.next_index += 1
        return {**self.bodies[self.next_index - 1], "job_id": job_id}


async def fixed_rate(client: aiohttp.ClientSession, path: str, jobs: Jobs | None, rate: float,
                     seconds: float) -> dict[str, Any]:
    """Open loop: one request every 1/rate s, whatever the answers' speed; latency of each."""
    latencies: list[float] = []
    errors = 0

    async def one(k: int) -> None:
        nonlocal errors
        started = time.perf_counter()
        request = client.post(path, json=jobs.next(f"p-{k}")) if jobs else client.get(path)
        async with request as answer:
            await answer.read()
            errors += answer.status != 200
        latencies.append((time.perf_counter() - started) * 1e3)

    return _figures(latencies, errors, await _open_loop(rate, seconds, one))


async def _open_loop(rate: float, seconds: float, one: Callable[[int], Awaitable[None]]) -> float:
    """Start ``one(k)`` every 1/rate s for ``seconds``, whatever the answers' speed; wait for them all.
    Returns the seconds it took."""
    tasks, start, k = [], time.perf_counter(), 0
    while (now := time.perf_counter() - start) < seconds:
        if k < now * rate:
            tasks.append(asyncio.create_task(one(k)))
            k += 1
        else:
            await asyncio.sleep(min(1 / rate, 0.001))
    await asyncio.gather(*tasks)
    return time.perf_counter() - start


class _Placements:
    """Place-then-release calls and what they came to: latency of each place call, durable placements."""

    def __init__(self, client: aiohttp.ClientSession, jobs: Jobs) -> None:
        self.client, self.jobs = client, jobs
        self.latencies: list[float] = []
        self.committed = self.errors = 0

    async def one(self, job_id: str) -> None:
        started = time.perf_counter()
        async with self.client.post("/v1/place", json=self.jobs.next(job_id)) as r:
            status, body = r.status, await r.json() if r.status == 200 else None
        self.latencies.append((time.perf_counter() - started) * 1e3)
        if body is not None and body["committed"]:
            self.committed += 1
            async with self.client.post(f"/v1/jobs/{job_id}/release") as freed:
                await freed.read()
        else:
            self.errors += status != 200

    def figures(self, seconds: float) -> dict[str, Any]:
        return {**_figures(self.latencies, self.errors, seconds),
                "durable_placements_per_s": round(self.committed / seconds, 1)}


async def place_at_rate(client: aiohttp.ClientSession, jobs: Jobs, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: a placement every 1/rate s, each released once acknowledged."""
    calls = _Placements(client, jobs)
    return calls.figures(await _open_loop(rate, seconds, lambda k: calls.one(f"rate-{k}")))


async def place_loop(client: aiohttp.ClientSession, jobs: Jobs, clients: int, seconds: float) -> dict[str, Any]:
    """Closed loop: ``clients`` clients each place and release, one after the other, until time is up."""
    calls = _Placements(client, jobs)
    stop = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            await calls.one(f"load-{w}-{n}")
            n += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    return calls.figures(time.perf_counter() - start)


def _figures(latencies: list[float], errors: int, seconds: float) -> dict[str, Any]:
    ms = np.asarray(latencies) if latencies else np.zeros(1)
    return {"requests": len(latencies), "errors": errors, "per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2)}


async def predict_loop(client: aiohttp.ClientSession, jobs: Jobs, count: int, clients: int) -> dict[str, Any]:
    """``count`` predictions from ``clients`` clients, each asking as soon as its last answer came."""
    left, started = count, time.perf_counter()

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with client.post("/v1/predict", json=jobs.next(f"warm-{left}")) as answer:
                await answer.read()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return {"requests": count, "seconds": round(time.perf_counter() - started, 1)}


async def metrics(client: aiohttp.ClientSession) -> str:
    async with client.get("/metrics") as answer:
        return await answer.text()


async def with_cache_share(client: aiohttp.ClientSession, phase: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """The phase's figures, with the share of estimator rows the answer cache answered during it."""
    before = cache_rows(await metrics(client))
    figures = await phase
    after = cache_rows(await metrics(client))
    hits, misses = after[0] - before[0], after[1] - before[1]
    return {**figures, "cache_hit_share": round(hits / (hits + misses), 3) if hits + misses else None}


async def measure(url: str, seconds: float, rate: float, place_rate: float, clients: int,
                  warm: int) -> dict[str, Any]:
    jobs = Jobs(real_jobs())
    gc.collect()
    gc.freeze()  # the client's own collector, walking the trace's jobs, would stall it and skew its timings
    connector = aiohttp.TCPConnector(limit=max(64, clients * 2))
    async with aiohttp.ClientSession(base_url=url, headers={"X-API-Key": API_KEY}, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        warming = await with_cache_share(client, predict_loop(client, jobs, warm, 16))
        print(f"warmed with the trace's first {warm:,} jobs through /v1/predict in {warming['seconds']} s",
              flush=True)
        health = await fixed_rate(client, "/healthz", None, rate, seconds)
        predict = await with_cache_share(client, fixed_rate(client, "/v1/predict", jobs, rate, seconds))
        place = await with_cache_share(client, place_at_rate(client, jobs, place_rate, seconds))
        saturated = await with_cache_share(client, place_loop(client, jobs, clients, seconds))
        async with client.get("/v1/models") as models:
            version = (await models.json())["answering"]
    return {"model_version": version, "rate_per_s": rate, "place_rate_per_s": place_rate, "seconds": seconds,
            "warm_jobs": warm, "warm": warming, "jobs_sent": jobs.next_index, "trace_wrapped": jobs.wrapped,
            "healthz": health, "predict": predict,
            "predict_p99_over_healthz_p99": round(predict["p99_ms"] / max(health["p99_ms"], 1e-6), 2),
            "place": place, "place_p99_over_healthz_p99": round(place["p99_ms"] / max(health["p99_ms"], 1e-6), 2),
            "place_closed_loop": {**saturated, "clients": clients},
            "targets": {"place": ">= 300 durable placements/s, p99 < 25 ms",
                        "predict": "p99 < 25 ms at 500 requests/s"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="2 s per phase at 100 requests/s, 4 clients (CI)")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("GPUPLACE_HOME", REPO / ".gpuplace")))
    parser.add_argument("--database-url", default="")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--place-rate", type=float, default=300.0, help="placements/s of the fixed-rate phase")
    parser.add_argument("--clients", type=int, default=16, help="clients of the closed-loop phase")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warm", type=int, default=5000, help="trace jobs predicted before the measured phases")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "service.json")
    args = parser.parse_args()
    seconds, rate, place_rate, clients, warm = ((2.0, 100.0, 50.0, 4, 200) if args.fast else
                                                (args.seconds, args.rate, args.place_rate, args.clients, args.warm))
    with tempfile.TemporaryDirectory() as scratch:
        database = args.database_url or f"sqlite:///{Path(scratch) / 'state.db'}"
        env = server_env(args.home, database, GPUPLACE_MODEL_POLL_S="0")
        server = Server(env).start(*(["--workers", str(args.workers)] if args.workers > 1 else []))
        try:
            result = asyncio.run(measure(server.url, seconds, rate, place_rate, clients, warm))
        finally:
            server.stop()
    result["database"] = "postgresql" if database.startswith("postgresql") else "sqlite"
    result["workers"] = args.workers
    for name, label in (("healthz", "healthz"), ("predict", "predict"), ("place", "place"),
                        ("place_closed_loop", f"place, {clients} clients closed loop")):
        f = result[name]
        extra = f"  durable placements/s {f['durable_placements_per_s']}" if "place" in name else ""
        share = f.get("cache_hit_share")
        extra += "" if share is None else f"  answer cache {share:.0%} of estimator rows"
        print(f"{label:8} {f['per_s']:8.1f} req/s  p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:7.2f} ms  "
              f"errors {f['errors']}{extra}")
    print(f"model answering: {result['model_version']}; database: {result['database']}; "
          f"p99 ratio to /healthz: predict {result['predict_p99_over_healthz_p99']}, "
          f"place {result['place_p99_over_healthz_p99']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    if result["trace_wrapped"]:
        print("note: the run outlasted the trace's jobs and sent some a second time")
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
