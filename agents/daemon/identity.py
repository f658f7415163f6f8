"""The host id: a keyed hash of the machine id, so that hosts are told apart but never named."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
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


def local_key(path: Path) -> bytes:
    """Return this host's own random key, created (readable by its owner only) on first use.

    It keys the host id where no deployment secret is configured (`tps agent probe`), so
    the id is never a plain hash of the machine id or the MAC address, which a reader of
    the id could recover by trying every value.
    """
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def host_id(*, machine_id: str, secret: bytes) -> str:
    """Return HMAC-SHA256(machine id) under the deployment secret, as 64 hex digits."""
    return hmac.new(secret, machine_id.encode(), hashlib.sha256).hexdigest()
