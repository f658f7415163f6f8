"""The agent's steps of `tps demo`, wired here because the service may not import agents."""

from __future__ import annotations

import logging
import shutil

from services.profiler_api.auth.service import Role
from tools.demo.service import DemoContext, DemoStep
from tps.problem import ProblemKey

# A short shape list: decode and prefill projections, and the unaligned shapes where
# padding pays. On a CPU they are scaled down so that the demo stays quick.
GPU_SHAPES = [(1, 4096, 4096), (16, 6144, 4096), (128, 4096, 14336), (4095, 4095, 4095)]
CPU_SHAPES = [(1, 1024, 1024), (16, 1536, 1024), (64, 1024, 2048), (255, 511, 1023)]


def _shapes(device: str) -> tuple[list[ProblemKey], str]:
    dims, dtype = (GPU_SHAPES, "bf16") if device == "cuda" else (CPU_SHAPES, "fp32")
    problems = [
        ProblemKey(op="gemm", dtype=dtype, dims={"m": m, "n": n, "k": k}, trans_b=True)
        for m, n, k in dims
    ]
    return problems, dtype


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_agents(ctx: DemoContext) -> None:
    """Probe a short shape list on this machine's device, then do it again from a fresh host.

    The first agent has no priors for this hardware and probes every candidate. The second
    starts with an empty cache, asks the service for priors and probes only the shortlist.
    """
    from agents.probe.settings import ProbeSettings
    from tools.demo.agent import run_agent_demo

    # The progress bars say what the pusher's INFO lines would.
    logging.getLogger("agents").setLevel(logging.WARNING)
    device = _device()
    problems, dtype = _shapes(device)
    # A CPU's timings are noisy and slow: fewer samples keep the demo short.
    probe = ProbeSettings() if device == "cuda" else ProbeSettings(samples=5, max_samples=20)
    token = ctx.tokens[Role.AGENT]
    hosts = {"host-1": "first host: full probes", "host-2": "second host: warm start from priors"}
    for name, title in hosts.items():
        # Each host starts empty: a cache left by an earlier demo would answer without probing.
        state = ctx.output_dir / "agents" / name
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        ctx.console.print(f"[bold]{title}[/] ({len(problems)} {dtype} GEMMs on {device})")
        result = run_agent_demo(
            ctx.base_url,
            token,
            problems,
            device=device,
            console=ctx.console,
            dtype=dtype,
            probe=probe,
            state_dir=state,
        )
        ctx.console.print(
            f"{len(result.runs)} probe runs, {result.pushed} pushed, "
            f"{result.spool_depth} left in the spool; its cache: {state / 'cache.json'}"
        )


AGENT_STEPS: list[tuple[str, DemoStep]] = [("run agents", run_agents)]
