"""Schemathesis against the running service's OpenAPI schema: requests generated from every
operation's schema (a bounded number per operation); no answer may be a server error (5xx), and every
answer must be one the document describes: its status code, its content type, and its body's schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.conftest import API_KEY, Server, server_env

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


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
            case.call_and_validate(headers={"X-API-Key": API_KEY}, checks=CHECKS)

        exercise()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert {"POST /v1/place", "PUT /v1/cluster", "POST /k8s/extender/filter"} <= set(checked)
