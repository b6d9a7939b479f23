"""``gpuplace performance ...``: the real job-performance profiles and the model fitted on them.

The pandas loaders are imported inside the commands, so the rest of the command line starts fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from service.cli.console import make_console

console = make_console()
app = typer.Typer(help="Job performance (step time, throughput, epoch time, GPU memory) from real measurements.",
                  no_args_is_help=True)

NAMES_SHOWN = 8
"""Names listed per cell before the rest is summed up as "+N more"."""


@app.command("profiles")
def profiles(
    pollux: Annotated[Path | None, typer.Option(help="folder of Pollux <model>_{placements,scalability}.csv")] = None,
    gavel: Annotated[Path | None, typer.Option(help="Gavel simulation_throughputs.json")] = None,
    zeus: Annotated[Path | None, typer.Option(help="folder of Zeus summary_power_<gpu>.csv and summary_train.csv")]
    = None,
    gpumemnet: Annotated[Path | None, typer.Option(help="folder of GPUMemNet mlp_data_step{1,2}.csv")] = None,
) -> None:
    """Load and check the Pollux, Gavel, Zeus and GPUMemNet measurements (the shipped copies unless given)."""
    from training.needs.gpumemnet import load_gpumemnet
    from training.performance.profiles import load_gavel, load_pollux, load_zeus

    placements = load_pollux(pollux)
    solo, pairs = load_gavel(gavel)
    epochs, runs = load_zeus(zeus)
    memory = load_gpumemnet(gpumemnet)
    table = Table("source", "rows", "workloads/models", "GPU types", title="real job-performance profiles")
    table.add_row("pollux (step and sync time)", f"{len(placements):,}", _names(placements["workload"]),
                  "not recorded")
    table.add_row("gavel alone (steps/s)", f"{len(solo):,}", _names(solo["model"]), _names(solo["gpu_type"]))
    table.add_row("gavel pairs on one GPU", f"{len(pairs):,}", _names(pairs["model_a"]), _names(pairs["gpu_type"]))
    table.add_row("zeus epochs (s, W)", f"{len(epochs):,}", _names(epochs["workload"]), _names(epochs["gpu_type"]))
    table.add_row("zeus runs (epochs to target)", f"{len(runs):,}", _names(runs["workload"]), "not recorded")
    table.add_row("gpumemnet (peak MiB, util %)", f"{len(memory):,}", _names(memory["activation"]), "A100 40 GB")
    console.print(table)


def _names(values: Iterable[object]) -> str:
    """Distinct values in first-seen order, at most NAMES_SHOWN of them."""
    distinct = list(dict.fromkeys(str(v) for v in values))
    shown = ", ".join(distinct[:NAMES_SHOWN])
    more = len(distinct) - NAMES_SHOWN
    return f"{len(distinct)}: {shown}" + (f" +{more} more" if more > 0 else "")
