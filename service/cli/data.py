"""``gpuplace data ...``: list, describe and ingest trace sources.

The readers (pandas, pyarrow) are imported inside the commands, so that the command line starts fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from service.cli.console import make_console
from service.workdir import tables_dir

app = typer.Typer(help="Trace sources and the canonical job table.", no_args_is_help=True)
console = make_console()


@app.command("list")
def list_sources() -> None:
    """List the trace sources gpuplace reads and where their shipped copies are."""
    from training.ingest.sources import SOURCES

    table = Table("source", "description", "shipped copy (under data/)")
    for source in SOURCES.values():
        table.add_row(source.name, source.description, source.shipped or "not shipped: give --path")
    console.print(table)
    console.print("Licences and citations: data/README.md")


@app.command("describe")
def describe(
    source: Annotated[str, typer.Argument(help="source name, see `gpuplace data list`")],
    path: Annotated[Path | None, typer.Option(help="read this file/folder instead of the shipped copy")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Rows, time span and the share of missing values per canonical column."""
    from training.ingest.describe import human_duration, summarise
    from training.ingest.sources import get_source

    frame = get_source(source).load(path)
    summary = summarise(frame)
    if as_json:
        typer.echo(json.dumps({"source": source, **summary.as_dict()}, indent=2))
        return
    console.print(f"[bold]{source}[/]: {summary.rows:,} rows, {summary.jobs:,} jobs, "
                  f"submissions over {human_duration(summary.span_s)}")
    console.print("status: " + ", ".join(f"{k} {v:,}" for k, v in summary.status_counts.items()))
    table = Table("column", "missing", title="missing share per canonical column")
    for column, share in summary.missing_share.items():
        table.add_row(column, f"{share:.1%}")
    console.print(table)


@app.command("ingest")
def ingest(
    sources: Annotated[list[str], typer.Argument(help="source names, or 'all' for every shipped source")],
    out: Annotated[Path | None, typer.Option(help="folder for the Parquet tables")] = None,
    path: Annotated[Path | None, typer.Option(help="read this file/folder (one source only)")] = None,
) -> None:
    """Convert sources into canonical Parquet tables (all are written, or none)."""
    from training.ingest.sources import SOURCES, get_source
    from training.ingest.tables import write_tables

    names = [s.name for s in SOURCES.values() if s.shipped] if sources == ["all"] else sources
    if path is not None and len(names) != 1:
        raise typer.BadParameter("--path goes with exactly one source")
    frames = {name: get_source(name).load(path) for name in names}
    written = write_tables(frames, out or tables_dir())
    for file, (name, frame) in zip(written, frames.items(), strict=True):
        console.print(f"{name}: {len(frame):,} rows -> {file}")
