"""The `tps` command line: one root app, a module per domain.

Each domain module imports its heavy dependencies inside its commands, so that
`tps --help` works with only the core installed.
"""

from __future__ import annotations

import logging
import os

import typer
from rich.console import Console
from rich.logging import RichHandler

from tps.cli import agent_daemon, agent_probe, model, service

app = typer.Typer(no_args_is_help=True, help="TPS, the TunableOp Profiling Service.")
agent_app = typer.Typer(no_args_is_help=True, help="Probe kernels and ship the results.")
app.add_typer(agent_app, name="agent")

service.register(app)
model.register(app)
agent_probe.register(agent_app)
agent_daemon.register(agent_app)


# Libraries that log each server start, migration step or request at INFO: heard only at DEBUG.
CHATTY_LOGGERS = ("pgserver", "alembic", "httpx")


def _configure_logging() -> None:
    level = os.environ.get("TPS_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format="%(message)s",
        handlers=[
            RichHandler(console=Console(stderr=True), rich_tracebacks=False, show_path=False)
        ],
    )
    if level != "DEBUG":
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def main() -> None:
    """Run the `tps` command line."""
    _configure_logging()
    app()
