"""`tps serve` and `tps token create` as a user runs them: embedded Postgres, signals, output."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tools.local_service import free_port

TPS = [sys.executable, "-c", "from cli import main; main()"]


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TPS_DATABASE_URL"}
    tmp = data_dir.parent / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "TPS_DATA_DIR": str(data_dir),
        "TPS_TRAINING_WORKER": "false",
        "TMPDIR": str(tmp),
    }


def _left_in_tmp(data_dir: Path) -> list[str]:
    # runtime-UID is pgserver's lock folder where XDG_RUNTIME_DIR is unset: one per user.
    left = (data_dir.parent / "tmp").iterdir()
    return [path.name for path in left if not path.name.startswith("runtime-")]


def _wait_ready(process: subprocess.Popen[str], url: str, *, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready in {timeout_s} s")


def _postmaster_running(data_dir: Path) -> bool:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.is_file():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_sigterm_stops_the_embedded_postgres_and_token_create_is_quiet(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    port = free_port()
    process = subprocess.Popen(
        [*TPS, "serve", "--port", str(port), "--workers", "2"],
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_ready(process, f"http://127.0.0.1:{port}")
        assert _postmaster_running(data_dir)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert not _postmaster_running(data_dir), output
    assert json.loads((data_dir / ".handle_pids.json").read_text()) == []
    assert _left_in_tmp(data_dir) == []  # the workers' metrics folder is gone too
    for noise in ("pg_ctl", "commandline", "initdb", "alembic", "Context impl", "Uvicorn"):
        assert noise not in output, output
    assert len(output.splitlines()) < 12, output
    assert f"TPS service on http://127.0.0.1:{port}" in output
    assert output.strip().endswith("TPS service stopped")

    # The server is stopped; token create starts it, prints the token alone on stdout, stops it.
    result = subprocess.run(
        [*TPS, "token", "create", "--org", "acme", "--role", "agent"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("tps_"), result.stdout
    assert result.stderr.strip() == "agent token for acme (shown once):", result.stderr
    assert not _postmaster_running(data_dir)


def test_a_killed_holder_does_not_keep_the_embedded_postgres_running(tmp_path: Path) -> None:
    from tools.embedded_postgres import forget_dead_handles

    data_dir = tmp_path / "pgdata"
    data_dir.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(gone.stdout)
    (data_dir / ".handle_pids.json").write_text(json.dumps([dead, os.getpid()]))
    assert forget_dead_handles(data_dir) == [dead]
    assert json.loads((data_dir / ".handle_pids.json").read_text()) == [os.getpid()]


def test_a_busy_port_fails_before_the_url_is_printed(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [*TPS, "serve", "--port", str(port)],
            env=_env(tmp_path / "pgdata"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1, output
    assert f"port {port} on 127.0.0.1 is in use" in output
    assert "TPS service on" not in output
    assert not (tmp_path / "pgdata").exists()  # failed before the database was touched
