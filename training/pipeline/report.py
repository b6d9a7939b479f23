"""Run an evaluation of one source and target and write its JSON report and PNG plots."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.dask_cluster import connected
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline import plots
from training.pipeline.distributed import on_workers
from training.pipeline.evaluate import Split, baselines, evaluate, families, models, time_split

UNITS = {"duration_s": "s", "req_net_gbps": "Gbit/s", "req_gpu": "GPUs", "req_cpu_cores": "cores",
         "req_mem_gib": "GiB"}
NO_DATA_NOTE = ("No shipped real trace records per-job GPU memory use, so no GPU-memory model is trained or "
                "reported; the full PAI v2020 sensor table (max_gpu_wrk_mem) would provide it.")


def run_report(source: str, target: str, out: Path, seed: int = 0, test_share: float = 0.3,
               requested: tuple[str, ...] = ("lgbm", "rf"), progress: Callable[[str], None] | None = None,
               validation: bool = False, scheduler: str | None = None) -> dict[str, Any]:
    """Evaluate every baseline and model family; write ``report.json`` and plots under ``out``. With
    ``validation``, on the validation split of the earlier jobs instead of the later ones; with ``scheduler``, the
    LightGBM boosters fitted on that Dask cluster (``training.pipeline.distributed``)."""
    spec = target_spec(source, target)
    split = time_split(get_source(source).load(), spec, test_share, validation)
    fitted = {name: on_workers(estimator) if scheduler else estimator
              for name, estimator in models(spec, seed, requested).items()}
    with connected(scheduler):
        result = evaluate(split, {**baselines(spec), **fitted}, progress)
    report = write_report(source, target, split, result, families(spec, requested), out, seed)
    report["split"]["validation"] = validation
    if scheduler:
        report["dask_scheduler"] = scheduler
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def write_report(source: str, target: str, split: Split, result: dict[str, Any], fitted: tuple[str, ...],
                 out: Path, seed: int) -> dict[str, Any]:
    """Write the JSON report and the plots of an evaluation ``result``; return the report."""
    spec = target_spec(source, target)
    actual = split.target[split.test]
    unit = UNITS.get(spec.column, "")
    best_baseline = min((n for n in result["estimators"] if n not in fitted),
                        key=lambda n: result["estimators"][n]["male"])
    shown = {n: result["predictions"][n] for n in (best_baseline, *fitted)}
    subject = f"{source} {target}"
    files = [plots.predicted_vs_actual(shown, actual, out / "predicted_vs_actual.png", unit, subject),
             plots.calibration(result["estimators"], out / "calibration.png", subject),
             plots.error_by_depth(result["estimators"], out / "error_by_depth.png", subject)]
    report = {
        "source": source, "target": target, "column": spec.column, "unit": unit, "seed": seed,
        "split": {"train_rows": len(split.train), "test_rows": len(split.test),
                  "test_share": split.test_share, "order": "submit_time_s"},
        "estimators": result["estimators"], "best_causal_baseline": best_baseline,
        "reference_in_sample": result["reference"],
        "reference_note": "source-published estimates averaged over the whole trace, including each job itself: "
                          "an in-sample reference no causal estimator can be held to",
        "notes": [NO_DATA_NOTE], "plots": [str(p) for p in files],
    }
    clean: dict[str, Any] = finite(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(clean, indent=2))
    return clean


def finite(value: Any) -> Any:
    """JSON has no NaN: write missing metrics as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
