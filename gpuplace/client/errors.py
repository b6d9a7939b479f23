"""What the client raises: :class:`ApiError` for every answer with a 4xx or 5xx status, naming the field
a 422 refused; :class:`ServiceUnreachable` (a :class:`ConnectionError`) when no answer came at all."""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import httpx

_LOCATIONS = ("body", "query", "path", "header", "cookie")
_NAMED = re.compile(r"^(?:Value error, )?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*): ")
"""A message that starts with the field it is about (``queue: unknown queue 'x'``)."""


class ClientError(Exception):
    """Anything :mod:`gpuplace.client` raises on its own account."""


class ApiError(ClientError):
    """The service answered with an error status (4xx or 5xx).

    ``status``: the HTTP status; ``title``: its meaning (the problem's ``title`` if the body has one, else
    the status' reason phrase); ``detail``: what the service said, one line per refused field for a 422;
    ``field``: the field a 422 refused first (``tasks.0.gpu``, ``queue``), ``None`` when it names none;
    ``errors``: the refused fields as the service listed them (``loc``, ``msg``, ``type``, ``input``);
    ``text``: the body as it came."""

    def __init__(self, status: int, title: str, detail: str, *, field: str | None = None,
                 errors: list[dict[str, Any]] | None = None, method: str = "", url: str = "", text: str = "") -> None:
        self.status, self.title, self.detail, self.field = status, title, detail, field
        self.errors = errors or []
        self.method, self.url, self.text = method, url, text
        super().__init__(f"{status} {title}: {detail}" + (f" ({method} {url})" if url else ""))

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (to another process) with every attribute
        return partial(type(self), field=self.field, errors=self.errors, method=self.method, url=self.url,
                       text=self.text), (self.status, self.title, self.detail)

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        """The error ``response`` says (its body RFC 9457 problem details, :class:`~service.problems.ProblemOut`,
        or anything else)."""
        text = response.text
        title = response.reason_phrase or httpx.codes.get_reason_phrase(response.status_code) or "error"
        detail, field, errors = text.strip() or title, None, []
        try:
            body = json.loads(text)
        except ValueError:  # not a problem body: a 503 from /readyz, a proxy's page
            body = None
        if isinstance(body, dict) and isinstance(body.get("detail"), str | list):
            if isinstance(body.get("title"), str):
                title = body["title"]
            listed = body.get("errors") if isinstance(body.get("errors"), list) else body["detail"]
            if isinstance(listed, list):  # one entry per refused field (``detail`` a list: servers before RFC 9457)
                errors = [entry for entry in listed if isinstance(entry, dict)]
                lines = [(_field(entry.get("loc")) or _named(str(entry.get("msg", ""))), entry.get("msg", ""))
                         for entry in errors]
                field = next((name for name, _ in lines if name), None)
                detail = "; ".join(f"{name}: {msg}" if name else str(msg) for name, msg in lines) or title
            else:
                detail = body["detail"]
                field = _named(detail) if response.status_code == 422 else None
        request = response.request
        return cls(response.status_code, title, detail, field=field, errors=errors, method=request.method,
                   url=str(request.url), text=text)


def _field(loc: object) -> str | None:
    """``["body", "tasks", 0, "gpu"]`` as ``tasks.0.gpu``: the field's path without where it was sent."""
    if not isinstance(loc, list):
        return None
    parts = loc[1:] if loc and loc[0] in _LOCATIONS else loc
    return ".".join(map(str, parts)) or None


def _named(message: str) -> str | None:
    found = _NAMED.match(message)
    return found.group(1) if found else None


class ServiceUnreachable(ClientError, ConnectionError):
    """No answer came: the service could not be reached at ``url``, or the connection broke or timed out.

    ``sent``: whether the request may have reached the service. ``False`` (connecting failed): it was
    not processed and may be sent again. ``True``: it may have been processed; sending a placement or a
    submission again could do it twice (the second would be a 409, job ids are never reused)."""

    def __init__(self, url: str, method: str, path: str, reason: str, *, sent: bool) -> None:
        self.url, self.method, self.path, self.reason, self.sent = url, method, path, reason, sent
        what = "no answer from" if sent else "cannot reach"
        super().__init__(f"{what} the gpuplace service at {url} ({method} {path}): {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return partial(type(self), sent=self.sent), (self.url, self.method, self.path, self.reason)

    @classmethod
    def of(cls, url: str, method: str, path: str, exc: httpx.TransportError) -> ServiceUnreachable:
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException) and str(exc) in ("", "timed out"):
            reason = f"timed out ({type(exc).__name__})"
        return cls(url, method, path, reason, sent=sent)

