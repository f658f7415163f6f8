"""The `tps` command line: one root app, a module per domain.

Each domain module imports its heavy dependencies inside its commands, so that
`tps --help` works with only the core installed.
"""

from __future__ import annotations

import inspect
import logging
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from cli import agent_daemon, agent_export, agent_probe, agent_runtime, model, service

EXAMPLES = """TPS, the TunableOp Profiling Service: measured, fleet-wide GPU kernel selection.

Examples:
  tps demo
  tps serve --port 8000
  tps token create --org acme --role agent
  tps agent probe --op gemm --shape 4096x4096x4096 --dtype bf16 --trans-b
  tps agent run --config deploy/agent.yaml --once
  tps agent export --format tunableop --out tunableop_results0.csv
  tps evaluate --data benchmarks/data/kernel_tuner --all

The service reads TPS_* variables (TPS_DATABASE_URL, TPS_KERNEL_TUNER_DATA, ...); the agent
reads a YAML file and TPS_AGENT_* variables (TPS_AGENT_TOKEN, TPS_AGENT_DEPLOYMENT_SECRET, ...).
"""

app = typer.Typer(no_args_is_help=True)
agent_app = typer.Typer(no_args_is_help=True, help="Probe kernels and ship the results.")
app.add_typer(agent_app, name="agent")

service.register(app)
model.register(app)
agent_probe.register(agent_app)
agent_daemon.register(agent_app)
agent_export.register(agent_app)
agent_runtime.register(agent_app)


def reflow(doc: str | None) -> str | None:
    """Return `doc` with each prose paragraph on one line; an "Examples:" block stays as written.

    The help renderer keeps a docstring's line breaks, which were made for the source's width,
    not the terminal's.
    """
    if doc is None:
        return None
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(
        p if p.startswith("Examples:") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def _installed_version() -> str:
    try:
        return version("tps")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"tps {_installed_version()}")
        raise typer.Exit()


@app.callback(help=reflow(EXAMPLES))
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    pass


def _reflow_commands(group: typer.Typer) -> None:
    for command in group.registered_commands:
        if command.help is None and command.callback is not None:
            command.help = reflow(command.callback.__doc__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_commands(sub.typer_instance)


_reflow_commands(app)


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
