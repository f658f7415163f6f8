"""`tps agent probe`: measure the candidates of one problem on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from tps.problem import ProblemKey


def parse_problem(
    op: str, shape: str, dtype: str, *, trans_a: bool = False, trans_b: bool = False
) -> ProblemKey:
    """Build a ProblemKey from CLI words: gemm MxNxK[xBATCH], layernorm ROWSxCOLS,
    conv2d NxCxHxWxKxRxS[xSTRIDE[xPAD]]."""
    try:
        sizes = [int(x) for x in shape.lower().split("x")]
    except ValueError:
        raise typer.BadParameter(f"shape {shape!r} must be sizes joined by 'x'") from None
    names = {
        "gemm": ("m", "n", "k", "batch"),
        "layernorm": ("rows", "cols"),
        "conv2d": ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
    }
    least = {"gemm": 3, "layernorm": 2, "conv2d": 7}
    if op not in names:
        raise typer.BadParameter(f"--op {op!r}: the CLI probes {', '.join(names)}")
    expected = names[op]
    minimum = least[op]
    if not minimum <= len(sizes) <= len(expected):
        raise typer.BadParameter(f"{op} shape is {'x'.join(expected[:minimum]).upper()}")
    try:
        return ProblemKey(
            op=op,
            dtype=dtype,
            dims=dict(zip(expected, sizes, strict=False)),
            trans_a=trans_a,
            trans_b=trans_b,
        )
    except ValidationError as exc:
        # The first problem, in words; pydantic's own dump (input echo, docs URL) is noise here.
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise typer.BadParameter(f"{where}: {first['msg']}" if where else first["msg"]) from None


def cli_host_id() -> str:
    """Return this host's id keyed as the daemon's: by the deployment secret when the agent
    settings have one, else by this host's own random key; never an unkeyed hash."""
    from agents.daemon.assemble import agent_host_id
    from agents.daemon.settings import load_settings

    return agent_host_id(load_settings(), require_secret=False)


def summary(run: Any) -> dict[str, Any]:
    """The --json object: winner, speedup, probe and compile time, every candidate."""
    by_id = {m.candidate.id: m for m in run.measurements}
    default = next((m for m in run.measurements if m.candidate.backend == "vendor-default"), None)
    winner = by_id.get(run.winner_id) if run.winner_id else None
    speedup = None
    if winner and default and winner.median_us and default.median_us:
        speedup = default.median_us / winner.median_us
    return {
        "problem": run.problem.canonical(),
        "hardware": run.hardware.name,
        "winner": (
            {
                "id": winner.candidate.id,
                "backend": winner.candidate.backend,
                "params": winner.candidate.params,
                "median_us": winner.median_us,
            }
            if winner
            else None
        ),
        "speedup_vs_default": speedup,
        "probe_ms": run.budget_ms,
        "compile_ms": run.compile_ms,
        "rationale": run.rationale,
        "candidates": [
            {
                "id": m.candidate.id,
                "backend": m.candidate.backend,
                "params": m.candidate.params,
                "median_us": m.median_us,
                "p10_us": m.p10_us,
                "p90_us": m.p90_us,
                "samples": m.samples,
                "valid": m.valid,
                "error": m.error,
            }
            for m in run.measurements
        ],
    }


def register(agent_app: typer.Typer) -> None:
    """Add `probe` to the `tps agent` group."""

    @agent_app.command("probe")
    def probe(
        shape: Annotated[
            str,
            typer.Option(
                help="gemm MxNxK[xBATCH], layernorm ROWSxCOLS, conv2d NxCxHxWxKxRxS[xSTRIDE[xPAD]]"
            ),
        ],
        op: Annotated[str, typer.Option(help="gemm, conv2d or layernorm")] = "gemm",
        dtype: Annotated[str, typer.Option(help="bf16, fp16, fp32, tf32, fp8_e4m3")] = "bf16",
        trans_a: Annotated[bool, typer.Option("--trans-a", help="A stored [K, M]")] = False,
        trans_b: Annotated[bool, typer.Option("--trans-b", help="B stored [N, K]")] = False,
        device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N")] = "auto",
        sm_limit: Annotated[int | None, typer.Option(help="green context of N SMs")] = None,
        op_config: Annotated[Path | None, typer.Option(help="op config YAML")] = None,
        cold_cache: Annotated[
            bool, typer.Option(help="time cold: rotate operand copies larger than the L2")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    ) -> None:
        """Probe one problem: every candidate measured, the winner and its speedup.

        Probe time (kernels compiled) and compile time are reported apart; --json prints one
        object with every candidate's median, spread, samples and validity.

        Examples:
          tps agent probe --op gemm --shape 4096x4096x4096 --dtype bf16 --trans-b
          tps agent probe --op layernorm --shape 8192x4096 --device cpu --json
          tps agent probe --op conv2d --shape 32x64x56x56x64x3x3x1x1 --cold-cache
        """
        from agents.errors import AgentError
        from agents.opconfig import OpConfig
        from agents.probe.assemble import build_engine
        from agents.probe.settings import ProbeSettings

        problem = parse_problem(op, shape, dtype, trans_a=trans_a, trans_b=trans_b)
        try:
            config = OpConfig.load(op_config) if op_config else None
            engine = build_engine(
                device=device,
                op_config=config,
                host_id=cli_host_id(),
                settings=ProbeSettings(cold_cache=cold_cache),
                sm_limit=sm_limit,
            )
            run = engine.probe(problem)
        except (AgentError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        data = summary(run)
        if as_json:
            typer.echo(json.dumps(data))
            return
        _render(data, run)


def _render(data: dict[str, Any], run: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{data['problem']} on {data['hardware']}")
    for column in ("candidate", "median µs", "spread µs (p10–p90)", "samples", "valid"):
        table.add_column(column, justify="left" if column == "candidate" else "right")
    winner_id = run.winner_id
    for m in sorted(run.measurements, key=lambda m: m.median_us or float("inf")):
        label = m.candidate.label() + (" ★" if m.candidate.id == winner_id else "")
        median = f"{m.median_us:.2f}" if m.median_us else "-"
        spread = f"{m.p10_us:.2f}–{m.p90_us:.2f}" if m.p10_us and m.p90_us else "-"
        valid = "yes" if m.valid else f"no: {(m.error or '')[:60]}"
        table.add_row(label, median, spread, str(m.samples), valid)
    console.print(table)
    winner = data["winner"]
    if winner:
        speedup = data["speedup_vs_default"]
        console.print(
            f"winner: [bold]{winner['backend']}[/] {winner['params'] or ''} "
            f"{winner['median_us']:.2f} µs"
            + (f", {speedup:.3f}x vs vendor-default" if speedup else "")
        )
    console.print(
        f"probe {data['probe_ms']:.1f} ms; compile/plan {data['compile_ms']:.1f} ms "
        "(reported apart)"
    )
