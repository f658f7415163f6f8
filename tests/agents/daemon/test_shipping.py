"""The agent against the real service and a real Postgres: nothing lost, nothing duplicated.

The service runs as a killable child process; Postgres is an embedded server in this
module's own data dir, so restarting it touches nothing else on the machine.
"""

from __future__ import annotations

import getpass
import gzip
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from agents.daemon.assemble import AssembledAgent, build_daemon
from agents.daemon.settings import AgentSettings, SourceSettings
from agents.daemon.status import read_status
from tests.agents.daemon.conftest import SECRET
from tests.agents.daemon.harness import OwnedPostgres, ServiceProcess, free_port
from tps.candidate import VENDOR_DEFAULT

pytestmark = pytest.mark.slow

MODEL_NAMES = ("llama3-8b", "mixtral-8x7b", "qwen2-72b")


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[OwnedPostgres]:
    # Not under pytest's temp root: run as root, pgserver starts Postgres as its own system
    # user, and any pytest session that starts meanwhile on the machine resets that root to
    # mode 0700, which locks the server out of its data dir (PANIC, all connections cut).
    root = Path(tempfile.mkdtemp(prefix="tps-owned-postgres-"))
    pg = OwnedPostgres(root)
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def database_url(postgres: OwnedPostgres) -> Iterator[str]:
    from services.profiler_api.db import scratch_database
    from services.profiler_api.migrate import upgrade

    with scratch_database(postgres.url, prefix="tps_agent_test") as url:
        upgrade(url)
        yield url


@pytest.fixture
def agent_token(database_url: str) -> str:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.service import Role, create_token

    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            token = create_token(session, org="agent-tests", role=Role.AGENT)
            session.commit()
    finally:
        engine.dispose()
    return token


def _token(database_url: str, org: str) -> str:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.service import Role, create_token

    engine = create_engine(database_url)
    try:
        with Session(engine) as session, session.begin():
            return create_token(session, org=org, role=Role.AGENT)
    finally:
        engine.dispose()


@pytest.fixture
def service(database_url: str, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The service, not yet started: each test decides when it comes up."""
    proc = ServiceProcess(
        database_url=database_url, port=free_port(), log_path=tmp_path / "svc.log"
    )
    yield proc
    proc.stop()


def write_shapes(path: Path, count: int) -> Path:
    """Write a shape list of `count` distinct small GEMMs, named after models as users do."""
    rows = ["name,m,n,k,trans_b"]
    for i in range(count):
        m, n, k = 1 + i % 50, 8 + 4 * ((i // 50) % 10), 8 * (1 + i // 500)
        rows.append(f"{MODEL_NAMES[i % 3]}.layer{i}.proj,{m},{n},{k},1")
    path.write_text("\n".join(rows) + "\n")
    return path


def agent_settings(tmp_path: Path, service: ServiceProcess, token: str, **kw) -> AgentSettings:
    shapes = kw.pop("shapes", None) or write_shapes(tmp_path / "workload.csv", kw.pop("count", 20))
    return AgentSettings(
        service_url=service.url,
        token=token,
        device="cpu",
        sources=SourceSettings(shape_csv=[shapes], dtype="fp32"),
        spool_path=tmp_path / "agent" / "spool.sqlite",
        cache_path=tmp_path / "agent" / "cache.json",
        deployment_secret=SECRET,
        push_batch_runs=kw.pop("push_batch_runs", 100),
        push_interval_s=0.25,
        push_timeout_s=10,
        push_max_attempts=kw.pop("push_max_attempts", 1000),
        push_backoff_initial_s=0.05,
        push_backoff_max_s=0.5,
        shutdown_flush_s=5,
        priors_timeout_ms=200,
        **kw,
    )


class Recorder:
    """Collects the ids of every run the agent produced, in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, run) -> None:
        with self._changed:
            self.ids.append(str(run.run_id))
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 120.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.ids) >= count, timeout=timeout_s):
                raise TimeoutError(f"the agent produced {len(self.ids)} runs, not {count}")


def stored_run_ids(database_url: str) -> Counter[str]:
    from services.profiler_api.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as conn:
        return Counter(str(row[0]) for row in conn.execute("SELECT run_id FROM probe_runs"))


def stored_measurements(database_url: str) -> dict[str, int]:
    from services.profiler_api.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute("SELECT run_id, count(*) FROM measurements GROUP BY run_id")
        return {str(run_id): count for run_id, count in rows}


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def run_in_thread(agent: AssembledAgent, stop: threading.Event, *, once: bool) -> threading.Thread:
    thread = threading.Thread(target=agent.daemon.run, args=(stop,), kwargs={"once": once})
    thread.start()
    return thread


# -- the chaos test ---------------------------------------------------------------------------


class OtherOrganisation:
    """A second organisation's client pushing its own batches through the same chaos.

    It retries each batch until the service answers 200 (a duplicate counts as stored), as
    any client must; every run it pushed must be stored once, under its organisation.
    """

    def __init__(self, service: ServiceProcess, token: str, *, batches: int) -> None:
        from tools.synthetic import FleetSimulator
        from tps.schemas import ProbeRunBatch

        runs = list(FleetSimulator(seed=42).runs(batches * 10, max_measurements=12))
        self.run_ids = [str(run.run_id) for run in runs]
        self.bodies = [
            ProbeRunBatch(runs=runs[i : i + 10]).model_dump_json().encode()
            for i in range(0, len(runs), 10)
        ]
        self.service = service
        self.token = token
        self.retries = 0
        self.failures: list[BaseException] = []

    def push_all(self, *, pace_s: float, deadline_s: float = 300.0) -> None:
        deadline = time.monotonic() + deadline_s
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            for body in self.bodies:
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError("the other organisation's pushes never got through")
                    try:
                        response = httpx.post(
                            f"{self.service.url}/v1/probe-runs",
                            content=body,
                            headers=headers,
                            timeout=30,
                        )
                        if response.status_code == 200:
                            break
                        assert response.status_code == 503, response.text
                    except httpx.TransportError:
                        pass
                    self.retries += 1
                    time.sleep(0.2)
                time.sleep(pace_s)
        except BaseException as exc:  # reported by the test thread
            self.failures.append(exc)


def stored_org_runs(database_url: str, org: str) -> Counter[str]:
    from services.profiler_api.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(
            "SELECT r.run_id FROM probe_runs r JOIN organisations o ON o.id = r.org_id "
            "WHERE o.name = %s",
            (org,),
        )
        return Counter(str(row[0]) for row in rows)


class LosingTransport(httpx.BaseTransport):
    """The real transport; on request, it loses the answer to one push after the service stored it.

    The push reaches the real service and commits; then `on_lost` runs (it kills the service)
    and the agent sees a dropped connection, as when a host or a proxy dies mid-answer.
    """

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self._armed: Callable[[], None] | None = None
        self.fired = threading.Event()
        self.lost_runs = 0
        self.lost_batches = 0

    def lose_next_answer(self, on_lost: Callable[[], None]) -> None:
        self.fired.clear()
        self._armed = on_lost

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if self._armed is None or request.url.path != "/v1/probe-runs":
            return response
        response.read()
        if not response.is_success:
            return response
        on_lost, self._armed = self._armed, None
        # The runs this batch stored anew: the agent never hears of them. (A batch of runs
        # resent after a kill can hold none: it is lost all the same.)
        self.lost_runs += int(json.loads(response.content)["accepted"])
        self.lost_batches += 1
        on_lost()
        self.fired.set()
        raise httpx.RemoteProtocolError("server disconnected before answering", request=request)

    def close(self) -> None:
        self.inner.close()


def test_chaos_every_run_arrives_exactly_once(
    tmp_path: Path,
    postgres: OwnedPostgres,
    database_url: str,
    agent_token: str,
    service: ServiceProcess,
    cpu_engine,
) -> None:
    """2,000 runs while the service is SIGKILLed 4 times and Postgres restarts once.

    Two of the kills land after the service stored a batch and before the agent heard so:
    the agent must resend it, and the service must not store it twice. A second
    organisation pushes its own batches all along; its runs too are stored once each.
    """
    total = 2000
    started = time.monotonic()
    service.start()
    recorder = Recorder()
    transport = LosingTransport()
    # Priors are off: this test is about shipping, and a priors round trip per run would
    # triple its length; test_warm_start_from_the_services_priors covers them.
    settings = agent_settings(tmp_path, service, agent_token, count=total, priors_enabled=False)
    agent = build_daemon(settings, engine=cpu_engine, on_run=recorder, transport=transport)
    chaos_log: list[str] = []

    def restart_service() -> None:
        time.sleep(0.3)
        service.start()

    def chaos() -> None:
        for at, action in ((150, "kill"), (500, "lose"), (900, "postgres"), (1300, "kill"),
                           (1700, "lose")):  # fmt: skip
            recorder.wait_for(at)
            if action == "kill":
                service.kill()
                restart_service()
            elif action == "lose":
                transport.lose_next_answer(on_lost=service.kill)
                if not transport.fired.wait(timeout=60):
                    raise TimeoutError("no push to lose")
                restart_service()
            else:
                postgres.restart()
            elapsed = time.monotonic() - started
            chaos_log.append(
                f"{action} at run {at}, back at run {len(recorder.ids)} ({elapsed:.0f} s)"
            )

    failures: list[BaseException] = []

    def chaos_guarded() -> None:
        try:
            chaos()
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    other = OtherOrganisation(service, _token(database_url, "other-org"), batches=60)
    other_thread = threading.Thread(target=other.push_all, kwargs={"pace_s": 0.5})
    chaos_thread = threading.Thread(target=chaos_guarded)
    chaos_thread.start()
    other_thread.start()
    try:
        agent.daemon.run(threading.Event(), once=True)  # returns when all is probed and pushed
    finally:
        chaos_thread.join(timeout=120)
        other_thread.join(timeout=300)
        agent.close()
    assert not failures, failures
    assert not other.failures, other.failures
    other_stored = stored_org_runs(database_url, "other-org")
    assert sorted(other_stored) == sorted(other.run_ids)
    assert set(other_stored.values()) == {1}

    produced = recorder.ids
    stored = stored_run_ids(database_url)
    resent = agent.daemon.metrics.registry.get_sample_value("tps_agent_runs_resent_total")
    print(f"\nchaos: {chaos_log}")
    print(
        f"chaos: produced {len(produced)} runs, stored {len(stored)} distinct ids in "
        f"{sum(stored.values())} rows; {transport.lost_runs} runs stored but unacknowledged, "
        f"{resent:.0f} resent as duplicates; {time.monotonic() - started:.0f} s"
    )
    assert service.kills == 4 and service.starts == 5 and postgres.restarts == 1
    assert len(produced) == total and len(set(produced)) == total
    duplicated = {run_id: n for run_id, n in stored.items() if n > 1}
    assert not duplicated
    missing, unexpected = set(produced) - set(stored), set(stored) - set(produced)
    unexpected -= set(other.run_ids)
    assert not missing and not unexpected, f"missing {len(missing)}, unexpected {len(unexpected)}"
    # The lost answers were really resent, and the service recognised them.
    assert transport.lost_batches == 2
    assert resent is not None and resent >= transport.lost_runs
    status = read_status(settings.spool_path)
    assert (status.spool_depth, status.dropped, status.quarantined) == (0, 0, 0)
    assert status.pushed >= total
    # Every run's measurements arrived once, whatever was resent.
    assert len(stored_measurements(database_url)) == total + len(other.run_ids)
    print(f"chaos: the other organisation retried {other.retries} pushes")


# -- the other failure modes ------------------------------------------------------------------


def test_service_down_when_the_agent_starts(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    recorder = Recorder()
    settings = agent_settings(tmp_path, service, agent_token, count=40)
    agent = build_daemon(settings, engine=cpu_engine, on_run=recorder)
    stop = threading.Event()
    thread = run_in_thread(agent, stop, once=False)
    try:
        recorder.wait_for(40)
        wait_until(lambda: read_status(settings.spool_path).push_errors >= 1, timeout_s=30,
                   what="a failed push")  # fmt: skip
        assert read_status(settings.spool_path).spool_depth == 40
        service.start()
        wait_until(lambda: read_status(settings.spool_path).spool_depth == 0, timeout_s=60,
                   what="the spool to drain")  # fmt: skip
    finally:
        stop.set()
        thread.join(timeout=60)
        agent.close()
    assert stored_run_ids(database_url) == Counter(recorder.ids)
    assert read_status(settings.spool_path).last_push_at is not None


def test_full_spool_drops_the_oldest_and_reports_them(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    recorder = Recorder()
    settings = agent_settings(tmp_path, service, agent_token, count=60, spool_max_runs=25,
                              push_max_attempts=1)  # fmt: skip
    agent = build_daemon(settings, engine=cpu_engine, on_run=recorder)
    agent.daemon.run(threading.Event(), once=True)  # service down: nothing can leave
    agent.close()

    status = read_status(settings.spool_path)
    assert (status.probed, status.dropped, status.spool_depth) == (60, 35, 25)
    assert agent.daemon.metrics.registry.get_sample_value("tps_agent_runs_dropped_total") == 35

    service.start()
    again = build_daemon(settings, engine=cpu_engine)
    again.daemon.pusher.drain()
    again.close()
    assert set(stored_run_ids(database_url)) == set(recorder.ids[-25:])


def test_corrupt_spool_file_is_reported_and_the_rest_delivered(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    recorder = Recorder()
    settings = agent_settings(tmp_path, service, agent_token, count=80, push_max_attempts=1)
    agent = build_daemon(settings, engine=cpu_engine, on_run=recorder)
    agent.daemon.run(threading.Event(), once=True)  # service down: all 80 stay spooled
    agent.close()

    raw = bytearray(settings.spool_path.read_bytes())
    victim = recorder.ids[40]
    start = raw.index(b'{"run_id":"' + victim.encode())
    raw[start : start + 3000] = b"\x00garbage\xff" * 300
    settings.spool_path.write_bytes(bytes(raw))

    service.start()
    recovered = build_daemon(settings, engine=cpu_engine)
    status = read_status(settings.spool_path)
    assert "damaged" in (status.last_error or "")
    recovered.daemon.pusher.drain()
    recovered.close()
    assert "damaged" in (read_status(settings.spool_path).last_error or "")

    stored = stored_run_ids(database_url)
    assert victim not in stored
    assert set(stored) <= set(recorder.ids)
    assert len(stored) >= 80 - 3  # only the runs under the damaged bytes are lost
    assert all(n == 1 for n in stored.values())


# -- anonymization ----------------------------------------------------------------------------


class RecordingTransport(httpx.BaseTransport):
    """The real HTTP transport, keeping a copy of every request body that leaves the host."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.bodies: list[bytes] = []
        self.hosts: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.hosts.append(request.url.host)
        body = request.read()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        self.bodies.append(body)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def host_identifiers(workload: Path) -> list[str]:
    """Everything that could name this machine, its user, or the workload."""
    found = {
        socket.gethostname(),
        socket.getfqdn(),
        getpass.getuser(),
        os.getcwd(),
        str(Path.home()),
        str(workload),
        str(workload.parent),
        workload.name,
        sys.executable,
        "pytest",
        *MODEL_NAMES,
    }
    try:
        found.add(Path("/etc/machine-id").read_text().strip())
    except OSError:
        pass
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found.add(address.address.split("%")[0])
    return sorted(x for x in found if x)


def test_payloads_carry_no_host_user_path_or_model_identifiers(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    service.start()
    settings = agent_settings(tmp_path, service, agent_token, count=30)
    transport = RecordingTransport()
    agent = build_daemon(settings, engine=cpu_engine, transport=transport)
    agent.daemon.run(threading.Event(), once=True)
    agent.close()

    pushes = [b for b in transport.bodies if b.startswith(b'{"runs"')]
    assert pushes and sum(len(json.loads(b)["runs"]) for b in pushes) == 30
    assert any(b.startswith(b'{"hardware"') for b in transport.bodies)  # priors requests too
    payload = b"\n".join(transport.bodies).decode()
    identifiers = host_identifiers(settings.sources.shape_csv[0])
    leaks = []
    for ident in identifiers:
        # Short generic words ("root") only count as whole words.
        pattern = re.escape(ident) if len(ident) > 5 else rf"(?<![\w.-]){re.escape(ident)}(?![\w-])"
        if re.search(pattern, payload, flags=re.IGNORECASE):
            leaks.append(ident)
    assert not leaks, f"payload leaks {leaks}"
    # Tensor data would be long runs of numbers; a run holds only measurements.
    for body in pushes:
        for run in json.loads(body)["runs"]:
            assert set(run) <= {
                "run_id", "host_id", "hardware", "problem", "measurements", "winner_id",
                "budget_ms", "compile_ms", "telemetry", "priors", "rationale", "agent_version",
                "source", "created_at",
            }  # fmt: skip
            assert run["host_id"] != Path("/etc/machine-id").read_text().strip()


def test_runs_go_to_the_ingest_url_and_priors_questions_to_the_service(
    tmp_path: Path, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    service.start()
    # Two names of one service: the ingest deployment's address, and the priors readers'.
    ingest_url = service.url.replace("127.0.0.1", "localhost")
    settings = agent_settings(tmp_path, service, agent_token, count=10, ingest_url=ingest_url)
    transport = RecordingTransport()
    agent = build_daemon(settings, engine=cpu_engine, transport=transport)
    agent.daemon.run(threading.Event(), once=True)
    agent.close()
    pushes = [
        h
        for h, b in zip(transport.hosts, transport.bodies, strict=True)
        if b.startswith(b'{"runs"')
    ]
    questions = [
        h
        for h, b in zip(transport.hosts, transport.bodies, strict=True)
        if b.startswith(b'{"hardware"')
    ]
    assert pushes and set(pushes) == {"localhost"}
    assert questions and set(questions) == {"127.0.0.1"}


# -- warm start from the service's priors ---------------------------------------------------


def test_warm_start_from_the_services_priors(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    service.start()
    shapes = write_shapes(tmp_path / "workload.csv", 12)
    first = build_daemon(
        agent_settings(tmp_path / "first", service, agent_token, shapes=shapes), engine=cpu_engine
    )
    first.daemon.run(threading.Event(), once=True)
    first.close()

    # A second host of the same kind, with an empty cache: the fleet's observations steer it.
    runs = []
    second_settings = agent_settings(
        tmp_path / "second", service, agent_token, shapes=shapes, priors_top_k=1
    )
    second = build_daemon(second_settings, engine=cpu_engine, on_run=runs.append)
    second.daemon.run(threading.Event(), once=True)
    second.close()

    assert len(runs) == 12
    steered = [r for r in runs if r.priors.used]
    assert len(steered) == len(runs), "the service has observed every one of these problems"
    for run in steered:
        assert len(run.priors.candidate_ids) == 1  # top_k=1, plus vendor-default
        measured = {m.candidate.id for m in run.measurements}
        assert measured <= {*run.priors.candidate_ids, VENDOR_DEFAULT.id}
        if run.winner_id in run.priors.candidate_ids:
            assert run.priors.winner_rank == 0
        else:
            assert run.priors.winner_rank is None
    stored = stored_run_ids(database_url)
    assert {str(r.run_id) for r in runs} <= set(stored)


# -- the command line: SIGTERM and status -----------------------------------------------------


def test_sigterm_stops_cleanly_and_status_reads_the_spool(
    tmp_path: Path, database_url: str, agent_token: str, service: ServiceProcess
) -> None:
    import signal
    import sqlite3
    import subprocess

    service.start()
    shapes = write_shapes(tmp_path / "workload.csv", 2000)
    config = tmp_path / "agent.yaml"
    spool = tmp_path / "state" / "spool.sqlite"
    config.write_text(
        f"service_url: {service.url}\n"
        "device: cpu\n"
        f"sources:\n  shape_csv: [{shapes}]\n  dtype: fp32\n"
        f"spool_path: {spool}\n"
        f"cache_path: {tmp_path / 'state' / 'cache.json'}\n"
        "push_interval_s: 0.5\n"
        "shutdown_flush_s: 3\n"
        "probe: {samples: 3, min_samples: 3, max_samples: 3, max_extra_ms: 0}\n"
    )
    env = {
        **os.environ,
        "TPS_AGENT_TOKEN": agent_token,
        "TPS_AGENT_DEPLOYMENT_SECRET": SECRET,
        "OMP_NUM_THREADS": "1",
    }
    tps = [str(Path(sys.executable).parent / "tps")]
    proc = subprocess.Popen(
        [*tps, "agent", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: spool.exists() and read_status(spool).probed >= 30,
            timeout_s=90,
            what="the agent to probe 30 problems",
        )
        # Status works from another process while the daemon holds the spool.
        live = subprocess.run(
            [*tps, "agent", "status", "--config", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert live.returncode == 0 and "running" in live.stdout, live.stdout + live.stderr
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output.decode()[-3000:]
    assert b"SIGTERM" in output

    status = read_status(spool)
    assert status.state == "stopped" and status.pid is None
    assert status.probed < 2000  # it stopped early
    assert status.probed == status.pushed + status.spool_depth  # nothing lost in between
    assert sqlite3.connect(spool).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(stored_run_ids(database_url)) == status.pushed

    shown = subprocess.run(
        [*tps, "agent", "status", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "spool depth" in shown and "stopped" in shown


# -- the demo hook -----------------------------------------------------------------------------


def test_agent_demo_shows_runs_arriving_and_priors_coming_back(
    tmp_path: Path, agent_token: str, service: ServiceProcess, cpu_engine
) -> None:
    import io

    from rich.console import Console

    from tools.demo.agent import run_agent_demo
    from tps.problem import ProblemKey

    service.start()
    shapes = [
        ProblemKey(op="gemm", dtype="fp32", dims={"m": m, "n": 64, "k": 32}, trans_b=True)
        for m in (1, 8, 16, 32)
    ]
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    first = run_agent_demo(
        service.url, agent_token, shapes, device="cpu", console=console,
        state_dir=tmp_path / "first", engine=cpu_engine,
    )  # fmt: skip
    second = run_agent_demo(
        service.url, agent_token, shapes, device="cpu", console=console,
        state_dir=tmp_path / "second", engine=cpu_engine,
    )  # fmt: skip

    assert (first.pushed, first.spool_depth, len(first.runs)) == (4, 0, 4)
    assert not first.steered
    assert second.pushed == 4 and len(second.steered) == 4
    shown = out.getvalue()
    assert "runs probed" in shown and "runs pushed" in shown and "Priors from the service" in shown
