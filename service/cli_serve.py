"""``gpuplace serve``: the REST service under uvicorn (settings from ``GPUPLACE_*`` variables)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="worker processes (they share the database)")] = 1,
) -> None:
    """Run the REST API (OpenAPI docs at /docs)."""
    import uvicorn

    uvicorn.run("service.api:create_app", factory=True, host=host, port=port, workers=workers,
                log_level="warning", access_log=False)
