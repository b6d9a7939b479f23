"""Racks and failure/network domains of a cluster: the model, the default rule, and the YAML file.

A topology puts every machine in exactly one rack and every rack in exactly one domain.
``Topology.distance(a, b)`` is a *level*: 0 same machine, 1 same rack, 2 same domain, 3 across
domains. What a level costs is a placement policy's choice; ``DEFAULT_DISTANCE_COST`` is the usual
0/1/4/40 table.

Default rule (``default_topology``), used when no file is given; deterministic:

1. sort the machines by ``(gpu_type, name)``;
2. cut each GPU type's machines, in that order, into racks of ``rack_size`` machines (default 16;
   the last rack of a type may be smaller), so racks are homogeneous in GPU type, as real racks
   usually are;
3. cut all racks, in that order, into domains of ``racks_per_domain`` racks (default 8).

Racks are named ``rack-0000``, ``rack-0001``, ...; domains ``domain-000``, ``domain-001``, ...

YAML file format (``load_topology_yaml``; ``dump_topology_yaml`` writes it, so start from the
default and edit it). The file is pure data: ``rack_size`` and ``racks_per_domain`` are options of
the default rule, not keys of the file::

    # racks and domains of cluster "pai"
    domains:
      - name: dom-a
        racks:
          - name: rack-01
            machines: [7399a758eb02bae1a3621236, 75c536d5ba60528b3ef3ae40]
          - name: rack-02
            machines:
              - 6265a99de1a50cc6f1b03602

Domain and rack names are non-empty and unique (rack names across the whole file); each domain
has at least one rack and each rack at least one machine; every machine of the cluster is listed
exactly once. Any violation raises ``TopologyError`` naming the 1-based line, and for a YAML syntax
error the column too (the line-aware checks live in ``placement.model.topology_yaml``). See also
``docs/topology.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import yaml

from placement.model.errors import TopologyError
from placement.model.text_files import not_utf8_error, refuse_non_text
from placement.model.topology_yaml import compose_topology, parse_topology_nodes

DEFAULT_DISTANCE_COST: tuple[float, float, float, float] = (0.0, 1.0, 4.0, 40.0)
"""Cost per distance level: same machine, same rack, same domain, across domains."""

DEFAULT_RACK_SIZE = 16
"""Machines per rack in the default rule."""

DEFAULT_RACKS_PER_DOMAIN = 8
"""Racks per domain in the default rule."""

SAME_MACHINE, SAME_RACK, SAME_DOMAIN, CROSS_DOMAIN = 0, 1, 2, 3
"""The distance levels ``Topology.distance`` returns."""


class Placeable(Protocol):
    """What the default rule needs of a machine (``placement.model.cluster.Machine`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def gpu_type(self) -> str: ...


@dataclass(frozen=True)
class Topology:
    """Machine -> rack and rack -> domain, in a canonical order (domain, then rack, then listing).

    ``machine_racks`` holds ``(machine, rack)`` pairs and ``rack_domains`` ``(rack, domain)`` pairs.
    The constructor checks that every machine appears once, every rack once, every machine's rack
    has a domain and every rack a machine. It then orders both tuples by domain, rack and first
    appearance, so two topologies with the same racks and domains compare equal.
    """

    machine_racks: tuple[tuple[str, str], ...]
    rack_domains: tuple[tuple[str, str], ...]
    _rack_of: Mapping[str, str] = field(init=False, repr=False, compare=False, hash=False)
    _domain_of_rack: Mapping[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        rack_of = _unique_mapping(self.machine_racks, "machine")
        domain_of_rack = _unique_mapping(self.rack_domains, "rack")
        if missing := sorted(set(rack_of.values()) - domain_of_rack.keys()):
            raise ValueError(f"racks without a domain: {missing[:5]}")
        if empty := sorted(domain_of_rack.keys() - set(rack_of.values())):
            raise ValueError(f"racks without machines: {empty[:5]}")
        domain_order = {domain: i for i, domain in enumerate(dict.fromkeys(domain_of_rack.values()))}
        racks = sorted(domain_of_rack, key=lambda rack: domain_order[domain_of_rack[rack]])
        rack_order = {rack: i for i, rack in enumerate(racks)}
        machines = sorted(rack_of, key=lambda machine: rack_order[rack_of[machine]])  # stable sort
        object.__setattr__(self, "rack_domains", tuple((rack, domain_of_rack[rack]) for rack in racks))
        object.__setattr__(self, "machine_racks", tuple((m, rack_of[m]) for m in machines))
        object.__setattr__(self, "_rack_of", MappingProxyType({m: rack_of[m] for m in machines}))
        object.__setattr__(self, "_domain_of_rack", MappingProxyType(dict(self.rack_domains)))

    @property
    def machines(self) -> tuple[str, ...]:
        """Machine names, in canonical order."""
        return tuple(self._rack_of)

    @property
    def racks(self) -> tuple[str, ...]:
        """Rack names, in canonical order."""
        return tuple(self._domain_of_rack)

    @property
    def domains(self) -> tuple[str, ...]:
        """Domain names, in canonical order."""
        return tuple(dict.fromkeys(self._domain_of_rack.values()))

    def rack_of(self, machine: str) -> str:
        """The rack of ``machine``; ``KeyError`` for a machine not in the topology."""
        return self._rack_of[machine]

    def domain_of(self, machine: str) -> str:
        """The domain of ``machine``; ``KeyError`` for a machine not in the topology."""
        return self._domain_of_rack[self._rack_of[machine]]

    def domain_of_rack(self, rack: str) -> str:
        """The domain of ``rack``; ``KeyError`` for an unknown rack."""
        return self._domain_of_rack[rack]

    def machines_in_rack(self, rack: str) -> tuple[str, ...]:
        """The machines of ``rack`` in canonical order (empty for an unknown rack)."""
        return tuple(m for m, r in self.machine_racks if r == rack)

    def distance(self, a: str, b: str) -> int:
        """Distance level between machines ``a`` and ``b``: 0 same machine, 1 same rack, 2 same domain,
        3 across domains. ``KeyError`` for a machine not in the topology."""
        rack_a, rack_b = self._rack_of[a], self._rack_of[b]
        if a == b:
            return SAME_MACHINE
        if rack_a == rack_b:
            return SAME_RACK
        if self._domain_of_rack[rack_a] == self._domain_of_rack[rack_b]:
            return SAME_DOMAIN
        return CROSS_DOMAIN


def _unique_mapping(pairs: Iterable[tuple[str, str]], what: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for key, value in pairs:
        if not key or not value:
            raise ValueError(f"empty name in {what} pair {(key, value)!r}")
        if key in mapping:
            raise ValueError(f"{what} {key!r} appears twice")
        mapping[key] = value
    return mapping


def default_topology(
    machines: Iterable[Placeable],
    rack_size: int = DEFAULT_RACK_SIZE,
    racks_per_domain: int = DEFAULT_RACKS_PER_DOMAIN,
) -> Topology:
    """The default topology of ``machines`` (rule in the module docstring)."""
    if rack_size < 1 or racks_per_domain < 1:
        raise ValueError(f"rack_size and racks_per_domain must be >= 1 (got {rack_size}, {racks_per_domain})")
    ordered = sorted(machines, key=lambda m: (m.gpu_type, m.name))
    racks: list[list[str]] = []
    for _, of_type in groupby(ordered, key=lambda m: m.gpu_type):
        names = [m.name for m in of_type]
        racks.extend(names[i : i + rack_size] for i in range(0, len(names), rack_size))
    rack_names = [f"rack-{i:04d}" for i in range(len(racks))]
    machine_racks = tuple((m, rack_names[i]) for i, rack in enumerate(racks) for m in rack)
    rack_domains = tuple((rack, f"domain-{i // racks_per_domain:03d}") for i, rack in enumerate(rack_names))
    return Topology(machine_racks, rack_domains)


def parse_topology_yaml(text: str, machine_names: Iterable[str], path: str = "<string>") -> Topology:
    """Parse topology YAML ``text`` for a cluster of ``machine_names``; ``TopologyError`` if invalid.

    ``path`` only labels the errors.
    """
    root = compose_topology(text, path)
    machine_racks, rack_domains = parse_topology_nodes(root, frozenset(machine_names), path)
    return Topology(machine_racks, rack_domains)


def load_topology_yaml(path: str | Path, machine_names: Iterable[str]) -> Topology:
    """Load the topology YAML file at ``path`` for a cluster of ``machine_names``.

    Raises ``TopologyError`` for a missing or invalid file (see the module docstring for the format).
    """
    refuse_non_text(path, TopologyError)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TopologyError(str(path), "file not found") from exc
    except UnicodeDecodeError as exc:  # binary data, or text saved as UTF-16
        raise not_utf8_error(path, TopologyError, exc) from exc
    except OSError as exc:
        raise TopologyError(str(path), f"cannot read the file: {exc}") from exc
    return parse_topology_yaml(text, machine_names, str(path))


class _IndentedDumper(yaml.SafeDumper):
    """Indents list items under their key, as in the documented format."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump_topology_yaml(topology: Topology, cluster_name: str | None = None) -> str:
    """``topology`` as YAML in the file format, one machine per line; loads back equal."""
    rack_machines: dict[str, list[str]] = {}
    for machine, rack in topology.machine_racks:
        rack_machines.setdefault(rack, []).append(machine)
    domains: dict[str, list[dict[str, object]]] = {}
    for rack, domain in topology.rack_domains:
        domains.setdefault(domain, []).append({"name": rack, "machines": rack_machines[rack]})
    document = {"domains": [{"name": name, "racks": racks} for name, racks in domains.items()]}
    title = f'# racks and domains of cluster "{cluster_name}"\n' if cluster_name else "# racks and domains\n"
    body = yaml.dump(document, Dumper=_IndentedDumper, sort_keys=False, allow_unicode=True)
    return title + body
