"""Loading clusters: the machine-list files (PAI v2020 spec, openb v2023 node lists) and the shipped clusters.

Both loaders read with ``placement.model.csv_rows``, check every field and raise ``ClusterSpecError``
naming the 1-based file line, the column and the bad value. Checked: the file exists and is UTF-8
text; each row has the right number of fields; numbers are numbers, finite and not negative; GPU
counts are whole; the GPU type is one of ``placement.model.gpu_types.KNOWN_TYPES``; a GPU type comes
with GPUs and GPUs with a GPU type; machine names are non-empty and unique; there is at least one
machine. Blank lines are skipped.

Shipped clusters (``CLUSTERS``) live under the data dir: ``$GPUPLACE_DATA_DIR`` if set, else the
repository's ``data/`` folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.csv_rows import Row, csv_rows, open_text
from placement.model.errors import ClusterSpecError
from placement.model.gpu_types import CPU_ONLY, KNOWN_TYPES
from placement.model.text_files import not_utf8_error
from placement.model.topology import DEFAULT_RACK_SIZE, DEFAULT_RACKS_PER_DOMAIN, load_topology_yaml

PAI_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
"""Columns of ``pai_machine_spec.csv`` (the file has no header line)."""

OPENB_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""Header of the openb ``openb_node_list_*.csv`` files."""

DATA_DIR_ENV = "GPUPLACE_DATA_DIR"

MachineLoader = Callable[[str | Path], tuple[Machine, ...]]


def _check_type(row: Row, gpu_type: str, gpus: int, type_column: str, gpus_column: str) -> None:
    if gpu_type not in KNOWN_TYPES:
        known = ", ".join(sorted(KNOWN_TYPES))
        raise row.error(type_column, f"unknown GPU type (known: {known})", gpu_type)
    gpus_text = row.fields[gpus_column]
    if gpu_type == CPU_ONLY and gpus > 0:
        raise row.error(gpus_column, f"a CPU-only machine ({type_column} {CPU_ONLY}) has no GPUs", gpus_text)
    if gpu_type != CPU_ONLY and gpus == 0:
        raise row.error(gpus_column, f"{type_column} {gpu_type} needs at least one GPU", gpus_text)


def _collect(path: str | Path, rows: Iterator[Row], name_column: str,
             make: Callable[[Row], Machine]) -> tuple[Machine, ...]:
    """Machines from ``rows`` of the file ``path``: at least one, with non-empty, unique names."""
    first_line: dict[str, int] = {}
    machines: list[Machine] = []
    for row in rows:
        name = row.fields[name_column]
        if not name:
            raise row.error(name_column, "the machine name is empty")
        if name in first_line:
            raise row.error(name_column, f"duplicate machine name (first on line {first_line[name]})", name)
        first_line[name] = row.line
        machines.append(make(row))
    if not machines:  # a cluster of nothing would place no job and report it as "does not fit"
        raise ClusterSpecError(str(path), "the file lists no machines: a cluster needs at least one machine row")
    return tuple(machines)


def _pai_machine(row: Row) -> Machine:
    gpus = row.count("cap_gpu")
    gpu_type = row.fields["gpu_type"]
    _check_type(row, gpu_type, gpus, "gpu_type", "cap_gpu")
    return Machine(row.fields["machine"], gpu_type, gpus, row.amount("cap_cpu"), row.amount("cap_mem"))


def _openb_machine(row: Row) -> Machine:
    gpus = row.count("gpu")
    model = row.fields["model"]
    if not model and gpus > 0:
        raise row.error("model", "a node with GPUs needs a model", model)
    gpu_type = model or CPU_ONLY
    _check_type(row, gpu_type, gpus, "model", "gpu")
    cpu_cores = row.amount("cpu_milli") / 1000.0
    return Machine(row.fields["sn"], gpu_type, gpus, cpu_cores, row.amount("memory_mib") / 1024.0)


def load_pai_machine_spec(path: str | Path) -> tuple[Machine, ...]:
    """Machines of a PAI v2020 ``pai_machine_spec.csv`` (no header; columns ``PAI_COLUMNS``).

    ``cap_cpu`` is cores, ``cap_mem`` GB (taken as GiB), ``cap_gpu`` the GPU count; gpu_type ``CPU``
    marks a CPU-only machine. File order is kept.
    """
    return _collect(path, csv_rows(path, PAI_COLUMNS, False, ClusterSpecError), "machine", _pai_machine)


def load_openb_nodes(path: str | Path) -> tuple[Machine, ...]:
    """Machines of an openb v2023 node list (header ``OPENB_COLUMNS``).

    ``cpu_milli / 1000`` is cores, ``memory_mib / 1024`` GiB, ``gpu`` the GPU count, ``model`` the
    GPU type (empty with 0 GPUs: CPU-only). File order is kept.
    """
    return _collect(path, csv_rows(path, OPENB_COLUMNS, True, ClusterSpecError), "sn", _openb_machine)


def load_machine_file(path: str | Path) -> tuple[Machine, ...]:
    """Machines of either format: a file whose first line is the openb header is openb, else PAI."""
    with open_text(path, ClusterSpecError) as handle:
        try:
            first = handle.readline().strip()
        except UnicodeDecodeError as exc:
            raise not_utf8_error(path, ClusterSpecError, exc) from None
    if first.replace(" ", "") == ",".join(OPENB_COLUMNS):
        return load_openb_nodes(path)
    return load_pai_machine_spec(path)


class ShippedCluster(NamedTuple):
    """A cluster shipped in the data dir: what it is, how to load it, and where it is."""

    description: str
    loader: MachineLoader
    relative_path: str


CLUSTERS = MappingProxyType(
    {
        "pai": ShippedCluster(
            "Alibaba PAI v2020: 1,897 machines, 6,742 GPUs (MISC, P100, T4, V100, V100M32) incl. 83 CPU-only",
            load_pai_machine_spec,
            "pai2020/pai_machine_spec.csv",
        ),
        "openb": ShippedCluster(
            "Alibaba openb v2023, GPU nodes only: 1,213 nodes",
            load_openb_nodes,
            "openb2023/openb_node_list_gpu_node.csv",
        ),
        "openb-all": ShippedCluster(
            "Alibaba openb v2023, all nodes: 1,523 nodes (1,213 with GPUs, 310 CPU-only)",
            load_openb_nodes,
            "openb2023/openb_node_list_all_node.csv",
        ),
    }
)
"""Shipped clusters by name."""


def data_dir() -> Path:
    """The data dir: ``$GPUPLACE_DATA_DIR`` if set, else the repository's ``data/`` folder."""
    configured = os.environ.get(DATA_DIR_ENV)
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "data"


def load_cluster(
    name_or_path: str | Path,
    topology_path: str | Path | None = None,
    rack_size: int = DEFAULT_RACK_SIZE,
    racks_per_domain: int = DEFAULT_RACKS_PER_DOMAIN,
) -> Cluster:
    """A shipped cluster by name (``CLUSTERS``) or a machine file by path (format sniffed).

    The topology comes from the YAML file ``topology_path`` if given, else from the default rule with
    ``rack_size`` and ``racks_per_domain`` (see ``placement.model.topology``). Raises ``ClusterSpecError``
    for an unknown name or a bad machine file, ``TopologyError`` for a bad topology file.
    """
    key = str(name_or_path)
    if isinstance(name_or_path, str) and key in CLUSTERS:
        shipped = CLUSTERS[key]
        name, machines = key, shipped.loader(data_dir() / shipped.relative_path)
    elif Path(name_or_path).is_file():
        name, machines = Path(name_or_path).stem, load_machine_file(name_or_path)
    else:
        known = ", ".join(CLUSTERS)
        raise ClusterSpecError(key, f"neither a known cluster name ({known}) nor an existing file")
    if topology_path is None:
        return build_cluster(name, machines, None, rack_size, racks_per_domain)
    topology = load_topology_yaml(topology_path, (m.name for m in machines))
    return build_cluster(name, machines, topology)
