"""The agent's part of `make demo`: probe a short shape list, ship it, show the priors."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agents.daemon.assemble import build_daemon
from agents.daemon.settings import AgentSettings
from agents.daemon.workloads import FixedProblems, read_any
from agents.probe.engine import ProbeEngine
from agents.probe.settings import ProbeSettings
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

DEMO_SECRET = "tps-demo-deployment"


@dataclass
class AgentDemoResult:
    """What the demo agent did: its runs, how many reached the service, how priors fared."""

    runs: list[ProbeRun] = field(default_factory=list)
    pushed: int = 0
    spool_depth: int = 0

    @property
    def steered(self) -> list[ProbeRun]:
        """Return the runs that priors shortlisted."""
        return [r for r in self.runs if r.priors.used]

    @property
    def prior_hits(self) -> int:
        """Return how many steered runs were won by one of the prior's candidates."""
        return sum(1 for r in self.steered if r.priors.winner_rank is not None)


def _problems(shapes: Sequence[ProblemKey] | Path, dtype: str) -> list[ProblemKey]:
    if isinstance(shapes, Path):
        return read_any(shapes, dtype=dtype)  # type: ignore[arg-type]
    return list(shapes)


def run_agent_demo(
    service_url: str,
    token: str,
    shapes: Sequence[ProblemKey] | Path,
    *,
    device: str = "auto",
    console: Console | None = None,
    dtype: str = "bf16",
    priors_top_k: int = 4,
    state_dir: Path | None = None,
    engine: ProbeEngine | None = None,
    probe: ProbeSettings | None = None,
) -> AgentDemoResult:
    """Run one agent over `shapes` (problems, or a shape-list/untuned file) against the service.

    Shows rich progress bars of runs probed and pushed and of priors used, then a table of
    the problems the priors steered. Returns what happened, for the caller to summarise.
    `probe` trims the engine's sampling (a CPU demo wants few samples); `engine` replaces
    the real engine built from `device`.
    """
    console = console or Console()
    problems = _problems(shapes, dtype)
    state = Path(state_dir or tempfile.mkdtemp(prefix="tps-agent-demo-"))
    settings = AgentSettings(
        service_url=service_url,
        token=token,
        device=device,
        spool_path=state / "spool.sqlite",
        cache_path=state / "cache.json",
        deployment_secret=DEMO_SECRET,
        priors_top_k=priors_top_k,
        probe=probe or ProbeSettings(),
        push_batch_runs=max(1, min(50, len(problems))),
        push_interval_s=0.2,
        push_max_attempts=5,
        push_backoff_max_s=2.0,
    )
    result = AgentDemoResult()
    done = threading.Event()
    progress = Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        probed = progress.add_task("runs probed", total=len(problems), note="")
        pushed = progress.add_task("runs pushed", total=len(problems), note="")
        steered = progress.add_task("priors used", total=len(problems), note="")

        def on_run(run: ProbeRun) -> None:
            result.runs.append(run)
            winner = next(
                (m.candidate.label() for m in run.measurements if m.candidate.id == run.winner_id),
                "none",
            )
            progress.update(probed, advance=1, note=f"winner {winner}")
            if run.priors.used:
                rank = run.priors.winner_rank
                note = f"winner was prior #{rank + 1}" if rank is not None else "default won"
                progress.update(steered, advance=1, note=note)

        agent = build_daemon(
            settings, engine=engine, on_run=on_run, sources=FixedProblems(problems)
        )
        metrics = agent.daemon.metrics.registry

        def work() -> None:
            try:
                agent.daemon.run(threading.Event(), once=True)
            finally:
                done.set()

        worker = threading.Thread(target=work, name="tps-agent-demo")
        worker.start()
        while not done.wait(0.2):
            count = metrics.get_sample_value("tps_agent_runs_pushed_total") or 0
            progress.update(pushed, completed=count)
        worker.join()
        result.pushed = int(metrics.get_sample_value("tps_agent_runs_pushed_total") or 0)
        progress.update(pushed, completed=result.pushed)
        result.spool_depth = agent.daemon.spool.depth()
        agent.close()
    _show_priors(console, result)
    return result


def _show_priors(console: Console, result: AgentDemoResult) -> None:
    if not result.steered:
        console.print("no priors came back yet: every problem got the full probe")
        return
    table = Table(title="Priors from the service")
    for column in ("problem", "tried", "winner", "winner's rank"):
        table.add_column(column)
    for run in result.steered[:20]:
        labels = {m.candidate.id: m.candidate.label() for m in run.measurements}
        rank = run.priors.winner_rank
        table.add_row(
            run.problem.canonical(),
            str(len(run.priors.candidate_ids)),
            labels.get(run.winner_id or "", "none"),
            "-" if rank is None else f"#{rank + 1}",
        )
    console.print(table)
    console.print(
        f"priors steered {len(result.steered)} of {len(result.runs)} probes; "
        f"a prior candidate won {result.prior_hits} of them"
    )
