"""Error answers that can always be sent: a 422 names the field and echoes the value it refused, even
when that value cannot be written as JSON (``NaN``, ``Infinity``, a number past float range, a lone
UTF-16 surrogate), and an unexpected failure answers a JSON 500 instead of a bare one.

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
from fastapi.responses import JSONResponse

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


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else [{"msg": str(exc)}]
    return JSONResponse({"detail": sendable(jsonable_encoder(errors))}, status_code=422)


async def unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", extra={"path": request.url.path})
    return JSONResponse({"detail": f"internal error ({type(exc).__name__}); the server log has the details"},
                        status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(Exception, unexpected)
