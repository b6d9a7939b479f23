"""The ``gpuplace`` command: wires the sub-commands and turns errors that are the user's to fix into one
line and exit code 2.

Every module imported here keeps its heavy imports (pandas, the ML stack, MLflow, the web framework) inside
its commands, so that ``gpuplace --help`` and a command's ``--help`` start fast.
"""

from __future__ import annotations

import logging
import sys

import typer

from service.cli import cluster as cli_cluster
from service.cli import data as cli_data
from service.cli import loop as cli_loop
from service.cli import models as cli_models
from service.cli import performance as cli_performance
from service.cli import quickstart
from service.cli import serve as cli_serve
from service.cli import sim as cli_sim
from service.cli.console import make_console
from service.cli.errors import EXIT_BAD_INPUT, user_message

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


def main() -> None:
    """Entry point of the console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except Exception as exc:
        message = user_message(exc)
        if message is None:
            raise
        from rich.text import Text  # the message is plain text: brackets in it are not markup

        make_console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
