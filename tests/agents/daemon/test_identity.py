"""The host id is a keyed hash of the machine id."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from agents.daemon.identity import host_id, read_machine_id


def test_host_id_is_the_hmac_of_the_machine_id() -> None:
    expected = hmac.new(b"secret", b"abc123", hashlib.sha256).hexdigest()
    assert host_id(machine_id="abc123", secret=b"secret") == expected


def test_another_deployment_secret_gives_an_unlinkable_id() -> None:
    assert host_id(machine_id="abc", secret=b"a") != host_id(machine_id="abc", secret=b"b")


def test_machine_id_falls_back_along_the_paths(tmp_path: Path) -> None:
    empty, second = tmp_path / "empty", tmp_path / "second"
    empty.write_text("\n")
    second.write_text("feedface\n")
    assert read_machine_id([tmp_path / "missing", empty, second]) == "feedface"
    assert read_machine_id([tmp_path / "missing"]).startswith("node-")
