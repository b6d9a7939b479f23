"""Benchmark (not a timed test): prediction latency and throughput of a registered bundle, in process.

Trains a bundle on the shipped PAI job table (real data) into a temporary MLflow SQLite registry,
loads it back by alias, then measures one-job calls (p50/p99 over many calls) and batch throughput
on real job descriptions from the held-out later part of the trace, every row asked of the model
(``cache=False``). Then the same one-job calls in the trace's order through the bundle's answer
cache, with the share of rows it answered. Target on 2 cores: p99 under 10 ms for one job, at least
10,000 jobs/s in batches.

    python tests/benchmarks/bench_predict.py [--algo rf|lgbm] [--calls N] [--fast] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from models.registry import CHALLENGER, ModelRegistry, default_uri  # noqa: E402
from training.ingest.sources import get_source  # noqa: E402
from training.pipeline.bundle import JOB_COLUMNS  # noqa: E402
from training.pipeline.train import train_and_register  # noqa: E402


def measure(algo: str, calls: int, batch: int, fast: bool) -> dict[str, float | str]:
    params = {"n_estimators": 20} if fast else None
    with tempfile.TemporaryDirectory(prefix="gpuplace-bench-") as tmp:
        registry = ModelRegistry(default_uri(Path(tmp)), "bench", artifact_root=Path(tmp) / "art")
        t0 = time.perf_counter()
        train_and_register(registry, ["pai2020-jobs"], algo, params=params)
        train_s = time.perf_counter() - t0
        _, bundle = registry.load(CHALLENGER)
    table = get_source("pai2020-jobs").load()
    jobs = table.iloc[int(len(table) * 0.7):][[c for c in JOB_COLUMNS if c in table]].reset_index(drop=True)
    records = [{k: v for k, v in row.items() if v is not None}
               for row in jobs.astype("object").where(jobs.notna(), None).to_dict(orient="records")]
    bundle.predict_records(records[:1], cache=False)  # warm-up
    single = _one_at_a_time(bundle, records, calls, cache=False)
    cached = _one_at_a_time(bundle, records, calls, cache=True)
    stats = bundle.cache_stats()
    rows = records[:batch]
    start = time.perf_counter()
    bundle.predict_records(rows, cache=False)
    records_s = time.perf_counter() - start
    start = time.perf_counter()
    bundle.predict(None, jobs.iloc[:batch])
    frame_s = time.perf_counter() - start
    ms, cached_ms = np.asarray(single) * 1e3, np.asarray(cached) * 1e3
    return {"algo": algo, "train_s": round(train_s, 1), "calls": calls,
            "single_p50_ms": round(float(np.percentile(ms, 50)), 3),
            "single_p99_ms": round(float(np.percentile(ms, 99)), 3),
            "cached_p50_ms": round(float(np.percentile(cached_ms, 50)), 3),
            "cached_p99_ms": round(float(np.percentile(cached_ms, 99)), 3),
            "cache_hit_share": round(stats["hits"] / max(stats["hits"] + stats["misses"], 1), 3),
            "batch_rows": len(rows),
            "batch_jobs_per_s": round(len(rows) / records_s), "frame_batch_jobs_per_s": round(len(rows) / frame_s),
            "targets": "p99 < 10 ms; >= 10,000 jobs/s"}


def _one_at_a_time(bundle: Any, records: list[dict[str, Any]], calls: int, cache: bool) -> list[float]:
    """Seconds of each of ``calls`` one-job calls, on the jobs in the trace's order."""
    seconds = []
    for i in range(calls):
        one = [records[i % len(records)]]
        start = time.perf_counter()
        bundle.predict_records(one, cache=cache)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="rf", choices=["rf", "lgbm"])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=20000)
    parser.add_argument("--fast", action="store_true", help="small models and few calls: proves the benchmark runs")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "predict.json")
    args = parser.parse_args()
    result = measure(args.algo, 50 if args.fast else args.calls, 2000 if args.fast else args.batch, args.fast)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"bundle {result['algo']} trained on real PAI jobs in {result['train_s']} s")
    print(f"one job per call: p50 {result['single_p50_ms']} ms, p99 {result['single_p99_ms']} ms "
          f"over {result['calls']} calls, every row asked of the model (target p99 < 10 ms)")
    print(f"the same calls through the answer cache: p50 {result['cached_p50_ms']} ms, "
          f"p99 {result['cached_p99_ms']} ms; {result['cache_hit_share']:.0%} of rows answered from it")
    print(f"batch of {result['batch_rows']:,}: {result['batch_jobs_per_s']:,} jobs/s as records, "
          f"{result['frame_batch_jobs_per_s']:,} jobs/s as one DataFrame (target >= 10,000)")
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
