"""Checking a topology YAML file (format in ``placement.model.topology``), naming the line of each problem.

A syntax error names its line and column too. The checks work on ``yaml.compose`` nodes rather than
loaded Python objects so that every error can name the 1-based line of the node at fault. Scalars
are read as their raw text, so a machine named ``0123`` stays ``"0123"``.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

import yaml

from placement.model.errors import TopologyError

_NULL_TAG = "tag:yaml.org,2002:null"
_SHOWN_UNPLACED = 5
_OPTIONS = frozenset({"rack_size", "racks_per_domain"})


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def compose_topology(text: str, path: str) -> yaml.Node | None:
    """The YAML tree of ``text`` (``None`` if it holds no document); a ``TopologyError`` on a syntax error."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as exc:
        raise _forbidden_character(exc, text, path) from exc
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, path) from exc
    except yaml.YAMLError as exc:
        raise TopologyError(path, f"not valid YAML: {exc}") from exc


def _forbidden_character(exc: yaml.reader.ReaderError, text: str, path: str) -> TopologyError:
    # the reader knows only the character's offset in the text, so its line is counted here
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - text.rfind("\n", 0, exc.position)
    code = exc.character if isinstance(exc.character, int) else ord(exc.character)
    return TopologyError(path, f"not valid YAML at column {column}: unacceptable character #x{code:04x}: {exc.reason}",
                         line)


def _syntax_error(exc: yaml.MarkedYAMLError, path: str) -> TopologyError:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return TopologyError(path, f"not valid YAML: {exc.problem or exc.context}")
    problem = f"not valid YAML at column {mark.column + 1}: {exc.problem or exc.context}"
    return TopologyError(path, problem + _where_it_began(exc, mark), mark.line + 1)


def _where_it_began(exc: yaml.MarkedYAMLError, mark: yaml.Mark) -> str:
    """Where an unfinished construct (a quote, a bracket) began: the parser gives up only at its end."""
    began = exc.context_mark
    if not (exc.problem and exc.context and began) or (began.line, began.column) == (mark.line, mark.column):
        return ""
    return f" ({exc.context} that starts on line {began.line + 1}, column {began.column + 1})"


@dataclass
class _Parser:
    """One pass over the tree; collects pairs and remembers where each name was first seen."""

    path: str
    known_machines: Set[str]
    machine_racks: list[tuple[str, str]] = field(default_factory=list)
    rack_domains: list[tuple[str, str]] = field(default_factory=list)
    machine_lines: dict[str, int] = field(default_factory=dict)
    rack_lines: dict[str, int] = field(default_factory=dict)
    domain_lines: dict[str, int] = field(default_factory=dict)

    def error(self, node: yaml.Node, problem: str) -> TopologyError:
        return TopologyError(self.path, problem, _line(node))

    def mapping(self, node: yaml.Node, what: str, keys: tuple[str, ...]) -> dict[str, yaml.Node]:
        """The values of a mapping that must have exactly ``keys``."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping with keys {', '.join(keys)}")
        values: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in keys:
                hint = " (an option of the default rule, not part of the file)" if key in _OPTIONS else ""
                raise self.error(key_node, f"unknown key {key!r} in {what}{hint}; allowed: {', '.join(keys)}")
            if key in values:
                raise self.error(key_node, f"duplicate key {key!r} in {what}")
            values[key] = value_node
        for key in keys:
            if key not in values:
                raise self.error(node, f"{what} has no {key!r}")
        return values

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{what} must be a list")
        if not node.value:
            raise self.error(node, f"{what} is empty")
        return list(node.value)

    def name(self, node: yaml.Node, what: str, seen: dict[str, int]) -> str:
        """A non-empty scalar name not seen before (``seen`` maps names to their first line)."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{what} must be a plain name, not a list or mapping")
        text = "" if node.tag == _NULL_TAG else str(node.value).strip()
        if not text:
            raise self.error(node, f"{what} is empty")
        if text in seen:
            raise self.error(node, f"{what} {text!r} is listed twice (first on line {seen[text]})")
        seen[text] = _line(node)
        return text

    def document(self, root: yaml.Node | None) -> None:
        if root is None:
            raise TopologyError(self.path, "the file is empty; expected a mapping with a 'domains' list", 1)
        top = self.mapping(root, "the top level", ("domains",))
        for domain_node in self.sequence(top["domains"], "'domains'"):
            self.domain(domain_node)
        self.check_all_placed()

    def domain(self, node: yaml.Node) -> None:
        values = self.mapping(node, "a domain", ("name", "racks"))
        domain = self.name(values["name"], "domain name", self.domain_lines)
        for rack_node in self.sequence(values["racks"], f"'racks' of domain {domain!r}"):
            rack_values = self.mapping(rack_node, "a rack", ("name", "machines"))
            rack = self.name(rack_values["name"], "rack name", self.rack_lines)
            self.rack_domains.append((rack, domain))
            for machine_node in self.sequence(rack_values["machines"], f"'machines' of rack {rack!r}"):
                machine = self.name(machine_node, "machine", self.machine_lines)
                if machine not in self.known_machines:
                    raise self.error(machine_node, f"machine {machine!r} is not in the cluster")
                self.machine_racks.append((machine, rack))

    def check_all_placed(self) -> None:
        unplaced = sorted(self.known_machines - self.machine_lines.keys())
        if unplaced:
            shown = ", ".join(unplaced[:_SHOWN_UNPLACED])
            more = ", ..." if len(unplaced) > _SHOWN_UNPLACED else ""
            problem = f"{len(unplaced)} machine(s) of the cluster are not placed in any rack: {shown}{more}"
            raise TopologyError(self.path, problem)


def parse_topology_nodes(
    root: yaml.Node | None, known_machines: Set[str], path: str
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """``(machine_racks, rack_domains)`` pairs from the composed tree ``root``; ``TopologyError`` if invalid.

    Every machine of ``known_machines`` must be placed exactly once and no other machine may appear.
    """
    parser = _Parser(path, known_machines)
    parser.document(root)
    return tuple(parser.machine_racks), tuple(parser.rack_domains)
