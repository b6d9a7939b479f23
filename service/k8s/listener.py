"""The extender's own listener: kube-scheduler authenticated by a client certificate.

kube-scheduler's extender configuration cannot send an API key, but it can present a client
certificate (``tlsConfig``). With ``GPUPLACE_EXTENDER_PORT`` set, ``gpuplace serve`` listens there too,
in the same process and on the same event loop as the API (``service.cli.serve``): HTTPS, the TLS handshake requires a
certificate signed by ``GPUPLACE_EXTENDER_CLIENT_CA``, and only ``/k8s/extender/`` is served. A
request that came in there needs no API key; on the API's own port the extender's ``bind`` needs one,
as every mutating endpoint does.
"""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from service.problems import problem
from service.runtime import CLIENT_CERTIFIED
from service.settings import Settings

PREFIX = "/k8s/extender/"


class ExtenderOnly:
    """The app as the extender's listener serves it: extender paths only, marked as certified."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(PREFIX):
            await problem(404, "this listener serves only /k8s/extender/")(scope, receive, send)
            return
        await self.app({**scope, CLIENT_CERTIFIED: True}, receive, send)


def check(settings: Settings, workers: int) -> list[str]:
    """What stops the extender's listener from starting, one line per problem (empty: nothing)."""
    problems = []
    if workers > 1:
        problems.append("GPUPLACE_EXTENDER_PORT runs in one process: use --workers 1")
    for name, value in (("GPUPLACE_EXTENDER_TLS_CERT", settings.extender_tls_cert),
                        ("GPUPLACE_EXTENDER_TLS_KEY", settings.extender_tls_key),
                        ("GPUPLACE_EXTENDER_CLIENT_CA", settings.extender_client_ca)):
        if not value:
            problems.append(f"{name} is not set (GPUPLACE_EXTENDER_PORT needs it)")
        elif not Path(value).is_file():
            problems.append(f"{name}: no such file: {value}")
    return problems
