"""What ``gpuplace simulate fill`` shows: the table of unallocated GPU capacity per policy, the JSON object
of ``--json`` and the PNG of the curves (mean over seeds, shaded from the lowest to the highest seed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from placement import FillCurve, FillSummary

PLOT_STEP_PCT = 0.5
"""The curves are drawn at every half percent of arrived GPU requests."""
SHOWN_PCT = 50.0
"""The plot shows the last this many points of arrived GPU requests (%)."""


def fill_table(summaries: Sequence[FillSummary], title: str) -> Table:
    """Per policy: unallocated GPU % (mean ± standard deviation over seeds) at each reported point, and p99 ms."""
    points = summaries[0].arrived_pct if summaries else []
    table = Table("policy", *(f"unallocated % at {p}% arrived" for p in points), "decision p99 ms", title=title)
    for s in summaries:
        cells = (f"{m:.2f} ± {sd:.2f}" for m, sd in zip(s.unallocated_pct, s.unallocated_std, strict=True))
        table.add_row(s.policy, *cells, f"{s.decision_p99_ms:.2f}")
    return table


def fill_json(summaries: Sequence[FillSummary]) -> dict[str, Any]:
    """``{"policies": {NAME: {"arrived_pct": [...], "unallocated_pct": [...], "decision_p99_ms": x}}}``."""
    return {"policies": {s.policy: {"arrived_pct": s.arrived_pct,
                                    "unallocated_pct": [round(v, 4) for v in s.unallocated_pct],
                                    "decision_p99_ms": round(s.decision_p99_ms, 4)} for s in summaries}}


def plot_fill(curves: Mapping[str, Sequence[FillCurve]], to: float, path: Path, title: str) -> Path:
    """Unallocated GPU % against arrived GPU %, one line per policy, written to ``path``."""
    import matplotlib.pyplot as plt

    from training.png import save_png

    start = max(0.0, to * 100 - SHOWN_PCT)  # where the policies part ways: the cluster filling up
    grid = np.arange(start, to * 100 + 1e-9, PLOT_STEP_PCT)
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy, runs in curves.items():
        values = np.array([c.unallocated_pct_at(grid) for c in runs])
        line = ax.plot(grid, values.mean(axis=0), label=f"{policy} ({len(runs)} seeds)")[0]
        ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("arrived GPU requests, % of cluster GPUs")
    ax.set_ylabel("unallocated GPU capacity, %")
    ax.set_xlim(start, to * 100)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return save_png(fig, path)
