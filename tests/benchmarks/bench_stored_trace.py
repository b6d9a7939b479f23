"""Benchmark (not a timed test): training the duration estimator from a trace in this process against training it
from the same trace stored as Parquet, on local Dask workers (``training.pipeline.stored``), at growing trace sizes.

Trace: the shipped PAI job table (68,727 jobs, real), and variants made from it by laying whole copies end to end:
copy k has its jobs' ids, users and groups suffixed with ``~k`` (so no history carries from one copy to the next)
and its times shifted by k x the table's span plus one day. A variant is the same workload for longer; its jobs are
real jobs, its size is made. Each variant is written as Parquet files of about 70,000 jobs each.

Each path runs in a fresh Python process, so that its peak resident memory (``ru_maxrss``) is its own: in this
process, the table loaded, its causal features built, ``lgbm`` fitted and scored (``time_split``, ``evaluate``);
stored, ``evaluate_stored`` with ``lgbm`` on ``local:N`` (which also scores the causal baselines and draws the
report's plots; its workers are other processes; their memory is not
counted, the point being what the calling machine must hold). Printed per size: wall time, the calling process's
peak memory above what it held after its imports, and the held-out MALE / P90 coverage of each.

    python tests/benchmarks/bench_stored_trace.py [--copies 1,4] [--workers 2] [--head N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

PART_ROWS = 70_000
DAY_S = 86_400.0


def write_variant(copies: int, folder: Path, head: int | None = None) -> int:
    """The shipped PAI job table (its first ``head`` jobs, where given) laid end to end ``copies`` times, as Parquet
    files under ``folder``; its rows."""
    import pandas as pd

    from training.ingest.sources import get_source
    from training.ingest.tables import write_tables

    table = get_source("pai2020-jobs").load().iloc[:head]
    span = float(table[["submit_time_s", "end_time_s"]].max().max() - table["submit_time_s"].min()) + DAY_S
    parts = []
    for k in range(copies):
        copy = table.copy()
        for column in ("job_id", "user", "group"):
            copy[column] = copy[column].astype("string") + f"~{k}"
        for column in ("submit_time_s", "start_time_s", "end_time_s"):
            copy[column] = copy[column] + k * span
        parts.append(copy)
    whole = pd.concat(parts, ignore_index=True)
    write_tables({f"part-{i:03d}": whole.iloc[start:start + PART_ROWS]
                  for i, start in enumerate(range(0, len(whole), PART_ROWS))}, folder)
    return len(whole)


def run_one(path: str, trace: str, workers: int) -> dict[str, Any]:
    """One path, in this (fresh) process: its figures."""
    from training.features.targets import target_spec

    spec = target_spec("pai2020-jobs", "duration")
    if path == "stored":
        from training.pipeline.stored import evaluate_stored
    else:
        from training.ingest.tables import read_table
        from training.pipeline.evaluate import evaluate, model, time_split
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if path == "stored":
        with tempfile.TemporaryDirectory() as out:
            entry = evaluate_stored("pai2020-jobs", "duration", Path(trace), Path(out), f"local:{workers}",
                                    "lgbm")["estimators"]["lgbm"]
    else:
        import pandas as pd

        table = pd.concat([read_table(p) for p in sorted(Path(trace).glob("*.parquet"))], ignore_index=True)
        fitted = {"history": model(spec, "history"), "lgbm": model(spec, "lgbm")}  # as evaluate_stored fits
        entry = evaluate(time_split(table, spec), fitted)["estimators"]["lgbm"]
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"wall_s": wall, "peak_mib_above_imports": (peak - base) / 1024, "male": entry["male"],
            "p90_coverage": entry["p90_coverage"], "test_rows": entry["n"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="1,4", help="trace sizes, in copies of the shipped PAI job table")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--head", type=int, default=None, help="only the table's first N jobs (a quick run)")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "stored_trace.json")
    parser.add_argument("--one", nargs=2, metavar=("PATH", "TRACE"), help=argparse.SUPPRESS)  # a child's task
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.workers)))
        return
    results = []
    for copies in (int(c) for c in args.copies.split(",")):
        with tempfile.TemporaryDirectory(prefix="gpuplace-trace-") as folder:
            rows = write_variant(copies, Path(folder), args.head)
            for path in ("in-process", "stored"):
                print(f"{rows:,} jobs: {path} ...", file=sys.stderr, flush=True)
                child = subprocess.run([sys.executable, __file__, "--workers", str(args.workers), "--one", path,
                                        folder], capture_output=True, text=True, cwd=REPO, check=False)
                if child.returncode != 0:
                    raise SystemExit(f"{path} on {rows:,} jobs failed:\n{child.stderr[-3000:]}")
                figures = json.loads(child.stdout.strip().splitlines()[-1])
                results.append({"jobs": rows, "path": path, **figures})
    print(f"{'jobs':>9} {'path':>10} {'wall s':>7} {'peak MiB':>9} {'MALE':>7} {'P90 cov':>7}")
    for r in results:
        print(f"{r['jobs']:>9,} {r['path']:>10} {r['wall_s']:>7.1f} {r['peak_mib_above_imports']:>9.0f} "
              f"{r['male']:>7.4f} {r['p90_coverage']:>7.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"workers": args.workers, "results": results}, indent=2))


if __name__ == "__main__":
    main()
