"""PNG plots of replays: the JCT distribution per run and GPU allocation over time, each titled with what
was replayed (``subject``: trace, cluster, jobs) and with units on its axes."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from placement.sim.engine import SimResult
from training.png import save_png


def jct_cdf(results: dict[str, SimResult], path: Path, subject: str = "replay") -> Path:
    """Empirical CDF of job completion time (log scale), one line per run."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, result in results.items():
        jct = np.sort([r.end_s - r.submit_s for r in result.records if r.end_s is not None])
        if len(jct):
            ax.plot(np.maximum(jct, 1.0), np.arange(1, len(jct) + 1) / len(jct), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time, s (log scale)")
    ax.set_ylabel("share of jobs completed within (fraction)")
    ax.set_title(f"{subject}: job completion time, cumulative", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def allocation_over_time(results: dict[str, SimResult], path: Path, subject: str = "replay") -> Path:
    """Allocated share of the cluster's GPUs over time, one line per run."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, result in results.items():
        if result.samples and result.total_gpus:
            t = np.array([s[0] for s in result.samples]) / 3600.0
            allocated = np.array([s[1] for s in result.samples]) / result.total_gpus
            ax.step(t, allocated, where="post", label=name, linewidth=0.8)
    ax.set_xlabel("time since the first arrival, h")
    ax.set_ylabel("allocated share of GPUs (fraction)")
    ax.set_title(f"{subject}: GPU allocation over time", fontsize=10)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def jct_by_runtime(table: dict[str, dict[str, float]], path: Path, title: str) -> Path:
    """Mean JCT per placement policy, one bar per runtime (``table[policy][runtime]``, seconds)."""
    policies = list(table)
    runtimes = sorted({r for row in table.values() for r in row})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(len(runtimes), 1)
    for k, runtime in enumerate(runtimes):
        values = [table[p].get(runtime, np.nan) / 3600.0 for p in policies]
        ax.bar(np.arange(len(policies)) + k * width, values, width, label=f"{runtime} runtime")
    ax.set_xticks(np.arange(len(policies)) + width * (len(runtimes) - 1) / 2, policies)
    ax.set_xlabel("placement policy")
    ax.set_ylabel("mean job completion time, h")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save_png(fig, path)
