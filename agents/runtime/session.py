"""A runtime with what surrounds it: the device and cache, the fleet, the record file, the spool."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agents.cache import ProbeCache
from agents.runtime.dispatch import AdmissionSettings, Mode, Runtime
from agents.runtime.fleet import FleetError, FleetPriors
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

log = logging.getLogger("agents.runtime")
# Winners PyTorch's TunableOp names and runs itself on ROCm.
NATIVE_ON_ROCM = frozenset({"hipblaslt", "rocblas"})


@dataclass
class RuntimeSession:
    """A Runtime plus the resources it was opened with; `close()` saves and pushes."""

    runtime: Runtime
    host_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    fleet: FleetPriors | None = None
    record: Path | None = None
    pusher: Any = None
    closers: list[Any] = field(default_factory=list)

    def warm_start(self, problems: list[ProblemKey] | None = None) -> int:
        """Ask the fleet once for the observed winners of the misses so far; return how many.

        The routes of those problems resolve again on their next call, through admission;
        in tune mode, misses the fleet has not measured are probed on their next call.
        """
        rt = self.runtime
        if problems is None:
            problems = [r.problem for r in rt.decisions() if r.reason == "miss"]  # type: ignore[misc]
        rt.defer_probes = False
        if self.fleet is None or not problems:
            self._forget_misses()
            return 0
        try:
            priors = self.fleet.fetch(rt.hardware, problems)
        except FleetError as exc:
            log.warning("no fleet warm start, the defaults run: %s", exc)
            self._forget_misses()
            return 0
        entries = self.fleet.entries(rt.hardware, problems, priors)
        rt.cache.merge(entries)
        if rt.cache.path is not None:
            rt.cache.save()
        rt.stats.fleet_winners += sum(1 for e in entries if e.winner.backend != "vendor-default")
        rt.forget({e.problem.key_hash() for e in entries}, misses=rt.mode is Mode.TUNE)
        return len(entries)

    def _forget_misses(self) -> None:
        rt = self.runtime
        rt.forget(misses=rt.mode is Mode.TUNE)

    def flush(self) -> int:
        """Push the probe runs this session spooled; return how many the service took."""
        return int(self.pusher.drain()) if self.pusher is not None else 0

    def close(self) -> None:
        """Write the record file (record mode), save the cache, push runs, release resources."""
        from agents.runtime.record import write_workload

        rt = self.runtime
        try:
            if rt.mode is Mode.RECORD and self.record is not None:
                written = write_workload(self.record, rt.problems())
                log.info("recorded %d problems to %s", written, self.record)
            if rt.cache.path is not None:
                rt.cache.save()
            self.flush()
        finally:
            for close in reversed(self.closers):
                close()
            self.closers.clear()


def open_session(
    *,
    device: str = "auto",
    cache: str | Path | ProbeCache | None = None,
    mode: Mode | str = Mode.DISPATCH,
    record: str | Path | None = None,
    service: str | None = None,
    token: str | None = None,
    bans: str | Path | None = None,
    admission: AdmissionSettings | None = None,
    probe_settings: Any = None,
    providers: list[str] | None = None,
    transport: httpx.BaseTransport | None = None,
    sm_limit: int | None = None,
) -> RuntimeSession:
    """Open the device and assemble a runtime from the agent's own parts and settings.

    `sm_limit` runs everything in a green context of that many SMs (CUDA): the session's
    hardware is then the limited device, a GPU model of its own to the fleet.

    Defaults come from the agent's settings (TPS_AGENT_*): its cache file, so winners the
    agent probed are dispatched here, its service URL and token, its deployment secret
    for the host id of runs this runtime probes.
    """
    from agents.daemon.settings import load_settings
    from agents.probe.assemble import build_engine

    mode = Mode(mode)
    agent = load_settings()
    if mode is Mode.RECORD and record is None:
        raise ValueError("record mode needs a record file (record=PATH)")
    if isinstance(cache, ProbeCache):
        probe_cache = cache
    else:
        probe_cache = ProbeCache.load(Path(cache) if cache is not None else agent.cache_path)
    host = _host_id(agent)
    engine = build_engine(
        device=device,
        host_id=host,
        settings=probe_settings or agent.probe,
        providers=providers,
        bans_path=bans,
        sm_limit=sm_limit,
    )
    session = RuntimeSession(
        runtime=Runtime(
            cache=probe_cache,
            device=engine.device,
            hardware=engine.hardware(),
            providers={p.backend: p for p in engine.providers},
            mode=mode,
            bans=engine.bans,
            probe=engine.probe,
            admission=admission or AdmissionSettings(min_gain=engine.settings.min_gain),
            native_backends=NATIVE_ON_ROCM if engine.device.is_rocm else frozenset(),
        ),
        host_id=host,
        record=Path(record) if record is not None else None,
    )
    if engine.device.is_rocm:
        from agents.runtime.tunableop import apply_tunableop

        results = (probe_cache.path or agent.cache_path).with_suffix(".tunableop.csv")
        rows = apply_tunableop(probe_cache, results)
        log.info("PyTorch TunableOp runs %d cached winners from %s", rows, results)
    if service is not None:
        _connect(session, agent, service=service, token=token, transport=transport)
    return session


def _connect(
    session: RuntimeSession,
    agent: Any,
    *,
    service: str,
    token: str | None,
    transport: httpx.BaseTransport | None,
) -> None:
    from agents.daemon.metrics import AgentMetrics
    from agents.daemon.pusher import Pusher, RetryPolicy
    from agents.daemon.spool import Spool

    rt = session.runtime
    token = token or (agent.token.get_secret_value() if agent.token else None)
    client = httpx.Client(base_url=service.rstrip("/"), timeout=30.0, transport=transport)
    session.closers.append(client.close)
    session.fleet = FleetPriors(client=client, token=token, margin=rt.admission.min_gain)
    rt.defer_probes = rt.mode is Mode.TUNE  # ask the fleet before probing anything
    spool = Spool(agent.spool_path, max_runs=agent.spool_max_runs).open()
    session.closers.append(spool.close)
    push_client = client
    if service.rstrip("/") == agent.service_url and agent.push_url != agent.service_url:
        push_client = httpx.Client(base_url=agent.push_url, timeout=30.0, transport=transport)
        session.closers.append(push_client.close)
    session.pusher = Pusher(
        spool=spool,
        client=push_client,
        token=token,
        batch_runs=agent.push_batch_runs,
        policy=RetryPolicy(max_attempts=3, initial_s=0.5, max_s=5.0),
        metrics=AgentMetrics(),
    )

    def spool_run(run: ProbeRun) -> None:
        spool.put([run])

    rt.on_probe = spool_run


def _host_id(agent: Any) -> str:
    """The keyed host id where a deployment secret is set; else a random one per process."""
    from agents.daemon.identity import host_id, read_machine_id

    if agent.deployment_secret is not None and agent.deployment_secret.get_secret_value():
        return host_id(machine_id=read_machine_id(), secret=agent.require_secret())
    return uuid.uuid4().hex
