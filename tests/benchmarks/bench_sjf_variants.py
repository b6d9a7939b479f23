"""Benchmark (not a timed test): how much closer to the oracle SJF on the model comes than causal SJGG, on
derived variants of the held-out PAI jobs, not on one setting alone.

The duration estimators of ``--families`` (default ``lgbm`` and ``rf``, the rule-stacked families ``gpuplace
train`` offers) are fitted on the earlier 70% of the shipped PAI job table, as ``gpuplace evaluate`` fits them;
each job's expected duration (the estimators' ``mean``) is the key SJF on the model orders by. With two
families, ``blend`` orders by the geometric mean of their expected durations.

Variants (the held-out later 30%, 20,619 jobs): ``--slices`` consecutive slices of ``--slice-jobs`` jobs, each
on one node of ``--gpus`` GPUs (23.22 CPU cores per GPU, the PAI simulator's big node), arriving ``--rates`` jobs
a minute in the simulator's batches (``bench_anchor_pai.py``'s ``same_inputs``: the same arrivals and causal
SJGG estimates the anchor gets there). Each variant is replayed with SJF on the true duration (oracle), SJGG and
SJF on each key, on the fluid node (one pool, as the PAI trace's simulator counts it: its mean JCTs equal the
simulator's to the second, ``bench_anchor_pai.py``) and, unless ``--fluid-only``, on the discrete node.

Printed per variant and replay: the oracle's and SJGG's mean JCT, and per key ``closer`` =
1 - (key - oracle) / (SJGG - oracle), the share of SJGG's distance from the oracle the key makes up (the
target of 30% in the issue's two settings). Where SJGG is already within ``--comparable`` of the oracle's mean
JCT that share is a ratio of two small differences and swings by hundreds of percent; the summary per key and
replay gives the median, quartiles and the share of variants at 30% or more, over all variants and over those
where SJGG is at least ``--comparable`` above the oracle.

    python tests/benchmarks/bench_sjf_variants.py [--families lgbm,rf] [--slices 4] [--slice-jobs 5000]
        [--gpus 600,1000,1500] [--rates 500,1000,2000] [--comparable 0.02] [--fluid-only] [--fast] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from placement.model.cluster import Cluster  # noqa: E402
from placement.sim.engine import simulate  # noqa: E402
from placement.sim.jobs import SimJob  # noqa: E402
from placement.sim.metrics import summarise  # noqa: E402
from placement.sim.queues import queue_policy  # noqa: E402
from service.workdir import home  # noqa: E402
from tests.benchmarks.bench_anchor_pai import same_inputs  # noqa: E402
from training.features.targets import target_spec  # noqa: E402
from training.ingest.sources import get_source  # noqa: E402
from training.pipeline.evaluate import model, time_split  # noqa: E402
from training.replay.compare import cluster_for, pai_jobs  # noqa: E402

TARGET_CLOSER = 0.30


def expected_durations(families: list[str], fast: bool) -> dict[str, dict[str, float]]:
    """Per family (and ``blend`` of two), each row's expected duration, fitted on the earlier 70% of the table."""
    table = get_source("pai2020-jobs").load(cache=home() / "cache")
    spec = target_spec("pai2020-jobs", "duration")
    split = time_split(table, spec)
    params = {"n_estimators": 20} if fast else None
    found: dict[str, np.ndarray] = {}
    for family in families:
        fitted = model(spec, family, 0, params).fit(split.features.iloc[split.train], split.target[split.train])
        predicted = fitted.predict(split.features)
        found[family] = np.asarray(predicted.mean if predicted.mean is not None else predicted.p50, dtype=float)
    if len(families) == 2:
        found["blend"] = np.expm1((np.log1p(found[families[0]]) + np.log1p(found[families[1]])) / 2)
    ids = table["job_id"].astype(str).tolist()
    return {name: dict(zip(ids, values.tolist(), strict=True)) for name, values in found.items()}


def keyed(jobs: list[SimJob], by_id: dict[str, float]) -> list[SimJob]:
    """The jobs with ``by_id``'s value as their ``model`` estimate (what ``sjf-model`` orders by)."""
    return [replace(j, estimates=MappingProxyType({**j.estimates, "model": by_id[j.job_id]})) for j in jobs]


def mean_jct(cluster: Cluster, jobs: list[SimJob], queue: str, fluid: bool) -> float:
    return float(summarise(simulate(cluster, jobs, "first-fit", queue_policy(queue), fluid=fluid))["jct_mean_s"])


def closer(key: float, oracle: float, sjgg: float) -> float:
    return 1.0 - (key - oracle) / (sjgg - oracle) if sjgg != oracle else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    found = [v for v in values if not np.isnan(v)]
    if not found:
        return {"variants": 0}
    q1, median, q3 = (float(q) for q in np.percentile(found, [25, 50, 75]))
    return {"variants": len(found), "median": median, "q1": q1, "q3": q3,
            "share_at_target": float(np.mean([v >= TARGET_CLOSER for v in found]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="lgbm,rf")
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--slice-jobs", type=int, default=5000)
    parser.add_argument("--gpus", default="600,1000,1500")
    parser.add_argument("--rates", default="500,1000,2000", help="arrivals per minute")
    parser.add_argument("--comparable", type=float, default=0.02,
                        help="SJGG's least distance above the oracle's mean JCT, as a share, for a variant to count "
                             "in the second summary")
    parser.add_argument("--fluid-only", action="store_true", help="skip the discrete node's replays")
    parser.add_argument("--fast", action="store_true", help="small learners (20 trees): checks the benchmark runs")
    parser.add_argument("--out", type=Path, default=REPO / ".gpuplace" / "bench" / "sjf_variants.json")
    args = parser.parse_args()
    families = args.families.split(",")
    gpus_list = [int(g) for g in args.gpus.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    start = time.perf_counter()
    keys = expected_durations(families, args.fast)
    held_out = pai_jobs(None, False, None, None, cache=home() / "cache")
    print(f"fitted {', '.join(families)} on the earlier 70% and keyed {len(held_out):,} held-out jobs in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    replays = [("fluid", True)] + ([] if args.fluid_only else [("discrete", False)])
    rows: list[dict[str, Any]] = []
    for k in range(args.slices):
        jobs = held_out[k * args.slice_jobs:(k + 1) * args.slice_jobs]
        if not jobs:
            break
        for gpus in gpus_list:
            cluster, _ = cluster_for("big-node", gpus)
            for rate in rates:
                base = same_inputs(jobs, rate, False)
                for replay, fluid in replays:
                    oracle = mean_jct(cluster, base, "sjf-oracle", fluid)
                    sjgg = mean_jct(cluster, base, "sjf-group-gpu", fluid)
                    row: dict[str, Any] = {"jobs_from": k * args.slice_jobs, "jobs": len(jobs), "gpus": gpus,
                                           "rate_per_min": rate, "replay": replay, "oracle_jct_s": oracle,
                                           "sjgg_jct_s": sjgg, "sjgg_above_oracle": sjgg / oracle - 1}
                    for name, by_id in keys.items():
                        row[f"{name}_jct_s"] = value = mean_jct(cluster, keyed(base, by_id), "sjf-model", fluid)
                        row[f"{name}_closer"] = closer(value, oracle, sjgg)
                    rows.append(row)
                    print(f"jobs {row['jobs_from']:>6,}+{len(jobs):,} {gpus:>5,} GPUs {rate:>5.0f}/min {replay:<8} "
                          f"oracle {oracle:>8,.0f} s  SJGG {sjgg:>8,.0f} s ({row['sjgg_above_oracle']:+.1%})  "
                          + "  ".join(f"{name} {row[f'{name}_closer']:+.0%}" for name in keys), flush=True)
    summaries: dict[str, Any] = {}
    for replay, _ in replays:
        for name in keys:
            mine = [r for r in rows if r["replay"] == replay]
            every = summary([r[f"{name}_closer"] for r in mine])
            apart = summary([r[f"{name}_closer"] for r in mine if r["sjgg_above_oracle"] >= args.comparable])
            summaries[f"{replay}.{name}"] = {"all": every, "comparable": apart}
            for label, found in (("all variants", every), (f"SJGG >= {args.comparable:.0%} above", apart)):
                if found["variants"]:
                    print(f"{replay:<8} {name:<6} {label:<22} {found['variants']:>3} variants: closer median "
                          f"{found['median']:+.1%} (quartiles {found['q1']:+.1%} to {found['q3']:+.1%}), "
                          f"{found['share_at_target']:.0%} at {TARGET_CLOSER:.0%} or more")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"families": families, "rows": rows, "summaries": summaries,
                                    "median_closer": {k: v["all"].get("median") for k, v in summaries.items()}},
                                   indent=2, allow_nan=True))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
