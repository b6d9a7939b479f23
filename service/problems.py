"""Error answers as the OpenAPI document describes them: every endpoint of the REST API and of the
Kubernetes extender answers its errors as a :class:`ProblemOut`."""

from __future__ import annotations

from pydantic import BaseModel, JsonValue


class ProblemOut(BaseModel):
    """Why a request was not answered: in words, or, for a request the schema refuses, one entry per
    field it refuses (``loc``, ``msg``, ``type``, and the ``input`` refused, with values JSON cannot hold
    written as text)."""

    detail: str | list[dict[str, JsonValue]]


def problems(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The OpenAPI ``responses`` of the error answers ``statuses``."""
    return {status: {"model": ProblemOut, "description": PROBLEMS[status]} for status in statuses}


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
