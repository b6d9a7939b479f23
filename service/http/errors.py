"""Error answers that can always be sent: a 422 names the field and echoes the value it refused, even
when that value cannot be written as JSON (``NaN``, ``Infinity``, a number past float range, a lone
UTF-16 surrogate), and an unexpected failure answers a JSON 500 instead of a bare one. Every error goes
out as RFC 9457 problem details (:mod:`service.problems`), those the routes raise as ``HTTPException``
included.

FastAPI's own handler echoes the refused value as it came; rendering it then fails (JSON has no
``NaN``; UTF-8 has no surrogates), the request ends in an unhandled error, and the server drops the
client's keep-alive connection too.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from service.problems import ProblemResponse, as_problem_media_type, problem

log = logging.getLogger(__name__)


def sendable(value: Any) -> Any:
    """``value`` with every float JSON cannot hold written as text (``"NaN"``, ``"Infinity"``) and every
    string that UTF-8 cannot hold with its surrogates escaped (``"\\ud800"``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {sendable(k): sendable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sendable(v) for v in value]
    return value


_LOCATIONS = ("body", "query", "path", "header", "cookie")


def field_of(loc: object) -> str:
    """``["body", "tasks", 0, "gpu"]`` as ``tasks.0.gpu``: the field's path without where it was sent."""
    parts = list(loc) if isinstance(loc, list | tuple) else []
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(map(str, parts))


def one_line(errors: list[dict[str, Any]]) -> str:
    """The refused fields in one line: ``tasks.0.gpu: Input should be ...; queue: unknown queue 'x'``."""
    lines = [f"{field}: {entry.get('msg', '')}" if (field := field_of(entry.get("loc"))) else str(entry.get("msg", ""))
             for entry in errors]
    return "; ".join(lines) or "the request is not valid"


async def invalid_request(request: Request, exc: Exception) -> ProblemResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else [{"msg": str(exc)}]
    listed = sendable(jsonable_encoder(errors))
    return problem(422, one_line(listed), errors=listed)


async def http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        raise exc
    if exc.status_code < 400 or exc.status_code in (204, 304):  # not a problem: no body to describe it
        return Response(status_code=exc.status_code, headers=exc.headers)
    return problem(exc.status_code, str(exc.detail), headers=exc.headers)


async def unexpected(request: Request, exc: Exception) -> ProblemResponse:
    log.exception("unhandled error", extra={"path": request.url.path})
    return problem(500, f"internal error ({type(exc).__name__}); the server log has the details")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = as_problem_media_type(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
