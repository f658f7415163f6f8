"""What autogenerate compares: the ORM's tables, not the partitions that migrations make."""

from __future__ import annotations

import re
from typing import Any

# Day partitions of measurements and their default partition (migration 0004).
PARTITION = re.compile(r"^measurements_(p\d{8}|default)$")


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Skip the partitions of partitioned tables; compare everything else."""
    return not (type_ == "table" and name is not None and PARTITION.match(name))
