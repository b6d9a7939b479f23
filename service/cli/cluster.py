"""``gpuplace cluster ...``: describe a cluster and its topology.

The cluster model (numpy) is loaded inside the commands, so that the command line starts fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from placement import DEFAULT_RACK_SIZE, DEFAULT_RACKS_PER_DOMAIN
from service.cli.console import make_console

if TYPE_CHECKING:
    from placement import Cluster

app = typer.Typer(help="Clusters: machines, GPUs, racks and domains.", no_args_is_help=True)
console = make_console()

SHIPPED_CLUSTERS = ("pai", "openb", "openb-all")
"""``placement.CLUSTERS``, which loads the cluster model: named here for the help text."""
ClusterArg = Annotated[str, typer.Argument(help=f"{', '.join(SHIPPED_CLUSTERS)}, or a machine spec file")]
TopologyOpt = Annotated[Path | None, typer.Option(help="YAML topology file (default: derived rule)")]
RackSizeOpt = Annotated[int, typer.Option(min=1, help="machines per rack for the derived topology")]
RacksPerDomainOpt = Annotated[int, typer.Option(min=1, help="racks per domain for the derived topology")]


@app.command("describe")
def describe(cluster: ClusterArg, topology: TopologyOpt = None, rack_size: RackSizeOpt = DEFAULT_RACK_SIZE,
             racks_per_domain: RacksPerDomainOpt = DEFAULT_RACKS_PER_DOMAIN) -> None:
    """Machines, GPUs per type, racks and domains."""
    from placement import load_cluster

    console.print(cluster_table([load_cluster(cluster, topology, rack_size, racks_per_domain)]))


@app.command("topology")
def topology_yaml(cluster: ClusterArg, rack_size: RackSizeOpt = DEFAULT_RACK_SIZE,
                  racks_per_domain: RacksPerDomainOpt = DEFAULT_RACKS_PER_DOMAIN) -> None:
    """Print the derived topology as YAML, a starting point for an edited topology file."""
    from placement import dump_topology_yaml, load_cluster

    loaded = load_cluster(cluster, None, rack_size, racks_per_domain)
    typer.echo(dump_topology_yaml(loaded.topology, loaded.name), nl=False)


def cluster_table(clusters: list[str] | list[Cluster]) -> Table:
    """One row per GPU type and cluster: machines, GPUs, GPU memory, CPU, memory; racks and domains."""
    from placement import load_cluster

    table = Table("cluster", "GPU", "machines", "GPUs", "GiB/GPU", "cores", "mem GiB", "racks", "domains",
                  title="clusters (GiB/GPU: docs of placement/model/gpu_types.py)")
    for item in clusters:
        cluster = load_cluster(item) if isinstance(item, str) else item
        by_type: dict[str, list[int]] = {}
        for index, machine in enumerate(cluster.machines):
            by_type.setdefault(machine.gpu_type, []).append(index)
        racks = {t: {cluster.topology.rack_of(cluster.machines[i].name) for i in idx} for t, idx in by_type.items()}
        for gpu_type, idx in sorted(by_type.items()):
            group = [cluster.machines[i] for i in idx]
            table.add_row(cluster.name, gpu_type, f"{len(group):,}", f"{sum(m.gpus for m in group):,}",
                          f"{group[0].gpu_mem_gib:g}", f"{sum(m.cpu_cores for m in group):,.0f}",
                          f"{sum(m.mem_gib for m in group):,.0f}", f"{len(racks[gpu_type])}", "")
        table.add_row(cluster.name, "[bold]all[/]", f"{len(cluster):,}", f"{cluster.total_gpus:,}", "",
                      f"{sum(m.cpu_cores for m in cluster.machines):,.0f}",
                      f"{sum(m.mem_gib for m in cluster.machines):,.0f}", f"{len(cluster.topology.racks)}",
                      f"{len(cluster.topology.domains)}", end_section=True)
    return table
