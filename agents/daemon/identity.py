"""The host id: a keyed hash of the machine id, so that hosts are told apart but never named."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Sequence
from pathlib import Path

MACHINE_ID_PATHS = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def read_machine_id(paths: Sequence[Path] = MACHINE_ID_PATHS) -> str:
    """Return the first non-empty machine id among `paths`, else the MAC-derived node id."""
    for path in paths:
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value:
            return value
    # Containers without /etc/machine-id still have a stable node id; it never leaves the host raw.
    return f"node-{uuid.getnode():012x}"


def host_id(*, machine_id: str, secret: bytes) -> str:
    """Return HMAC-SHA256(machine id) under the deployment secret, as 64 hex digits."""
    return hmac.new(secret, machine_id.encode(), hashlib.sha256).hexdigest()
