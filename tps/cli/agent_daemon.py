"""`tps agent run` and `tps agent status`: the daemon that ships probe runs."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="agent YAML config; TPS_AGENT_* env vars override it"),
]


def register(app: typer.Typer) -> None:
    """Add the daemon's commands to the `tps agent` group."""
    app.command("run")(run)
    app.command("status")(status)


def run(
    config: ConfigOption = None,
    once: Annotated[
        bool, typer.Option(help="probe what the sources hold now, push it all, and exit")
    ] = False,
) -> None:
    """Probe the workload's problems, spool the runs and push them until SIGTERM."""
    from rich.console import Console

    from agents.daemon.assemble import build_daemon
    from agents.daemon.settings import load_settings
    from agents.errors import AgentError

    console = Console(stderr=True)
    stop = threading.Event()
    try:
        settings = load_settings(config)
        agent = build_daemon(settings)
    except AgentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if settings.metrics_port is not None:
        agent.daemon.metrics.serve(settings.metrics_port)

    def _stop(signum: int, _frame: object) -> None:
        console.print(
            f"{signal.Signals(signum).name}: finishing the probe in flight, then stopping"
        )
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    console.print(f"agent {agent.host_id[:12]} shipping to {settings.service_url}")
    try:
        agent.daemon.run(stop, once=once)
    except AgentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    finally:
        agent.close()


def status(config: ConfigOption = None) -> None:
    """Show spool depth, the last push, errors, drops and the cache size."""
    from rich.console import Console
    from rich.table import Table

    from agents.daemon.settings import load_settings
    from agents.daemon.status import read_status
    from agents.errors import AgentError

    console = Console()
    try:
        report = read_status(load_settings(config).spool_path)
    except AgentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    table = Table(title="TPS agent", show_header=False)
    for name, value in report.model_dump().items():
        shown = "-" if value is None else str(value)
        if name == "last_error" and value:
            shown = f"[red]{value}[/red]"
        table.add_row(name.replace("_", " "), shown)
    console.print(table)
