"""``gpuplace evaluate``: baselines and models on a time-ordered holdout of a real trace.

The ML stack is imported inside the commands, so that the rest of the command line starts fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from service.console import make_console
from service.workdir import home
from training.targets import TARGETS

console = make_console()


def evaluate(
    source: Annotated[str, typer.Option(help=f"one of {', '.join(TARGETS)}")] = "pai2020-jobs",
    target: Annotated[str, typer.Option(help="duration, bandwidth, ... (what the source has labels for)")] = "duration",
    out: Annotated[Path | None, typer.Option(help="folder for report.json and plots")] = None,
    seed: Annotated[int, typer.Option(help="seed of every stochastic part")] = 0,
    test_share: Annotated[float, typer.Option(min=0.05, max=0.9, help="later share of jobs held out")] = 0.3,
) -> None:
    """Fit baselines and models on earlier jobs, score them on later ones; write JSON and PNG plots."""
    from training.report import run_report  # imports the ML stack: only when a command needs it

    folder = out or home() / "reports" / f"{source}-{target}"
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("loading and building features", total=None)

        def step(name: str) -> None:
            progress.update(task, description=f"fitting {name}")

        report = run_report(source, target, folder, seed=seed, test_share=test_share, progress=step)
    console.print(estimator_table(report))
    console.print(f"report and plots: {folder}")


def estimator_table(report: dict[str, Any]) -> Table:
    unit = report["unit"]
    table = Table("estimator", f"MAE ({unit})", f"MedAE ({unit})", "MALE", "P90 coverage", "MALE by depth",
                  title=f"{report['source']} {report['target']}: {report['split']['test_rows']:,} later jobs held out")
    for name, e in report["estimators"].items():
        depth = "  ".join(f"{k}:{v['male']:.2f}" for k, v in e["by_depth"].items() if v["male"] is not None)
        coverage = "-" if e["p90_coverage"] is None else f"{e['p90_coverage']:.3f}"
        table.add_row(name, f"{e['mae']:,.1f}", f"{e['medae']:,.1f}", f"{e['male']:.4f}", coverage, depth)
    for name, e in report["reference_in_sample"].items():
        table.add_row(f"[dim]{name} (in-sample reference)[/]", f"{e['mae']:,.1f}", f"{e['medae']:,.1f}",
                      f"{e['male']:.4f}", "-", "")
    return table
