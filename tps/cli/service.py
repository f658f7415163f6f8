"""Commands of this domain."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this domain's commands to `app`."""
