"""The ``gpuplace`` command: wires the sub-commands and turns bad input into exit code 2."""

from __future__ import annotations

import logging
import sys

import typer

from placement import InputError
from service.cli import cluster as cli_cluster
from service.cli import data as cli_data
from service.cli import loop as cli_loop
from service.cli import models as cli_models
from service.cli import performance as cli_performance
from service.cli import quickstart
from service.cli import serve as cli_serve
from service.cli import sim as cli_sim
from service.cli.console import make_console

app = typer.Typer(name="gpuplace", help="Resource estimation and placement for deep-learning jobs on GPU clusters.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.add_typer(cli_data.app, name="data")
app.add_typer(cli_cluster.app, name="cluster")
app.command("quickstart")(quickstart.run)
app.command("evaluate")(cli_models.evaluate)
app.command("train")(cli_models.train)
app.command("predict")(cli_models.predict)
app.command("retrain")(cli_loop.retrain)
cli_models.models_app.command("drift")(cli_loop.drift)
app.add_typer(cli_models.models_app, name="models")
app.add_typer(cli_sim.app, name="simulate")
app.add_typer(cli_performance.app, name="performance")
app.command("serve")(cli_serve.serve)

INPUT_ERRORS = (InputError,)
EXIT_BAD_INPUT = 2


def main() -> None:
    """Entry point of the console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except INPUT_ERRORS as exc:
        make_console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyError as exc:
        make_console(stderr=True).print(f"[bold red]error:[/] {exc.args[0]}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
