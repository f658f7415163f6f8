"""Run the Alembic migrations that ship inside the `migrations` package."""

from __future__ import annotations

import io
from importlib.resources import files
from pathlib import Path
from typing import TextIO

from alembic import command
from alembic.config import Config

from services.profiler_api.db import sqlalchemy_url


def alembic_config(url: str, *, stdout: TextIO | None = None) -> Config:
    """Return an Alembic config for `url` that works from any working directory."""
    location = Path(str(files("migrations")))
    config = Config(str(location / "alembic.ini"), stdout=stdout or io.StringIO())
    config.set_main_option("script_location", str(location))
    # ConfigParser interpolates %; a password may contain one.
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the schema at `url` to `revision`."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Downgrade the schema at `url` to `revision`."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str:
    """Return the revision the schema at `url` is at ('' when none)."""
    out = io.StringIO()
    command.current(alembic_config(url, stdout=out))
    return out.getvalue().strip()
