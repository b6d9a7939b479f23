"""Benchmark (not a timed test): the REST service under load, from a separate client process.

Starts ``gpuplace serve`` on 127.0.0.1 (SQLite state database in a temporary folder unless
``--database-url``; the model registry of ``--home``, whose champion answers if it has one, else the
heuristic), then from this process with asyncio + aiohttp (a client several times lighter per request than httpx,
so that the client's own CPU use skews less on a 2-core machine):

1. ``/healthz`` at a fixed rate (the baseline of the same machine under the same load);
2. ``/v1/predict`` at a fixed rate (default 500 requests/s): real PAI jobs (rows of the shipped job
   table), p50 / p99 latency and the ratio of its p99 to ``/healthz``'s;
3. ``/v1/place`` closed loop: ``--clients`` concurrent clients each place a real PAI job and release
   it, as fast as answers come; durable placements per second (answers with ``committed: true``,
   sent only after the database transaction committed) and p50 / p99 of the place calls.

Targets on 2 cores: at least 300 durable placements/s through ``/v1/place`` with p99 under 25 ms, and
``/v1/predict`` p99 under 25 ms at 500 requests/s. Figures are printed and written to JSON, never
asserted on. ``--fast`` (CI): 2 s per phase at low rates.

    python tests/benchmarks/bench_service.py [--fast] [--home DIR] [--database-url URL] [--out FILE]
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

    tasks, start, k = [], time.perf_counter(), 0
    while (now := time.perf_counter() - start) < seconds:
        if k < now * rate:
            tasks.append(asyncio.create_task(one(k)))
            k += 1
        else:
            await asyncio.sleep(min(1 / rate, 0.001))
    await asyncio.gather(*tasks)
    return _figures(latencies, errors, time.perf_counter() - start)


async def place_loop(client: aiohttp.ClientSession, bodies: list[dict[str, Any]], clients: int,
                     seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    committed = errors = 0
    stop = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal committed, errors
        n = 0
        while time.perf_counter() < stop:
            job_id = f"load-{w}-{n}"
            started = time.perf_counter()
            async with client.post("/v1/place", json={**bodies[(w * 7919 + n) % len(bodies)], "job_id": job_id}) as r:
                status, body = r.status, await r.json() if r.status == 200 else None
            latencies.append((time.perf_counter() - started) * 1e3)
            if body is not None and body["committed"]:
                committed += 1
                async with client.post(f"/v1/jobs/{job_id}/release") as freed:
                    await freed.read()
            else:
                errors += status != 200
            n += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    figures = _figures(latencies, errors, time.perf_counter() - start)
    figures["durable_placements_per_s"] = round(committed / (time.perf_counter() - start), 1)
    return figures


def _figures(latencies: list[float], errors: int, seconds: float) -> dict[str, Any]:
    ms = np.asarray(latencies) if latencies else np.zeros(1)
    return {"requests": len(latencies), "errors": errors, "per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2)}


async def measure(url: str, seconds: float, rate: float, clients: int) -> dict[str, Any]:
    bodies = real_jobs(2000)
    connector = aiohttp.TCPConnector(limit=max(64, clients * 2))
    async with aiohttp.ClientSession(base_url=url, headers={"X-API-Key": API_KEY}, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        await fixed_rate(client, "/v1/predict", bodies, 50, 1.0)  # warm-up
        health = await fixed_rate(client, "/healthz", None, rate, seconds)
        predict = await fixed_rate(client, "/v1/predict", bodies, rate, seconds)
        place = await place_loop(client, bodies, clients, seconds)
        async with client.get("/v1/models") as models:
            version = (await models.json())["answering"]
    return {"model_version": version, "rate_per_s": rate, "seconds": seconds, "healthz": health, "predict": predict,
            "predict_p99_over_healthz_p99": round(predict["p99_ms"] / max(health["p99_ms"], 1e-6), 2),
            "place": place, "place_p99_over_healthz_p99": round(place["p99_ms"] / max(health["p99_ms"], 1e-6), 2),
            "targets": {"place": ">= 300 durable placements/s, p99 < 25 ms",
                        "predict": "p99 < 25 ms at 500 requests/s"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="2 s per phase at 100 requests/s, 4 clients (CI)")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("GPUPLACE_HOME", REPO / ".gpuplace")))
    parser.add_argument("--database-url", default="")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "service.json")
    args = parser.parse_args()
    seconds, rate, clients = (2.0, 100.0, 4) if args.fast else (args.seconds, args.rate, args.clients)
    with tempfile.TemporaryDirectory() as scratch:
        database = args.database_url or f"sqlite:///{Path(scratch) / 'state.db'}"
        env = server_env(args.home, database, GPUPLACE_MODEL_POLL_S="0")
        server = Server(env).start()
        try:
            result = asyncio.run(measure(server.url, seconds, rate, clients))
        finally:
            server.stop()
    result["database"] = "postgresql" if database.startswith("postgresql") else "sqlite"
    for name in ("healthz", "predict", "place"):
        f = result[name]
        extra = f"  durable placements/s {f['durable_placements_per_s']}" if name == "place" else ""
        print(f"{name:8} {f['per_s']:8.1f} req/s  p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:7.2f} ms  "
              f"errors {f['errors']}{extra}")
    print(f"model answering: {result['model_version']}; database: {result['database']}; "
          f"p99 ratio to /healthz: predict {result['predict_p99_over_healthz_p99']}, "
          f"place {result['place_p99_over_healthz_p99']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
