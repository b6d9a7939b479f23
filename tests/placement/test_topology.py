"""Racks and domains: the default rule, distance levels, the YAML file's checks and the round trip."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.model.errors import TopologyError
from placement.model.topology import (
    DEFAULT_DISTANCE_COST,
    Topology,
    default_topology,
    dump_topology_yaml,
    load_topology_yaml,
    parse_topology_yaml,
)


@dataclass(frozen=True)
class M:
    """A stand-in machine: the default rule only needs a name and a GPU type."""

    name: str
    gpu_type: str


# SYNTHETIC: 40 made-up machines of three types.
MACHINES = (
    [M(f"t4-{i:02d}", "T4") for i in range(17)]
    + [M(f"v-{i:02d}", "V100") for i in range(5)]
    + [M(f"cpu-{i:02d}", "CPU") for i in range(18)]
)


def _check_default(machines: list[M], rack_size: int, racks_per_domain: int) -> Topology:
    topology = default_topology(machines, rack_size, racks_per_domain)
    placed = Counter(machine for machine, _ in topology.machine_racks)
    assert placed == Counter(m.name for m in machines)  # every machine exactly once
    type_of = {m.name: m.gpu_type for m in machines}
    for rack in topology.racks:
        members = topology.machines_in_rack(rack)
        assert 1 <= len(members) <= rack_size
        assert len({type_of[m] for m in members}) == 1  # homogeneous
    per_type = Counter(m.gpu_type for m in machines)
    assert len(topology.racks) == sum(math.ceil(n / rack_size) for n in per_type.values())
    assert len(topology.domains) == math.ceil(len(topology.racks) / racks_per_domain)
    racks_in_domain = Counter(topology.domain_of_rack(r) for r in topology.racks)
    assert all(n <= racks_per_domain for n in racks_in_domain.values())
    return topology


@pytest.mark.parametrize(("rack_size", "racks_per_domain"), [(16, 8), (4, 2), (1, 1), (100, 3), (5, 1)])
def test_default_rule(rack_size: int, racks_per_domain: int) -> None:
    _check_default(MACHINES, rack_size, racks_per_domain)


def test_default_rule_is_deterministic_and_named() -> None:
    shuffled = MACHINES[:]
    random.Random(7).shuffle(shuffled)
    topology = default_topology(MACHINES, rack_size=4, racks_per_domain=2)
    assert default_topology(shuffled, rack_size=4, racks_per_domain=2) == topology
    # sorted by (gpu_type, name): CPU first, then T4, then V100
    assert topology.machines_in_rack("rack-0000") == ("cpu-00", "cpu-01", "cpu-02", "cpu-03")
    assert topology.machines_in_rack("rack-0004") == ("cpu-16", "cpu-17")
    assert topology.machines_in_rack("rack-0005") == ("t4-00", "t4-01", "t4-02", "t4-03")
    assert topology.domains[:2] == ("domain-000", "domain-001")
    assert topology.domain_of("cpu-16") == "domain-002"


@pytest.mark.parametrize(("rack_size", "racks_per_domain"), [(0, 8), (16, 0)])
def test_default_rule_rejects_bad_sizes(rack_size: int, racks_per_domain: int) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        default_topology(MACHINES, rack_size, racks_per_domain)


@given(
    machines=st.lists(
        st.tuples(
            st.text(alphabet="abcdef0123456789-", min_size=1, max_size=8),
            st.sampled_from(["CPU", "T4", "P100", "V100M32", "MISC"]),
        ),
        max_size=60,
        unique_by=lambda pair: pair[0],
    ),
    rack_size=st.integers(min_value=1, max_value=20),
    racks_per_domain=st.integers(min_value=1, max_value=10),
)
@settings(max_examples=150, deadline=None)
def test_default_rule_places_every_machine_once(
    machines: list[tuple[str, str]], rack_size: int, racks_per_domain: int
) -> None:
    _check_default([M(name, gpu_type) for name, gpu_type in machines], rack_size, racks_per_domain)


# --- distance levels -----------------------------------------------------------------------------

# SYNTHETIC: two domains; d1 has racks r1 (a, b) and r2 (c); d2 has rack r3 (d).
SMALL = Topology(
    (("a", "r1"), ("b", "r1"), ("c", "r2"), ("d", "r3")), (("r1", "d1"), ("r2", "d1"), ("r3", "d2"))
)


@pytest.mark.parametrize(
    ("a", "b", "level"),
    [("a", "a", 0), ("a", "b", 1), ("b", "a", 1), ("a", "c", 2), ("c", "b", 2), ("a", "d", 3), ("d", "c", 3)],
)
def test_distance_levels(a: str, b: str, level: int) -> None:
    assert SMALL.distance(a, b) == level
    assert DEFAULT_DISTANCE_COST[level] == (0.0, 1.0, 4.0, 40.0)[level]


def test_lookups() -> None:
    assert (SMALL.rack_of("c"), SMALL.domain_of("c"), SMALL.domain_of_rack("r3")) == ("r2", "d1", "d2")
    assert SMALL.racks == ("r1", "r2", "r3") and SMALL.domains == ("d1", "d2")
    with pytest.raises(KeyError):
        SMALL.distance("a", "zz")


def test_topology_is_canonical() -> None:
    scrambled = Topology(
        (("d", "r3"), ("c", "r2"), ("a", "r1"), ("b", "r1")), (("r1", "d1"), ("r3", "d2"), ("r2", "d1"))
    )
    assert scrambled == SMALL
    assert hash(scrambled) == hash(SMALL)


@pytest.mark.parametrize(
    ("machine_racks", "rack_domains", "message"),
    [
        ((("a", "r1"), ("a", "r2")), (("r1", "d"), ("r2", "d")), "machine 'a' appears twice"),
        ((("a", "r1"),), (("r1", "d"), ("r1", "e")), "rack 'r1' appears twice"),
        ((("a", "r1"),), (), "racks without a domain"),
        ((("a", "r1"),), (("r1", "d"), ("r2", "d")), "racks without machines"),
    ],
)
def test_topology_rejects(
    machine_racks: tuple[tuple[str, str], ...], rack_domains: tuple[tuple[str, str], ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Topology(machine_racks, rack_domains)


# --- YAML ----------------------------------------------------------------------------------------

# SYNTHETIC: the documented example format with made-up names.
GOOD = """\
# racks and domains of cluster "small"
domains:
  - name: d1
    racks:
      - name: r1
        machines: [a, b]
      - name: r2
        machines:
          - c
  - name: d2
    racks:
      - name: r3
        machines: [d]
"""
NAMES = ("a", "b", "c", "d")


def test_yaml_example_parses() -> None:
    assert parse_topology_yaml(GOOD, NAMES) == SMALL


def _body(racks_of_d1: str) -> str:
    return f"domains:\n  - name: d1\n    racks:\n{racks_of_d1}"


# SYNTHETIC: each case is a small made-up file with one fault, the expected line and message part.
BAD_YAML = [
    ("domains:\n  - name: d1\n    racks: [\n", 4, "not valid YAML"),
    ("domains:\n  - name: d1\n  racks: []\n", 3, "not valid YAML"),
    ("", 1, "the file is empty"),
    ("- a\n- b\n", 1, "the top level must be a mapping"),
    ("rack_size: 4\ndomains: []\n", 1, "unknown key 'rack_size'"),
    ("# comment\nother: 1\n", 2, "unknown key 'other'"),
    ("domains: {}\n", 1, "'domains' must be a list"),
    ("domains: []\n", 1, "'domains' is empty"),
    ("domains:\n  - name: d1\n", 2, "a domain has no 'racks'"),
    (_body("      - name: r1\n        machines: a\n"), 5, "'machines' of rack 'r1' must be a list"),
    (_body("      - name: r1\n        machines: {a: 1}\n"), 5, "must be a list"),
    (_body("      - name: r1\n        machines:\n          - [a, b]\n"), 6, "machine must be a plain name"),
    (_body("      - name: r1\n        machines: []\n"), 5, "'machines' of rack 'r1' is empty"),
    (_body("      - name:\n        machines: [a, b, c, d]\n"), 4, "rack name is empty"),
    (
        _body("      - name: r1\n        name: r2\n        machines: [a, b, c, d]\n"),
        5,
        "duplicate key 'name'",
    ),
    (
        _body("      - name: r1\n        machines: [a, b]\n      - name: r1\n        machines: [c, d]\n"),
        6,
        "rack name 'r1' is listed twice (first on line 4)",
    ),
    (
        _body("      - name: r1\n        machines: [a, b, c, d]\n") + "  - name: d1\n    racks: []\n",
        6,
        "domain name 'd1' is listed twice (first on line 2)",
    ),
    (
        _body(
            "      - name: r1\n        machines:\n          - a\n          - b\n"
            "          - c\n          - a\n          - d\n"
        ),
        9,
        "machine 'a' is listed twice (first on line 6)",
    ),
    (_body("      - name: r1\n        machines: [a, b, c, d, e]\n"), 5, "machine 'e' is not in the cluster"),
    (
        _body("      - name: r1\n        machines: [a, b]\n"),
        None,
        "2 machine(s) of the cluster are not placed",
    ),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_YAML)
def test_bad_yaml(text: str, line: int | None, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology_yaml(text, NAMES, path="topo.yaml")
    assert info.value.line == line, str(info.value)
    assert message in info.value.problem
    where = "topo.yaml" if line is None else f"topo.yaml, line {line}"
    assert str(info.value).startswith(f"{where}: ")


def test_unplaced_machines_listed_with_count() -> None:
    names = [f"m{i:02d}" for i in range(12)]
    with pytest.raises(TopologyError) as info:
        parse_topology_yaml(_body("      - name: r1\n        machines: [m00]\n"), names)
    assert "11 machine(s)" in info.value.problem and "m01, m02, m03, m04, m05, ..." in info.value.problem


def test_load_file_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(GOOD)
    assert load_topology_yaml(path, NAMES) == SMALL
    with pytest.raises(TopologyError, match="file not found"):
        load_topology_yaml(tmp_path / "nope.yaml", NAMES)


@pytest.mark.parametrize(
    "topology",
    [
        SMALL,
        default_topology(MACHINES, 4, 2),
        default_topology(MACHINES),
        default_topology([M("0123", "CPU"), M("yes", "T4")]),
    ],
)
def test_round_trip(topology: Topology, tmp_path: Path) -> None:
    text = dump_topology_yaml(topology, cluster_name="small")
    assert text.startswith('# racks and domains of cluster "small"\n')
    path = tmp_path / "topology.yaml"
    path.write_text(text)
    assert load_topology_yaml(path, topology.machines) == topology


def test_round_trip_of_the_real_pai_cluster() -> None:
    from placement.model.cluster_io import load_cluster

    cluster = load_cluster("pai")
    assert (len(cluster.topology.racks), len(cluster.topology.domains)) == (122, 16)
    text = dump_topology_yaml(cluster.topology, cluster_name="pai")
    assert parse_topology_yaml(text, cluster.index) == cluster.topology
