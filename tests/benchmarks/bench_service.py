"""Benchmark (not a timed test): the REST service under load, from a separate client process.

Starts ``gpuplace serve`` on 127.0.0.1 (SQLite state database in a temporary folder unless
``--database-url``; the model registry of ``--home``, whose champion answers if it has one, else the
heuristic), then from this process with asyncio + aiohttp (a client several times lighter per request than httpx,
so that the client's own CPU use skews less on a 2-core machine):

1. ``/healthz`` at a fixed rate (the baseline of the same machine under the same load);
2. ``/v1/predict`` at a fixed rate (default 500 requests/s): real PAI jobs (rows of the shipped job
   table), p50 / p99 latency and the ratio of its p99 to ``/healthz``'s;
3. ``/v1/place`` at a fixed rate (default 300 placements/s): each a real PAI job, released as soon as
   it is acknowledged; durable placements per second (answers with ``committed: true``, sent only
   after the database transaction committed) and p50 / p99 of the place calls;
4. ``/v1/place`` closed loop: ``--clients`` concurrent clients each place a job and release it, as
   fast as answers come: the most the service sustains, and its latency there.

Targets on 2 cores: at least 300 durable placements/s through ``/v1/place`` with p99 under 25 ms, and
``/v1/predict`` p99 under 25 ms at 500 requests/s. Figures are printed and written to JSON, never
asserted on. ``--fast`` (CI): 2 s per phase at low rates.

    python tests/benchmarks/bench_service.py [--fast] [--home DIR] [--database-url URL] [--workers N] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
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

from tests.service.conftest import API_KEY, Server, server_env  # noqa: E402

JOBS_CSV = REPO / "data" / "pai2020" / "pai_job_duration_estimate_100K_head.csv"


def real_jobs(limit: int) -> list[dict[str, Any]]:
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


async def fixed_rate(client: aiohttp.ClientSession, path: str, bodies: list[dict[str, Any]] | None, rate: float,
                     seconds: float) -> dict[str, Any]:
    """Open loop: one request every 1/rate s, whatever the answers' speed; latency of each."""
    latencies: list[float] = []
    errors = 0

    async def one(k: int) -> None:
        nonlocal errors
        started = time.perf_counter()
        request = (client.post(path, json={**bodies[k % len(bodies)], "job_id": f"p-{k}"}) if bodies
                   else client.get(path))
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

    def __init__(self, client: aiohttp.ClientSession, bodies: list[dict[str, Any]]) -> None:
        self.client, self.bodies = client, bodies
        self.latencies: list[float] = []
        self.committed = self.errors = 0

    async def one(self, k: int, job_id: str) -> None:
        started = time.perf_counter()
        async with self.client.post("/v1/place", json={**self.bodies[k % len(self.bodies)], "job_id": job_id}) as r:
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


async def place_at_rate(client: aiohttp.ClientSession, bodies: list[dict[str, Any]], rate: float,
                        seconds: float) -> dict[str, Any]:
    """Open loop: a placement every 1/rate s, each released once acknowledged."""
    calls = _Placements(client, bodies)
    return calls.figures(await _open_loop(rate, seconds, lambda k: calls.one(k, f"rate-{k}")))


async def place_loop(client: aiohttp.ClientSession, bodies: list[dict[str, Any]], clients: int,
                     seconds: float) -> dict[str, Any]:
    """Closed loop: ``clients`` clients each place and release, one after the other, until time is up."""
    calls = _Placements(client, bodies)
    stop = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            await calls.one(w * 7919 + n, f"load-{w}-{n}")
            n += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    return calls.figures(time.perf_counter() - start)


def _figures(latencies: list[float], errors: int, seconds: float) -> dict[str, Any]:
    ms = np.asarray(latencies) if latencies else np.zeros(1)
    return {"requests": len(latencies), "errors": errors, "per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2)}


async def measure(url: str, seconds: float, rate: float, place_rate: float, clients: int) -> dict[str, Any]:
    bodies = real_jobs(2000)
    connector = aiohttp.TCPConnector(limit=max(64, clients * 2))
    async with aiohttp.ClientSession(base_url=url, headers={"X-API-Key": API_KEY}, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        await fixed_rate(client, "/v1/predict", bodies, 50, 1.0)  # warm-up
        health = await fixed_rate(client, "/healthz", None, rate, seconds)
        predict = await fixed_rate(client, "/v1/predict", bodies, rate, seconds)
        place = await place_at_rate(client, bodies, place_rate, seconds)
        saturated = await place_loop(client, bodies, clients, seconds)
        async with client.get("/v1/models") as models:
            version = (await models.json())["answering"]
    return {"model_version": version, "rate_per_s": rate, "place_rate_per_s": place_rate, "seconds": seconds,
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
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "service.json")
    args = parser.parse_args()
    seconds, rate, place_rate, clients = ((2.0, 100.0, 50.0, 4) if args.fast
                                          else (args.seconds, args.rate, args.place_rate, args.clients))
    with tempfile.TemporaryDirectory() as scratch:
        database = args.database_url or f"sqlite:///{Path(scratch) / 'state.db'}"
        env = server_env(args.home, database, GPUPLACE_MODEL_POLL_S="0")
        server = Server(env).start(*(["--workers", str(args.workers)] if args.workers > 1 else []))
        try:
            result = asyncio.run(measure(server.url, seconds, rate, place_rate, clients))
        finally:
            server.stop()
    result["database"] = "postgresql" if database.startswith("postgresql") else "sqlite"
    result["workers"] = args.workers
    for name, label in (("healthz", "healthz"), ("predict", "predict"), ("place", "place"),
                        ("place_closed_loop", f"place, {clients} clients closed loop")):
        f = result[name]
        extra = f"  durable placements/s {f['durable_placements_per_s']}" if "place" in name else ""
        print(f"{label:8} {f['per_s']:8.1f} req/s  p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:7.2f} ms  "
              f"errors {f['errors']}{extra}")
    print(f"model answering: {result['model_version']}; database: {result['database']}; "
          f"p99 ratio to /healthz: predict {result['predict_p99_over_healthz_p99']}, "
          f"place {result['place_p99_over_healthz_p99']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
