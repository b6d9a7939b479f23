"""``gpuplace serve``: the REST service under uvicorn (settings from ``GPUPLACE_*`` variables)."""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from service.settings import Settings

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""Where prometheus_client's multiprocess mode keeps the workers' files (``service.metrics``)."""


def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="worker processes (they share the database)")] = 1,
) -> None:
    """Run the REST API (OpenAPI docs at /docs), and the extender's listener if GPUPLACE_EXTENDER_PORT is set.
    With several workers, /metrics adds up every worker's counters (their files in a folder of the work dir)."""
    import uvicorn

    from service.settings import Settings

    settings = Settings()
    if settings.kube_follow and workers > 1:
        typer.echo("error: GPUPLACE_KUBE_FOLLOW runs in one process: use --workers 1", err=True)
        raise typer.Exit(2)
    metrics_between_workers(settings, port, workers)
    if settings.extender_port:
        from service.k8s import listener as extender_listener
        problems = extender_listener.check(settings, workers)
        if problems:
            for problem in problems:
                typer.echo(f"error: {problem}", err=True)
            raise typer.Exit(2)
        serve_with_extender(host, port, settings)
        return
    uvicorn.run("service.http.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level="warning", access_log=False)


def serve_with_extender(host: str, port: int, settings: Settings) -> None:
    """Run the API on ``port`` and the extender's listener on ``settings.extender_port``, one loop."""
    import uvicorn

    from service.http.app import create_app
    from service.k8s.listener import ExtenderOnly

    app = create_app(settings)
    api = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    extender = uvicorn.Server(uvicorn.Config(
        ExtenderOnly(app), host=host, port=settings.extender_port, log_level="warning", access_log=False,
        lifespan="off", ssl_certfile=settings.extender_tls_cert, ssl_keyfile=settings.extender_tls_key,
        ssl_ca_certs=settings.extender_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED))

    async def both() -> None:
        serving = asyncio.create_task(api.serve())
        while not api.started and not serving.done():  # the runtime exists once the API has started
            await asyncio.sleep(0.05)
        tasks = [serving] + ([] if serving.done() else [asyncio.create_task(extender.serve())])
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        api.should_exit = extender.should_exit = True  # one stopped (a signal, a port taken): stop both
        await asyncio.gather(*tasks)

    with asyncio.Runner(loop_factory=api.config.get_loop_factory()) as runner:
        runner.run(both())


def metrics_between_workers(settings: Settings, port: int, workers: int) -> None:
    """Several workers: prometheus_client's multiprocess mode, each worker writing its counters to files in
    ``<work dir>/prometheus/port-<port>`` (emptied now: an earlier run's counts must not be added to this
    one's), which the worker answering a scrape reads together. One process keeps them in memory: the
    variable is taken out of its environment. Done before anything imports prometheus_client, which reads
    the variable when first imported."""
    if workers == 1:
        os.environ.pop(MULTIPROC_DIR, None)
        return
    folder = settings.home.resolve() / "prometheus" / f"port-{port}"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink(missing_ok=True)
    os.environ[MULTIPROC_DIR] = str(folder)
