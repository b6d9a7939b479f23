"""Queue configuration: a good file loads; every bad one is an error naming file, line, field and value.

The clusters are SYNTHETIC: 16 V100 and 8 T4 GPUs (``mixed_cluster``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from placement.scheduling.errors import QueueConfigError
from placement.scheduling.queue_config import queues_from_dict, queues_to_dict
from placement.scheduling.queue_yaml import load_queues, parse_queues_yaml
from tests.placement.scheduling_cases import mixed_cluster

CLUSTER = mixed_cluster(V100=16, T4=8)  # synthetic: 24 GPUs, 3 machines x 64 cores x 512 GiB

GOOD = """\
cohorts:
  - name: research
  - name: vision
    parent: research
queues:
  - name: team-a
    cohort: vision
    order: sjf
    quota: {gpus: 8, gpus_by_type: {V100: 4}, cpu_cores: 64, mem_gib: 512}
    borrowing_limit: {gpus: 4}
  - name: team-b
    cohort: research
    quota: {gpus: 8}
  - name: batch
    order: priority
    quota: {gpus: 0}
"""


def test_a_good_file_loads_with_its_cohort_tree() -> None:
    queues = parse_queues_yaml(GOOD, CLUSTER)
    a = queues["team-a"]
    assert dict(a.guarantee) == {"gpus": 8.0, "gpus:V100": 4.0, "cpu_cores": 64.0, "mem_gib": 512.0}
    assert a.limit("gpus") == 12.0  # 8 guaranteed + 4 borrowed
    assert a.limit("cpu_cores") == math.inf  # a cohort member without a limit borrows what is idle
    assert a.limit("gpus:T4") == math.inf  # not governed
    assert queues["batch"].limit("gpus") == 0.0  # no cohort: never beyond its guarantee
    assert queues.members("team-a") == ("team-a", "team-b")  # vision is under research
    assert queues.members("batch") == ("batch",)
    assert a.order == "sjf"


def test_the_dict_form_reads_back_what_it_shows() -> None:
    queues = parse_queues_yaml(GOOD, CLUSTER)
    assert queues_from_dict(queues_to_dict(queues), CLUSTER) == queues


def test_a_file_loads_by_path(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(GOOD)
    assert set(load_queues(path, CLUSTER).queues) == {"team-a", "team-b", "batch"}
    with pytest.raises(QueueConfigError) as missing:
        load_queues(tmp_path / "nope.yaml", CLUSTER)
    assert "nope.yaml" in str(missing.value)


QUEUE_A = "queues:\n  - name: a\n"
BAD = [
    # (file, line, field, value, words in the problem)
    (QUEUE_A + "    quota: {gpus: 30}\n", 3, "queues[a].quota.gpus", 30.0, "above the cluster's capacity"),
    (QUEUE_A + "    quota: {gpus: 16}\n  - name: b\n    quota: {gpus: 10}\n", 5, "queues[b].quota.gpus", 10.0,
     "guarantees to 26"),  # 16 + 10 > 24
    (QUEUE_A + "    quota: {gpus_by_type: {V100: 17}}\n", 3, "queues[a].quota.gpus_by_type.V100", 17.0, "capacity"),
    (QUEUE_A + "    quota: {gpus_by_type: {A100: 2}}\n", 3, "queues[a].quota.gpus_by_type.A100", "A100",
     "no GPUs of this type"),
    (QUEUE_A + "    quota: {gpus: -1}\n", 3, "queues[a].quota.gpus", -1, ">= 0"),
    (QUEUE_A + "    quota: {gpus: .nan}\n", 3, "queues[a].quota.gpus", None, "finite"),
    (QUEUE_A + "    quota: {cpu_cores: .inf}\n", 3, "queues[a].quota.cpu_cores", math.inf, "finite"),
    (QUEUE_A + "    quota: {gpus: true}\n", 3, "queues[a].quota.gpus", True, "must be a number"),
    (QUEUE_A + "    quota: {gpus: many}\n", 3, "queues[a].quota.gpus", "many", "must be a number"),
    (QUEUE_A + "    quota: {gpus: 1}\n    cohort: nowhere\n", 4, "queues[a].cohort", "nowhere", "unknown cohort"),
    ("cohorts:\n  - {name: x, parent: y}\n  - {name: y, parent: x}\n" + QUEUE_A + "    quota: {gpus: 1}\n",
     3, "cohorts[y].parent", "x", "cycle"),
    ("cohorts:\n  - {name: x, parent: z}\n" + QUEUE_A + "    quota: {gpus: 1}\n", 2, "cohorts[x].parent", "z",
     "unknown cohort"),
    (QUEUE_A + "    quota: {gpus: 1}\n  - name: a\n    quota: {gpus: 1}\n", 4, "queues[a].name", "a", "twice"),
    (QUEUE_A + "    quota: {gpus: 1}\n    order: lifo\n", 4, "queues[a].order", "lifo", "unknown order"),
    (QUEUE_A + "    quota: {gpus: 1}\n    borrowing_limit: {gpus: 2}\n", 4, "queues[a].borrowing_limit", None,
     "without a cohort"),
    ("cohorts: [{name: c}]\n" + QUEUE_A + "    cohort: c\n    quota: {gpus: 1}\n    borrowing_limit: {mem_gib: 2}\n",
     6, "queues[a].borrowing_limit.mem_gib", None, "does not name"),
    (QUEUE_A + "    quotas: {gpus: 1}\n", 3, "queues[a].quotas", "quotas", "unknown key"),
    (QUEUE_A, 2, "queues[a]", None, "no 'quota'"),
    ("queues: []\n", 1, "queues", "list", "non-empty list"),
]


@pytest.mark.parametrize(("text", "line", "field", "value", "words"), BAD)
def test_a_bad_file_names_line_field_and_value(text: str, line: int, field: str, value: object, words: str) -> None:
    with pytest.raises(QueueConfigError) as caught:
        parse_queues_yaml(text, CLUSTER, "teams.yaml")
    error = caught.value
    assert (error.path, error.line, error.field) == ("teams.yaml", line, field), str(error)
    if value is not None:
        assert error.value == value
    assert words in error.problem
    assert str(error).startswith(f"teams.yaml, line {line}, field '{field}': ")


def test_a_nan_is_named_as_a_number() -> None:
    with pytest.raises(QueueConfigError) as caught:
        parse_queues_yaml(QUEUE_A + "    quota: {gpus: .nan}\n", CLUSTER)
    assert isinstance(caught.value.value, float) and math.isnan(caught.value.value)


def test_a_yaml_syntax_error_names_its_line() -> None:
    with pytest.raises(QueueConfigError) as caught:
        parse_queues_yaml(QUEUE_A + "    quota: {gpus: 1\n", CLUSTER, "teams.yaml")
    assert caught.value.line is not None and caught.value.line >= 3
    assert "not valid YAML" in caught.value.problem


def test_a_request_body_error_names_the_field_without_a_line() -> None:
    body = {"queues": [{"name": "a", "quota": {"gpus": 4, "gpus_by_type": {"T4": 9}}}]}  # 9 > 8 T4
    with pytest.raises(QueueConfigError) as caught:
        queues_from_dict(body, CLUSTER)
    error = caught.value
    assert (error.path, error.line, error.field) == ("queues", None, "queues[a].quota.gpus_by_type.T4")
    assert caught.value.value == 9
