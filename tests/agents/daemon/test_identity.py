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


def test_the_probe_cli_host_id_is_keyed_and_stable(tmp_path, monkeypatch) -> None:
    import hashlib
    import uuid

    from cli.agent_probe import cli_host_id

    monkeypatch.delenv("TPS_AGENT_DEPLOYMENT_SECRET", raising=False)
    monkeypatch.setenv("TPS_AGENT_HOST_KEY_PATH", str(tmp_path / "host.key"))
    first = cli_host_id()
    assert first == cli_host_id()  # the key is kept
    assert (tmp_path / "host.key").stat().st_mode & 0o077 == 0
    unkeyed = hashlib.sha256(f"tps-cli:{uuid.getnode()}".encode()).hexdigest()[:16]
    assert not first.startswith(unkeyed)
    monkeypatch.setenv("TPS_AGENT_DEPLOYMENT_SECRET", "fleet-secret")
    keyed = cli_host_id()
    assert keyed != first and len(keyed) == 64  # as the daemon's: HMAC under the secret
