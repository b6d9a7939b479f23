"""Error answers as RFC 9457 problem details (``application/problem+json``): every endpoint of the REST
API and of the Kubernetes extender answers its errors as a :class:`ProblemOut`, and the OpenAPI
document says so under that media type.

Every problem is of type ``about:blank``: its meaning is the HTTP status's, so ``title`` is the status's
reason phrase (as RFC 9457 asks for that type) and ``detail`` says what was wrong with this request. A
request the schema refuses (422) lists the refused fields in the extension member ``errors``, one entry
each; ``detail`` names them in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, Field, JsonValue
from starlette.responses import JSONResponse

MEDIA_TYPE = "application/problem+json"


class ProblemOut(BaseModel):
    """Why a request was not answered (RFC 9457 problem details)."""

    type: str = Field("about:blank", description="the problem's type: `about:blank`, the status says it all")
    title: str = Field(description="the status's reason phrase", examples=["Unprocessable Entity"])
    status: int = Field(description="the HTTP status, as sent", examples=[422])
    detail: str = Field(description="what was wrong with this request, in words",
                        examples=["tasks.0.gpu: Input should be greater than or equal to 0"])
    errors: list[dict[str, JsonValue]] | None = Field(
        None, description="422 only: one entry per refused field (`loc`, `msg`, `type`, and the `input` "
                          "refused, with values JSON cannot hold written as text)")


class ProblemResponse(JSONResponse):
    media_type = MEDIA_TYPE


def title_of(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_body(status: int, detail: str, errors: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title_of(status), "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = list(errors)
    return body


def problem(status: int, detail: str, errors: Sequence[Mapping[str, Any]] | None = None,
            headers: Mapping[str, str] | None = None) -> ProblemResponse:
    """The answer of a problem with ``status``."""
    return ProblemResponse(problem_body(status, detail, errors), status_code=status, headers=headers)


def problems(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The OpenAPI ``responses`` of the error answers ``statuses`` (their media type is set to
    ``application/problem+json`` by :func:`as_problem_media_type` once the document is built)."""
    return {status: {"model": ProblemOut, "description": PROBLEMS[status]} for status in statuses}


def as_problem_media_type(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (an OpenAPI document) with every error answer whose body is a :class:`ProblemOut`
    declared as ``application/problem+json``, the media type the server sends."""
    ref = "#/components/schemas/ProblemOut"
    for path in document.get("paths", {}).values():
        for operation in path.values():
            for status, answer in operation.get("responses", {}).items() if isinstance(operation, dict) else ():
                content = answer.get("content", {})
                if not str(status).startswith(("4", "5")):
                    continue
                # FastAPI files an error model under the route's own media type (text/plain for /metrics)
                for media_type in [m for m, d in content.items() if d.get("schema", {}).get("$ref") == ref]:
                    content[MEDIA_TYPE] = content.pop(media_type)
    return document


ANYWHERE = (400, 401, 403, 413, 422, 500)
"""The error answers any endpoint may give."""
PROBLEMS = {
    400: "the body is not JSON this server can parse (e.g. nested too deeply)",
    401: "no API key (mutating endpoints; reads too with GPUPLACE_PROTECT_READS)",
    403: "the API key is not accepted",
    404: "no such job",
    409: "conflicts with what is stored (a job id already used, a job not running, jobs a cluster spec would evict)",
    413: "the body is larger than GPUPLACE_MAX_BODY_BYTES",
    422: "the request is not valid: the fields and values refused",
    500: "an internal error; the server log has the details",
}
