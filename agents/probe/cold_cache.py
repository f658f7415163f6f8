"""Cold-cache arithmetic: how many operand copies push a problem's operands out of the L2."""

from __future__ import annotations

import math
from typing import Any


def operand_bytes(operands: Any) -> int:
    """Return the bytes of the tensors an operand set holds, each storage counted once."""
    storages: dict[int, int] = {}
    for value in vars(operands).values():
        if hasattr(value, "untyped_storage"):
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def cold_copies(operand_bytes: int, *, l2_bytes: int, limit: int) -> int:
    """Return how many operand copies hold at least twice the L2 (2 at least, `limit` at most)."""
    return min(limit, max(2, math.ceil(2 * l2_bytes / max(operand_bytes, 1)) + 1))
