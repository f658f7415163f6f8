"""`tps agent run` and `tps agent status`: the daemon that ships probe runs."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.table import Table

    from agents.daemon.daemon import AgentDaemon
    from tps.schemas import ProbeRun

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
    """Probe the workload's problems, spool the runs and push them until SIGTERM.

    Needs TPS_AGENT_TOKEN (an agent token) and TPS_AGENT_DEPLOYMENT_SECRET (shared by the hosts
    of one deployment; it salts the host id). With --once it probes what the sources hold now,
    pushes it all, and ends with a table of what it probed, pushed and chose.

    Examples:
      tps agent run --config deploy/agent.yaml
      TPS_AGENT_DEVICE=cpu tps agent run --config agent.yaml --once
    """
    from rich.console import Console

    from agents.daemon.assemble import build_daemon
    from agents.daemon.settings import load_settings
    from agents.errors import AgentError

    console = Console(stderr=True)
    stop = threading.Event()
    runs: list[ProbeRun] = []
    try:
        settings = load_settings(config)
        agent = build_daemon(settings, on_run=runs.append)
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
        if once:
            Console().print(run_summary(runs, agent.daemon))
    except AgentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    finally:
        agent.close()


def run_summary(runs: list[ProbeRun], daemon: AgentDaemon) -> Table:
    """Return a table of the runs probed: the winner and its speedup, whether priors steered."""
    from rich.table import Table

    from cli.agent_probe import summary

    def winner_label(run: ProbeRun) -> str:
        labels = {m.candidate.id: m.candidate.label() for m in run.measurements}
        return labels.get(run.winner_id or "", "none valid")

    def count(name: str) -> int:
        return int(daemon.metrics.registry.get_sample_value(name) or 0)

    pushed = count("tps_agent_runs_pushed_total") + count("tps_agent_runs_resent_total")
    table = Table(
        title="TPS agent: this pass",
        caption=(
            f"probed {len(runs)}, pushed {pushed}, "
            f"{count('tps_agent_problems_skipped_total')} answered from the cache, "
            f"{daemon.spool.depth()} left in the spool, "
            f"{count('tps_agent_runs_dropped_total')} dropped"
        ),
    )
    table.add_column("problem", overflow="fold")
    table.add_column("probed", justify="right")
    table.add_column("priors", justify="right")
    table.add_column("chosen", overflow="fold")
    table.add_column("µs", justify="right")
    table.add_column("vs default", justify="right")
    for run in runs:
        chosen = summary(run)
        winner, speedup = chosen["winner"], chosen["speedup_vs_default"]
        priors = "-"
        if run.priors.used:
            rank = run.priors.winner_rank
            priors = f"{len(run.priors.candidate_ids)} tried" + (
                f", won #{rank + 1}" if rank is not None else ""
            )
        table.add_row(
            chosen["problem"],
            str(len(run.measurements)),
            priors,
            winner_label(run),
            f"{winner['median_us']:.2f}" if winner and winner["median_us"] else "-",
            f"{speedup:.2f}x" if speedup else "-",
        )
    return table


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
