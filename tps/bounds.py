"""Bounded field types of the wire schemas: every value a client sends has a limit.

A value that passes these types is stored as sent and reads back as it was stored:
floats are finite and in range, ints fit a Postgres bigint, strings are bounded and
carry no NUL byte (Postgres text cannot hold one), times are aware and plausible.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field

BIGINT_MAX = 2**63 - 1
INT4_MAX = 2**31 - 1
NO_NUL = r"^[^\x00]*$"
# Names that become keys: dims, params, dtypes. Printable ASCII without quotes or spaces.
KEY_PATTERN = r"^[A-Za-z0-9_.:+-]+$"
PREVIEW_CHARS = 40


def preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """Return `value` quoted, cut to its first `limit` characters: errors never echo a payload."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _not_text(value: object) -> object:
    if isinstance(value, str | bytes | bool):
        raise ValueError(f"must be a number, not a {type(value).__name__}")
    return value


# Ints accept 5 and 5.0 (JSON Schema's integers), never "5".
NotText = BeforeValidator(_not_text)

Key = Annotated[str, Field(min_length=1, max_length=64, pattern=KEY_PATTERN)]
Flag = Annotated[bool, Field(strict=True)]
Label = Annotated[str, Field(max_length=64, pattern=NO_NUL)]
Count = Annotated[int, Field(ge=0, le=INT4_MAX), NotText]

# Runs from before 2000 or from the far future are a broken clock, not a probe.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


def _plausible(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"must be between {EARLIEST.year} and {LATEST.year}")
    return value


Timestamp = Annotated[AwareDatetime, AfterValidator(_plausible)]
