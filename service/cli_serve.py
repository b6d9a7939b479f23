"""``gpuplace serve``: the REST service under uvicorn (settings from ``GPUPLACE_*`` variables)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="worker processes (they share the database)")] = 1,
) -> None:
    """Run the REST API (OpenAPI docs at /docs), and the extender's listener if GPUPLACE_EXTENDER_PORT is set."""
    import uvicorn

    from service.settings import Settings

    settings = Settings()
    if settings.extender_port:
        from service import extender_listener

        problems = extender_listener.check(settings, workers)
        if problems:
            for problem in problems:
                typer.echo(f"error: {problem}", err=True)
            raise typer.Exit(2)
        extender_listener.serve_with_extender(host, port, settings)
        return
    uvicorn.run("service.api:create_app", factory=True, host=host, port=port, workers=workers,
                log_level="warning", access_log=False)
