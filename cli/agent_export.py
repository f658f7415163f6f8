"""`tps agent export`: the agent's cache as a results file PyTorch TunableOp loads."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class ExportFormat(StrEnum):
    """TunableOp results files: every nameable winner, or one ROCm library's."""

    tunableop = "tunableop"
    hipblaslt = "hipblaslt"
    rocblas = "rocblas"


def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="the results file to write")] = Path(
        "tunableop_results0.csv"
    ),
    export_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="tunableop: Default, hipBLASLt and rocBLAS winners; hipblaslt or rocblas: "
            "Default and that library's winners only",
        ),
    ] = ExportFormat.tunableop,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="agent YAML config: its cache_path is exported"),
    ] = None,
    cache: Annotated[
        Path | None, typer.Option(help="a cache JSON to export instead of the config's")
    ] = None,
    validator: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE written as a Validator line (repeat), e.g. ROCM_VERSION=6.2; "
            "use what torch.cuda.tunable.get_validators() says on the reading host"
        ),
    ] = None,
) -> None:
    """Write the agent's cached GEMM winners as a PyTorch TunableOp results file.

    TunableOp runs only solutions it can name (Default, hipBLASLt and rocBLAS ids), so cuBLASLt,
    Triton and padded winners are left out, and counted. PyTorch then reads the file with
    PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=0 PYTORCH_TUNABLEOP_FILENAME=FILE.

    Examples:
      tps agent export --config /etc/tps/agent.yaml --out tunableop_results0.csv
      tps agent export --cache cache.json --format rocblas --validator ROCM_VERSION=6.2
    """
    from rich.console import Console

    from agents.cache import EXPORT_FORMATS, ProbeCache
    from agents.daemon.settings import load_settings
    from agents.errors import AgentError

    console = Console(stderr=True)
    validators: dict[str, str] = {}
    for item in validator or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--validator")
        validators[key] = value
    try:
        path = cache or load_settings(config).cache_path
        if not path.is_file():
            raise typer.BadParameter(f"no cache at {path}", param_hint="--cache/--config")
        probes = ProbeCache.load(path)
        solutions = EXPORT_FORMATS[export_format.value]
        written = probes.export_tunableop_csv(out, validators=validators, solutions=solutions)
    except AgentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    left = Counter(
        e.winner.backend if e.problem.op == "gemm" else f"{e.problem.op} winners"
        for e in probes.entries()
        if e.problem.op != "gemm" or e.winner.backend not in solutions
    )
    console.print(
        f"wrote {written} GEMM winners of {len(probes)} cache entries to {out} "
        f"({export_format.value} format)",
        highlight=False,
    )
    if left:
        console.print(
            "left out, not nameable in this format: "
            + ", ".join(f"{count} {backend}" for backend, count in sorted(left.items())),
            highlight=False,
        )


def register(agent_app: typer.Typer) -> None:
    """Add `export` to the `tps agent` group."""
    agent_app.command("export")(export)
