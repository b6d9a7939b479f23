"""PNG plots of replays: the JCT distribution per run and GPU allocation over time, each titled with what
was replayed (``subject``: trace, cluster, jobs) and with units on its axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

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
    _legend_or_say(ax, "no job finished in any run")
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
    _legend_or_say(ax, "no run recorded its allocation")
    return save_png(fig, path)


def _legend_or_say(ax: Axes, nothing: str) -> None:
    """The legend of the lines drawn, or, where none was, ``nothing`` written across the panel (an empty panel
    with an empty legend would look like a plotting fault)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, nothing, transform=ax.transAxes, ha="center", va="center", color="grey")


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


def scheduled_runs(report: dict[str, Any], path: Path) -> Path:
    """What each run of ``gpuplace simulate scheduled`` came to (``report``: its scheduled.json): mean wait and
    mean JCT per run, mean wait per queue and run, and the GPU-hours preempted and idle while jobs waited."""
    runs: dict[str, dict[str, Any]] = report["runs"]
    names = list(runs)
    queues = sorted({q for run in runs.values() for q in run["wait_mean_s_by_queue"]},
                    key=lambda q: -report["guaranteed_gpus"].get(q, 0.0))
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.8), gridspec_kw={"width_ratios": [1, 2.2, 1]})
    x, width = np.arange(len(names)), 0.38
    for k, (field, label) in enumerate((("wait_mean_s", "mean wait"), ("jct_mean_s", "mean JCT"))):
        left.bar(x + (k - 0.5) * width, [(runs[n][field] or 0.0) / 3600.0 for n in names], width, label=label)
    left.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    left.set_xlabel("run")
    left.set_ylabel("time, h")
    left.set_title("waits and completion times", fontsize=10)
    left.legend(fontsize=8)
    step = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        waits = runs[name]["wait_mean_s_by_queue"]
        middle.bar(np.arange(len(queues)) + k * step, [waits.get(q, np.nan) / 3600.0 for q in queues], step,
                   label=name)
    middle.set_xticks(np.arange(len(queues)) + step * (len(names) - 1) / 2,
                      [f"{_short(q)}\n({report['guaranteed_gpus'].get(q, 0.0):,.0f} GPUs)" for q in queues],
                      fontsize=7, rotation=30, ha="right")
    middle.set_xlabel("queue (guaranteed GPUs)")
    middle.set_ylabel("mean wait, h")
    middle.set_title("mean wait per queue", fontsize=10)
    middle.legend(fontsize=7)
    for k, (field, label) in enumerate((("preempted_gpu_h", "preempted (work redone)"),
                                        ("idle_gpu_h_while_waiting", "idle while jobs waited"))):
        right.bar(x + (k - 0.5) * width, [runs[n][field] for n in names], width, label=label)
    right.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    right.set_xlabel("run")
    right.set_ylabel("GPU-hours, h")
    right.set_title("GPU-hours lost", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, middle, right):
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{report['jobs']:,} PAI jobs at load x{report['load']:g} on {report['cluster']} "
                 f"({report['gpus']:,.0f} GPUs), {report['estimate']} estimates, {report['placement']} placement",
                 fontsize=11)
    return save_png(fig, path)


def _short(name: str, most: int = 12) -> str:
    """A queue name cut to ``most`` characters (PAI's user and group names are 32-character hashes)."""
    return name if len(name) <= most else name[:most - 1] + "…"
