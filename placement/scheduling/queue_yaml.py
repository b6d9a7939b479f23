"""Reading a queue configuration file (YAML, the shape of ``placement.scheduling.queue_config``) with the
line of every field, so that an error names the line a person must fix.

The file is composed into YAML nodes (the topology reader's syntax errors, with line and column), turned
into plain data while noting each field's line, then checked by ``queues_from_dict``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from placement.model.cluster import Cluster
from placement.model.errors import TopologyError
from placement.model.topology_yaml import compose_topology
from placement.scheduling.errors import QueueConfigError
from placement.scheduling.queue_config import queues_from_dict
from placement.scheduling.queues import QueueSet


def parse_queues_yaml(text: str, cluster: Cluster, path: str = "queues.yaml") -> QueueSet:
    """The checked queues of the YAML ``text``; ``QueueConfigError`` naming ``path``, line and field."""
    try:
        root = compose_topology(text, path)  # the YAML syntax errors, located; nothing topology-specific
    except TopologyError as exc:
        raise QueueConfigError(exc.path, exc.problem, exc.line) from exc
    if root is None:
        raise QueueConfigError(path, "the file is empty; expected a mapping with a 'queues' list", 1)
    lines: dict[str, int] = {}
    data = _plain(root, "", lines, path)
    return queues_from_dict(data, cluster, path, lines)


def load_queues(path: str | Path, cluster: Cluster) -> QueueSet:
    """The checked queues of the file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise QueueConfigError(str(path), f"cannot read the file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise QueueConfigError(str(path), f"not UTF-8 text (byte {exc.start})") from exc
    return parse_queues_yaml(text, cluster, str(path))


def _plain(node: yaml.Node, at: str, lines: dict[str, int], path: str) -> Any:
    """Plain data of ``node``; ``lines`` gets the line of each field by its path by position."""
    lines[at] = int(node.start_mark.line) + 1
    if isinstance(node, yaml.MappingNode):
        values: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _plain(key_node, "", {}, path)
            if not isinstance(key, str | int | float) or isinstance(key, bool):
                raise QueueConfigError(path, "a key must be a plain name", int(key_node.start_mark.line) + 1)
            if key in values:
                raise QueueConfigError(path, f"duplicate key {key!r}", int(key_node.start_mark.line) + 1, at or None)
            values[key] = _plain(value_node, f"{at}.{key}" if at else str(key), lines, path)
        return values
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, f"{at}[{i}]", lines, path) for i, item in enumerate(node.value)]
    try:
        return yaml.constructor.SafeConstructor().construct_object(node)
    except yaml.constructor.ConstructorError as exc:
        raise QueueConfigError(path, f"not a value: {exc.problem}", lines[at], at or None) from exc
