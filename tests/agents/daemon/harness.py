"""A real service in a killable subprocess, on a Postgres the test owns and may restart."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnedPostgres:
    """An embedded Postgres (pgserver) in the test's own data dir; never the machine's."""

    def __init__(self, root: Path) -> None:
        self.pgdata = root / "pgdata"
        self.server = None
        self.url = ""
        self.restarts = 0

    def start(self) -> str:
        """Start the server and return its SQLAlchemy URL (unix socket, no TCP port)."""
        import pgserver

        from services.profiler_api.db import sqlalchemy_url

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # pgserver gives pg_ctl 10 s to start, which a loaded machine can exceed; the server
        # keeps starting, and the next call finds it running.
        for attempt in range(3):
            try:
                self.server = pgserver.get_server(self.pgdata, cleanup_mode=None)
                break
            except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
                if attempt == 2:
                    raise
                # Forget the half-made handle, or pgserver would hand it back.
                pgserver.PostgresServer._instances.pop(self.pgdata.resolve(), None)
                time.sleep(5)
        self.url = sqlalchemy_url(self.server.get_uri())
        return self.url

    def _pg_ctl(self, *args: str) -> None:
        import pgserver

        assert self.server is not None
        pgserver.pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def restart(self) -> None:
        """Crash-restart the server: connections are cut, committed data survives by its WAL.

        Immediate mode skips the shutdown checkpoint, which under load can outlast pg_ctl.
        The server comes back through pgserver's own start, as at first, so that it logs to
        its data dir and lives on detached from the pg_ctl call that stopped it.
        """
        import pgserver

        self._pg_ctl("-w", "-t", "120", "-m", "immediate", "stop")
        pgserver.PostgresServer._instances.pop(self.pgdata.resolve(), None)
        self.server = None
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        if self.server is not None:
            try:
                self._pg_ctl("-w", "-m", "immediate", "stop")
            except subprocess.CalledProcessError:
                pass  # already stopped
            self.server = None


class ServiceProcess:
    """`uvicorn services.profiler_api.app:create_app` as a child process on a fixed port."""

    def __init__(self, *, database_url: str, port: int, log_path: Path) -> None:
        self.database_url = database_url
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True) -> None:
        env = {**os.environ, "TPS_DATABASE_URL": self.database_url, "TPS_LOG_LEVEL": "WARNING"}
        command = [
            sys.executable, "-m", "uvicorn", "--factory",
            "services.profiler_api.app:create_app",
            "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        log.close()
        self.starts += 1
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"service not ready: {self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, requests in flight are cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.kills += 1
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
