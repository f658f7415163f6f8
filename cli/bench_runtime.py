"""`tps bench runtime`: a model's forward with and without TPS, eager and compiled."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()


@contextmanager
def embedded_service() -> Iterator[tuple[str, str]]:
    """Start the service on a scratch database (the embedded Postgres unless one is set)."""
    from services.profiler_api.auth.service import Role
    from services.profiler_api.settings import Settings
    from tools.embedded_postgres import database_url_or_embedded
    from tools.local_service import (
        issue_tokens,
        migrated_scratch_database,
        quiet_client_logs,
        running_service,
    )

    quiet_client_logs()
    server_url = database_url_or_embedded(Settings())
    with migrated_scratch_database(server_url, prefix="tps_bench_runtime") as url:
        token = issue_tokens(url, org="bench-fleet").tokens[Role.AGENT]
        with running_service(url) as service:
            yield service.base_url, token


def bench_runtime(
    model: Annotated[list[str], typer.Option(help="model: gpt2-medium, llama3-8b-8l, opt-350m")],
    case: Annotated[list[str], typer.Option(help="case: decode-b1, decode-b32, prefill")],
    device: Annotated[str, typer.Option(help="cuda or cpu")] = "cuda",
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per case")] = False,
    service: Annotated[
        str | None, typer.Option(help="service URL for the fleet (default: start one here)")
    ] = None,
    token: Annotated[str | None, typer.Option(help="agent token of --service")] = None,
    fleet: Annotated[bool, typer.Option(help="measure the second host's warm start")] = True,
    compile_modes: Annotated[
        list[str],
        typer.Option(
            "--compile",
            help="default, max-autotune, gemm-only (host 2 without kernel tuning; "
            "with default), host-timed (a host whose GEMM search times host launches; "
            "with default) and/or single-search (a host whose search's one timing decides, "
            "no finalists timed again; with default) and/or restart (host 1 compiling again "
            "from its own records, as at its next start; with default; with single-search, "
            "that host compiles again too); none to skip",
        ),
    ] = ["default", "max-autotune", "gemm-only"],  # noqa: B006
    out: Annotated[Path | None, typer.Option(help="append each case's JSON line here")] = None,
    eager: Annotated[
        bool, typer.Option(help="measure eager TPS and TunableOp (--no-eager: compiled only)")
    ] = True,
) -> None:
    """Time models built from transformers configs (random weights) with TPS's runtime."""
    import logging
    from contextlib import nullcontext

    from tools.bench.runtime import CASES, MODELS, run_case
    from tools.bench.runtime import as_json as to_json

    logging.getLogger("agents.runtime").setLevel(logging.WARNING)
    for name in model:
        if name not in MODELS:
            raise typer.BadParameter(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    for name in case:
        if name not in CASES:
            raise typer.BadParameter(f"unknown case {name!r}; known: {', '.join(CASES)}")
    modes = tuple(m for m in compile_modes if m != "none")
    fleet_ctx = nullcontext((service, token)) if service or not fleet else embedded_service()
    with fleet_ctx as (url, agent_token), tempfile.TemporaryDirectory(prefix="tps-bench-") as tmp:
        for name in model:
            for c in case:
                workdir = Path(tmp) / f"{name}-{c}"
                workdir.mkdir()
                result = to_json(
                    run_case(
                        name,
                        c,
                        device=device,
                        workdir=workdir,
                        service=url,
                        token=agent_token,
                        compile_modes=modes,
                        eager=eager,
                    )
                )
                line = json.dumps(result)
                if out is not None:
                    with out.open("a") as f:
                        f.write(line + "\n")
                if as_json:
                    print(line, flush=True)  # noqa: T201  (the command's output)
                else:
                    ci, paired = result.get("speedup_ci"), result.get("speedup_paired")
                    within = f", paired {paired:.3f}, 95% {ci[0]:.3f}-{ci[1]:.3f}" if ci else ""
                    console.print(
                        f"{name} {c}: eager {result['eager_ms']:.2f} ms, TPS "
                        f"{result['tps_ms']:.2f} ms ({result['speedup']:.3f}x{within}), "
                        f"{result['probes']} probes in {result['tuning_s']:.1f} s"
                    )


def bench_runtime_overhead(
    device: Annotated[str, typer.Option(help="cuda or cpu")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Host time per call that the runtime adds to a miss and to a hit (µs)."""
    from tools.bench.runtime import measure_overhead

    result = measure_overhead(device)
    if as_json:
        print(json.dumps(result), flush=True)  # noqa: T201  (the command's output)
        return
    for key, value in result.items():
        console.print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
