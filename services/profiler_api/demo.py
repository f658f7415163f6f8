"""`tps demo`: the whole job end to end, as a list of steps that later issues extend.

Each step takes the shared DemoContext and adds to it. Add a step with `add_demo_step`
(e.g. an agent probing real kernels after "push probe runs", a model after "read priors").
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from models.sources import read_probe_runs_jsonl
from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, resolve_database_url
from services.profiler_api.runner import quiet_client_logs, running_service
from services.profiler_api.settings import Settings
from tps.schemas import Prior, ProbeRun, ProbeRunBatch

DEMO_ORG = "demo"
# Real measurements shipped with the checkout (see benchmarks/data/README.md).
H200_DATASET = Path(__file__).resolve().parents[2] / "benchmarks/data/gemm_h200_probe_runs.jsonl.gz"
DEMO_BATCH = 100


@dataclass
class DemoContext:
    """What the steps share: where the service is, the tokens, and what was pushed."""

    console: Console
    stack: ExitStack
    settings: Settings = field(default_factory=Settings)
    database_url: str = ""
    base_url: str = ""
    tokens: dict[Role, str] = field(default_factory=dict)
    runs: list[ProbeRun] = field(default_factory=list)

    @contextmanager
    def client(self, role: Role = Role.AGENT) -> Iterator[httpx.Client]:
        """Yield an HTTP client of the running service with the token of `role`."""
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=60.0) as client:
            yield client


DemoStep = Callable[[DemoContext], None]


def start_database(ctx: DemoContext) -> None:
    """Use TPS_DATABASE_URL or start the embedded Postgres; upgrade the schema."""
    ctx.database_url = resolve_database_url(ctx.settings)
    migrate.upgrade(ctx.database_url)
    where = (
        "TPS_DATABASE_URL" if ctx.settings.database_url else f"embedded, {ctx.settings.data_dir}"
    )
    ctx.console.print(f"Postgres ready ({where}); schema at {migrate.current(ctx.database_url)}")


def create_tokens(ctx: DemoContext) -> None:
    """Create an agent and an admin token for the demo organisation."""
    engine = make_engine(ctx.database_url, ctx.settings)
    try:
        with Session(engine) as session, session.begin():
            for role in Role:
                ctx.tokens[role] = create_token(session, org=DEMO_ORG, role=role, name="tps demo")
    finally:
        engine.dispose()
    ctx.console.print(f"tokens for organisation {DEMO_ORG!r}: agent and admin (stored hashed)")


def start_service(ctx: DemoContext) -> None:
    """Run the service on a free local port until the demo ends."""
    service = ctx.stack.enter_context(running_service(ctx.database_url))
    ctx.base_url = service.base_url
    ctx.console.print(f"service at {ctx.base_url} (OpenAPI at {ctx.base_url}/docs)")


def push_probe_runs(ctx: DemoContext) -> None:
    """Push the measured H200 GEMM dataset over HTTP, gzip-encoded, in batches."""
    if not H200_DATASET.is_file():
        ctx.console.print(f"[yellow]no measured dataset at {H200_DATASET}; nothing to push")
        return
    ctx.runs = list(read_probe_runs_jsonl(H200_DATASET))
    accepted = duplicates = measurements = 0
    with ctx.client() as client:
        for start in range(0, len(ctx.runs), DEMO_BATCH):
            batch = ProbeRunBatch(runs=ctx.runs[start : start + DEMO_BATCH])
            response = client.post(
                "/v1/probe-runs",
                content=gzip.compress(batch.model_dump_json().encode(), 5),
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            )
            response.raise_for_status()
            result = response.json()
            accepted += result["accepted"]
            duplicates += result["duplicates"]
            measurements += result["measurements"]
    ctx.console.print(
        f"pushed {len(ctx.runs)} probe runs measured on an H200 ({H200_DATASET.name}): "
        f"{accepted} accepted ({measurements} measurements), {duplicates} duplicates"
        + (" (already sent by an earlier demo)" if duplicates else "")
    )


def read_priors(ctx: DemoContext) -> None:
    """Read ranked candidates back for a few (hardware, problem) pairs the fleet probed."""
    seen: dict[tuple[str, str], list[ProbeRun]] = {}
    for run in ctx.runs:
        seen.setdefault((run.hardware.fingerprint(), run.problem.key_hash()), []).append(run)
    pairs = sorted(seen.items(), key=lambda item: -len(item[1]))[:3]
    with ctx.client() as client:
        for (fingerprint, problem_hash), runs in pairs:
            response = client.get(
                "/v1/priors",
                params={"hardware_id": fingerprint, "problem": problem_hash, "limit": 5},
            )
            response.raise_for_status()
            ctx.console.print(_prior_table(Prior.model_validate(response.json()), runs[0]))


def show_stats(ctx: DemoContext) -> None:
    """Print what the service holds."""
    with ctx.client() as client:
        stats = client.get("/v1/stats").json()
    ctx.console.print(
        "service holds "
        + ", ".join(f"{stats[k]} {k}" for k in ("runs", "measurements", "hardware", "problems"))
    )


DEMO_STEPS: list[tuple[str, DemoStep]] = [
    ("start Postgres", start_database),
    ("create tokens", create_tokens),
    ("start the service", start_service),
    ("push probe runs", push_probe_runs),
    ("read priors", read_priors),
    ("show stats", show_stats),
]


def add_demo_step(title: str, step: DemoStep, *, after: str | None = None) -> None:
    """Insert a step after the one titled `after` (at the end when None)."""
    titles = [t for t, _ in DEMO_STEPS]
    index = titles.index(after) + 1 if after is not None else len(DEMO_STEPS)
    DEMO_STEPS.insert(index, (title, step))


def run_demo(
    console: Console,
    *,
    settings: Settings | None = None,
    steps: list[tuple[str, DemoStep]] | None = None,
) -> DemoContext:
    """Run the demo's steps in order; the service stops when they are done."""
    quiet_client_logs()
    steps = DEMO_STEPS if steps is None else steps
    with ExitStack() as stack:
        ctx = DemoContext(console=console, stack=stack, settings=settings or Settings())
        for number, (title, step) in enumerate(steps, start=1):
            console.rule(f"[bold]{number}. {title}")
            step(ctx)
        console.rule("[bold green]demo done")
        return ctx


def _prior_table(prior: Prior, run: ProbeRun) -> Table:
    table = Table(
        title=f"{run.hardware.name}: {prior.canonical}",
        caption=f"source: {prior.source}" if prior.candidates else prior.reason,
    )
    for column in ("rank", "candidate", "median µs", "runs", "samples", "confidence"):
        if column == "candidate":
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, justify="right")
    for candidate in prior.candidates:
        table.add_row(
            str(candidate.rank),
            candidate.candidate.label(),
            f"{candidate.median_us:.2f}" if candidate.median_us else "-",
            str(candidate.runs),
            str(candidate.samples),
            f"{candidate.confidence:.2f}",
        )
    return table
