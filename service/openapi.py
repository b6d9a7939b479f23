"""How operations are named and linked in ``/openapi.json``.

Each operation's id is its handler's name (``get_job``, ``put_cluster``), and an answer that names a
resource links to the operations that act on it (``POST /v1/place`` -> ``get_job``, ``release_job``,
``complete_job``): a client learns from the document what it can call next with what it was told, and
schemathesis' stateful tests follow the same links from one call to the next.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute


def operation_id(route: APIRoute) -> str:
    """The handler's name: stable and readable, which the links below refer to (FastAPI's default adds the
    path and the method, ``get_job_v1_jobs__job_id__get``)."""
    return route.name


def linked(*operations: str, body: dict[str, str] | None = None, **parameters: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entry that links a 200 answer to ``operations`` (by operation id), each called with
    ``parameters``, a name and the runtime expression that reads its value off the answer
    (``job_id="$response.body#/job_id"``), and with ``body`` as its request body (values likewise)."""
    link: dict[str, Any] = {"parameters": parameters} if parameters else {}
    if body is not None:
        link["requestBody"] = body
    return {200: {"links": {name: {"operationId": name, **link} for name in operations}}}


JOB_ID = "$response.body#/job_id"
"""The job an answer is about."""
