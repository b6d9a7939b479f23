"""Schemathesis against the running service's OpenAPI schema (a bounded number of requests per operation):

- requests generated from every operation's schema: no answer may be a server error (5xx), and every
  answer must be one the document describes: its status code, its content type, and its body's schema;
- requests the schema does not allow (negative data: wrong types, values past the limits, missing or
  unknown fields): each is refused with a 4xx the document describes, never a 5xx;
- sequences of calls that follow the document's links (a placed job's id to ``GET``, ``release`` and
  ``complete``; a loaded cluster to ``GET /v1/cluster``), with the same checks on every answer."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis.errors
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.transport import Response
from schemathesis.generation.stateful.state_machine import StepInput, StepOutput
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.conftest import API_KEY, Server, server_env

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home: Path = tmp_path_factory.mktemp("fuzz")
    server = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    yield server
    server.stop()


def test_no_generated_request_gets_a_server_error(running: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{running.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    checked = []
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def exercise(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=KEY, checks=CHECKS)

        exercise()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert {"POST /v1/place", "PUT /v1/cluster", "POST /k8s/extender/filter"} <= set(checked)


def test_every_request_the_schema_refuses_gets_a_4xx_the_document_describes(running: Server) -> None:
    """Negative data for every operation that takes any input (the others have nothing to get wrong)."""
    schema = schemathesis.openapi.from_url(f"{running.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    with_input = [op for op in operations if op.body or any(True for _ in op.iter_parameters())]
    statuses: Counter[int] = Counter()
    for operation in with_input:
        @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def exercise(case: schemathesis.Case) -> None:
            response = case.call(headers=KEY)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=[*CHECKS, negative_data_rejection])

        exercise()
    labels = {op.label for op in with_input}
    assert {"POST /v1/place", "POST /v1/jobs/{job_id}/complete", "PUT /v1/cluster", "POST /k8s/extender/bind"} <= labels
    assert sum(statuses.values()) >= 10 * len(with_input)
    # whether a case is still invalid once sent is negative_data_rejection's to judge: an extra query
    # parameter whose value is an empty list is not sent at all, which leaves a valid request
    assert statuses and all(status < 500 for status in statuses), statuses
    assert sum(n for status, n in statuses.items() if 400 <= status < 500) >= 0.95 * sum(statuses.values()), statuses


class Scenarios:
    """What the stateful test saw: requests by operation and status, the links it followed (and what they
    answered), and every check that failed."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()
        self.links: Counter[tuple[str, int]] = Counter()
        self.failures: list[str] = []
        self.job_ids = itertools.count()


def steered_machine(schema: Any, url: str, seen: Scenarios) -> Any:
    """The schema's state machine (its rules are the document's links) calling with the API key, checking
    every answer with ``CHECKS``, and starting every scenario from the same state, so that a scenario
    Hypothesis replays while it explores gets the same answers:

    - a placement the schema allows gets a job id never used (ids are never reused: a replayed scenario
      would be answered 409 where it was placed), and one also gets tasks that fit (``fitting``) and is
      stored (``dry_run`` false), so that the links from a stored job lead to it;
    - at the end of a scenario its jobs are released and a cluster it replaced is loaded back."""

    class Steered(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            self.placed: list[str] = []
            self.replaced_cluster = False

        def before_call(self, case: schemathesis.Case) -> None:
            if case.meta is None or not case.meta.generation.mode.is_positive or not isinstance(case.body, dict):
                return  # refused data stays as generated: a fresh id could make it valid
            if case.operation.label == "POST /v1/place":
                case.body.update(job_id=f"st-{next(seen.job_ids)}", dry_run=False,
                                 tasks=[fitting(task) for task in case.body.get("tasks", [])[:4]])
            elif case.operation.label == "POST /v1/place/batch":
                for job in case.body.get("jobs", []):
                    if isinstance(job, dict):
                        job["job_id"] = f"st-{next(seen.job_ids)}"

        def step(self, input: StepInput) -> StepOutput:
            output = super().step(input)
            label, status = input.case.operation.label, output.response.status_code
            seen.requests[(label, status)] += 1
            if input.transition is not None and input.is_applied:
                seen.links[(f"{input.transition.id.split(' -> ')[0]} -> {label}", status)] += 1
            if status == 200 and label == "POST /v1/place" and output.response.json()["committed"]:
                self.placed.append(output.response.json()["job_id"])
            elif status == 200 and label == "POST /v1/place/batch":
                self.placed += [d["job_id"] for d in output.response.json()["decisions"] if d["committed"]]
            elif status == 200 and label == "PUT /v1/cluster":
                self.replaced_cluster = True
            return output

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": KEY}

        def validate_response(self, response: Response, case: schemathesis.Case,
                              additional_checks: Any = None, **kwargs: Any) -> None:
            try:
                case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None,
                                       recorder=self.recorder)
            except Exception as exc:
                seen.failures.append(f"{case.operation.label} -> {response.status_code}: {exc}")
                raise

        def teardown(self) -> None:
            with httpx.Client(base_url=url, headers=KEY, timeout=60) as http:
                for job_id in self.placed:
                    assert http.post(f"/v1/jobs/{job_id}/release").status_code == 200
                if self.replaced_cluster:
                    reset_cluster(http)
            super().teardown()

    return Steered


def fitting(task: Any) -> Any:
    """``task`` as generated (its role, whole GPUs or a share, GPU memory stated or not) but asked small enough
    to fit a machine of the PAI cluster: of the demands the schema allows, most fit no machine, and a job
    that was not stored leads nowhere."""
    if not isinstance(task, dict):
        return task
    gpu = task.get("gpu", 0.0)
    small = {"instances": min(task.get("instances", 1), 2), "gpu": gpu if gpu <= 1 else float(min(gpu, 2)),
             "cpu_cores": min(task.get("cpu_cores", 0.0), 4.0), "mem_gib": min(task.get("mem_gib", 0.0), 16.0),
             "bandwidth_gbps": min(task.get("bandwidth_gbps", 0.0), 1.0), "gpu_types": []}
    if task.get("gpu_mem_gib") is not None:
        small["gpu_mem_gib"] = min(task["gpu_mem_gib"], 8.0)
    return {**task, **small}


JOB_LINKS = {f"{placed} -> {then}" for placed in ("POST /v1/place", "POST /v1/place/batch")
             for then in ("GET /v1/jobs/{job_id}", "POST /v1/jobs/{job_id}/release", "POST /v1/jobs/{job_id}/complete")}
"""Links from a stored job to what acts on it: at least one must have been followed to a 200."""


EXPLORATION_ROUNDS = 4
"""Rounds of 40 stateful scenarios, at most, to follow a job link and the cluster link each to a 200."""


def reset_cluster(http: httpx.Client) -> None:
    assert http.put("/v1/cluster", json={"name": "pai", "force": True}).status_code == 200


def test_call_sequences_that_follow_the_documents_links_get_only_answers_it_describes(running: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{running.url}/openapi.json")
    with httpx.Client(base_url=running.url, headers=KEY, timeout=60) as http:
        reset_cluster(http)  # the tests before may have loaded another
    seen = Scenarios()
    machine = steered_machine(schema, running.url, seen)
    started, replays_diverged, rounds = time.monotonic(), 0, 0

    def followed() -> set[str]:
        return {link for (link, status) in seen.links if status == 200}

    # Schemathesis picks with true randomness whether a step follows a link: a round of 40 scenarios has been
    # seen to follow no job link to a 200, so rounds are added, up to EXPLORATION_ROUNDS, until both kinds were.
    while rounds < EXPLORATION_ROUNDS and not ("PUT /v1/cluster -> GET /v1/cluster" in followed()
                                               and followed() & JOB_LINKS):
        rounds += 1
        try:
            machine.run(settings=settings(max_examples=40, stateful_step_count=6, deadline=None, database=None,
                                          suppress_health_check=list(HealthCheck), phases=[Phase.generate]))
        except hypothesis.errors.Flaky:
            # A replayed scenario went differently: schemathesis decides with true randomness whether a
            # step uses a link's value, and a batch's solver stops on a time limit. A failed check is a
            # failure whether or not its replay failed again.
            assert not seen.failures, seen.failures
            replays_diverged += 1
            if replays_diverged > 2:
                raise
    took = time.monotonic() - started
    print(f"stateful: {rounds} rounds, {sum(seen.requests.values())} requests in {took:.1f} s, "
          f"{sum(seen.links.values())} by a link, {replays_diverged} diverged replays; "
          f"{sorted(seen.requests.items())}; {sorted(seen.links.items())}")
    assert not seen.failures, seen.failures
    assert "PUT /v1/cluster -> GET /v1/cluster" in followed() and followed() & JOB_LINKS, seen.links
