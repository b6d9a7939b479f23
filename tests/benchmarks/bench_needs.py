"""Benchmark (not a timed test): what a job needs, estimated from its hyperparameters, against real
measurements held out by whole configurations.

Prints and writes (JSON, PNG), per target and hold-out check, the learned estimator beside its
analytical baseline: mean absolute log error (MALE) of the P50 and P90 coverage of the measured value.

* peak GPU memory and mean GPU utilisation: GPUMemNet (6,000 MLP runs on an A100 40 GB), held out by
  unseen architectures and unseen batch-size bands (``training.needs.memory``);
* seconds per epoch on each GPU type and the cross-type ratio: Zeus (six workloads on V100, A40,
  RTX6000, P100) held out by unseen batch sizes, workload and GPU type; the ratio also on Gavel's
  K80/P100/V100 throughputs, held out by unseen model (``training.needs.epoch_time``);
* the slowdown of spreading a job's replicas over machines: Pollux (six models), held out by unseen
  model and unseen batch sizes (``training.needs.spread_sensitivity``);
* right-sizing: for the held-out GPUMemNet runs, the GPU memory and GPU share that packing by the P90
  frees against a whole-GPU request, and the share of runs whose real peak is above it.

    python tests/benchmarks/bench_needs.py [--out DIR] [--sample FRACTION]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from training.needs import epoch_time, memory, spread_sensitivity  # noqa: E402
from training.needs.gpumemnet import load_gpumemnet  # noqa: E402
from training.performance.profiles import load_pollux  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "needs")
    parser.add_argument("--sample", type=float, default=1.0,
                        help="share of GPUMemNet runs and Pollux rows to evaluate on (1 = all; less for a smoke run)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    tables = []

    started = time.perf_counter()
    runs = load_gpumemnet()
    if args.sample < 1:
        runs = runs.sample(frac=args.sample, random_state=0)
    errors, points = memory.evaluate_memory_models(runs)
    memory.plot_measured_vs_predicted(points, args.out / "needs-memory.png")
    tables.append(errors)
    held = points[(points["target"] == "gpu_mem_peak_mib") & (points["predictor"] == "model")]
    figures["right_sizing"] = {check: memory.right_sizing(group) for check, group in held.groupby("check")}
    print(f"GPUMemNet ({len(runs):,} runs): evaluated in {time.perf_counter() - started:.1f} s", flush=True)

    started = time.perf_counter()
    errors, points = epoch_time.evaluate_epoch_time()
    epoch_time.plot_measured_vs_predicted(points, args.out / "needs-epoch.png")
    tables.append(errors)
    print(f"Zeus and Gavel: evaluated in {time.perf_counter() - started:.1f} s", flush=True)

    started = time.perf_counter()
    pollux = load_pollux()
    if args.sample < 1:
        pollux = pollux.sample(frac=args.sample, random_state=0)
    errors, points = spread_sensitivity.evaluate_spread_sensitivity(pollux)
    spread_sensitivity.plot_measured_vs_predicted(points, args.out / "needs-spread.png")
    tables.append(errors)
    print(f"Pollux ({len(pollux):,} rows): evaluated in {time.perf_counter() - started:.1f} s", flush=True)

    table = pd.concat(tables, ignore_index=True)
    print("\nHeld-out errors (MALE of the P50, lower is better; P90 coverage of the measured value):")
    print(_long(table).to_string(index=False))
    print("\nRight-sizing, held-out GPUMemNet runs packed by their P90 peak (request assumed: a whole A100 40 GB):")
    for check, found in figures["right_sizing"].items():
        print(f"  {check}: " + ", ".join(f"{k} {v:,.0f}" if abs(v) >= 100 else f"{k} {v:.3f}"
                                         for k, v in found.items()))
    figures["errors"] = table.to_dict(orient="records")
    (args.out / "needs.json").write_text(json.dumps(figures, indent=1, default=float))
    print(f"\nfigures and plots written to {args.out}")


def _long(table: pd.DataFrame) -> pd.DataFrame:
    """The errors table, rounded."""
    shown = table.assign(male=table["male"].round(3), p90_coverage=table["p90_coverage"].round(3))
    return shown.rename(columns={"male": "MALE", "p90_coverage": "P90 coverage"})

if __name__ == "__main__":
    main()
