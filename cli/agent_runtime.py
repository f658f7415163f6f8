"""`tps agent build-runtime`: build the runtime's native routers ahead of a program's first run."""

from __future__ import annotations

import time

import typer


def build_runtime() -> None:
    """Build the runtime's native routers now, instead of at a program's first `tuned()`.

    torch compiles them once per torch version with the host's C++ compiler and ninja, into
    TORCH_EXTENSIONS_DIR (by default ~/.cache/torch_extensions). Exits 1, saying why, where they
    cannot be built: programs then route through Python, about 1 µs more a call.

    Examples:
      tps agent build-runtime
      TORCH_EXTENSIONS_DIR=/opt/tps/extensions tps agent build-runtime
    """
    from rich.console import Console

    from agents.runtime import native

    console = Console()
    start = time.perf_counter()
    module = native.load()
    if module is None:
        reason = native.failure[-1] if native.failure else "unknown"
        console.print(f"[red]the native routers are not available:[/red] {reason}")
        raise typer.Exit(1)
    console.print(f"built {module.__file__} in {time.perf_counter() - start:.1f} s")


def register(agent_app: typer.Typer) -> None:
    agent_app.command("build-runtime")(build_runtime)
