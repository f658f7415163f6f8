"""The daemon loop: probe new problems once, warm-start from priors, stop cleanly."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from agents.daemon.daemon import AgentDaemon
from agents.daemon.errors import PriorsError
from agents.daemon.metrics import AgentMetrics
from agents.daemon.pusher import Pusher, RetryPolicy
from agents.daemon.spool import Spool
from agents.daemon.status import read_status
from agents.daemon.warmstart import PriorsClient
from agents.daemon.workloads import WorkloadSources
from tests.agents.daemon.conftest import CPU, TILES, DictCache, ListEngine, gemm
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey
from tps.schemas import Prior, PriorCandidate


class Service:
    """An in-test service: stores pushed runs, answers priors from a table."""

    def __init__(self, priors: dict[str, Prior] | None = None) -> None:
        self.priors = priors or {}
        self.stored: list[str] = []
        self.asked: list[dict] = []  # the bodies of the priors requests

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/priors":
            body = json.loads(request.content)
            self.asked.append(body)
            canonical = ProblemKey.model_validate(body["problem"]).canonical()
            prior = self.priors.get(canonical) or Prior(
                hardware_fingerprint="x", problem_hash="y", canonical=canonical
            )
            return httpx.Response(200, content=prior.model_dump_json())
        ids = [r["run_id"] for r in json.loads(gzip.decompress(request.content))["runs"]]
        self.stored.extend(ids)
        return httpx.Response(200, json={"accepted": len(ids), "duplicates": 0, "measurements": 0})


def make_daemon(tmp_path: Path, service, shapes: list[tuple[int, int, int]], **kw) -> AgentDaemon:
    csv = tmp_path / "shapes.csv"
    csv.write_text("name,m,n,k,trans_b\n" + "".join(f"x,{m},{n},{k},1\n" for m, n, k in shapes))
    spool = Spool(tmp_path / "spool.sqlite", max_runs=1000).open()
    client = httpx.Client(base_url="http://tps.test", transport=httpx.MockTransport(service))
    metrics = AgentMetrics()
    return AgentDaemon(
        engine=kw.pop("engine", ListEngine()),
        cache=kw.pop("cache", DictCache()),
        spool=spool,
        pusher=Pusher(
            spool=spool,
            client=client,
            token="t",
            batch_runs=1000,
            policy=RetryPolicy(max_attempts=2, initial_s=0.01, max_s=0.02),
            metrics=metrics,
        ),
        sources=WorkloadSources(shape_csv=[csv], dtype="fp32"),
        metrics=metrics,
        priors=PriorsClient(client=client, token="t", timeout_s=0.2, top_k=2),
        **kw,
    )


def test_each_problem_is_probed_once_and_everything_is_shipped(tmp_path: Path) -> None:
    service = Service()
    shapes = [(1, 64, 64), (2, 64, 64), (1, 64, 64), (3, 64, 64)]
    daemon = make_daemon(tmp_path, service, shapes)

    daemon.run(threading.Event(), once=True)

    assert [p.dims["m"] for p, _ in daemon.engine.probed] == [1, 2, 3]
    assert len(service.stored) == 3
    status = read_status(tmp_path / "spool.sqlite")
    assert (status.spool_depth, status.pushed, status.cache_size) == (0, 3, 3)
    assert status.state == "stopped"


def test_cached_problems_are_not_probed_again(tmp_path: Path) -> None:
    cache = DictCache()
    warm = ListEngine().probe(gemm(1).model_copy(update={"dtype": "fp32"}))
    cache.put(warm)
    daemon = make_daemon(tmp_path, Service(), [(1, 64, 64), (2, 64, 64)], cache=cache)

    daemon.run(threading.Event(), once=True)

    assert [p.dims["m"] for p, _ in daemon.engine.probed] == [2]


def _prior_for(problem_m: int) -> Prior:
    problem = gemm(problem_m)
    ranked = [TILES[0], TILES[2], TILES[3]]  # tile 16, 64, 128: the measured best (64) is rank 1
    return Prior(
        hardware_fingerprint=CPU.fingerprint(),
        problem_hash=problem.key_hash(),
        canonical=problem.canonical(),
        source="model",
        candidates=[
            PriorCandidate(candidate_id=c.id, candidate=c, rank=i, source="model", confidence=0.5)
            for i, c in enumerate(ranked)
        ],
    )


def test_priors_shortlist_the_probe_and_are_recorded(tmp_path: Path) -> None:
    service = Service(priors={gemm(1).canonical(): _prior_for(1)})
    runs = []
    daemon = make_daemon(tmp_path, service, [(1, 64, 64), (2, 64, 64)], on_run=runs.append)

    daemon.run(threading.Event(), once=True)

    (_, only), (_, full) = daemon.engine.probed
    assert only == [TILES[0].id, TILES[2].id]  # top_k=2
    assert full is None  # no prior for m=2: the full probe
    steered = runs[0]
    assert {m.candidate.id for m in steered.measurements} == {
        TILES[0].id,
        TILES[2].id,
        VENDOR_DEFAULT.id,
    }
    assert steered.priors.used and steered.priors.source == "model"
    assert steered.priors.candidate_ids == [TILES[0].id, TILES[2].id]
    assert steered.priors.winner_rank == 1
    assert not runs[1].priors.used


def test_the_prior_is_asked_with_the_planned_shortlist_and_ranks_only_it(tmp_path: Path) -> None:
    # A prior that leads with a candidate this host never planned (another shape's winner).
    stranger = Candidate(backend="cpu-test", params={"tile": 48})
    prior = _prior_for(1)
    prior = prior.model_copy(
        update={
            "candidates": [
                PriorCandidate(
                    candidate_id=stranger.id,
                    candidate=stranger,
                    rank=0,
                    source="family",
                    confidence=0.4,
                ),
                *[c.model_copy(update={"rank": c.rank + 1}) for c in prior.candidates],
            ]
        }
    )
    service = Service(priors={gemm(1).canonical(): prior})
    runs = []
    daemon = make_daemon(tmp_path, service, [(1, 64, 64)], on_run=runs.append)

    daemon.run(threading.Event(), once=True)

    (asked,) = service.asked
    assert [Candidate.model_validate(c).id for c in asked["offered"]] == [c.id for c in TILES]
    assert daemon.engine.offered == [[c.id for c in TILES]]
    ((_, only),) = daemon.engine.probed
    assert only == [TILES[0].id, TILES[2].id]  # the stranger skipped, top_k=2 of the rest
    assert runs[0].priors.candidate_ids == only


def test_slow_priors_time_out_fast() -> None:
    # A listener that never answers: the client must give up at its deadline.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        with httpx.Client(base_url=url) as client:
            priors = PriorsClient(client=client, token=None, timeout_s=0.2, top_k=4)
            started = time.monotonic()
            with pytest.raises(PriorsError, match="no priors within 200 ms"):
                priors.fetch(CPU, gemm(1))
            assert time.monotonic() - started < 1.0


def test_unreachable_priors_fall_back_to_the_full_probe(tmp_path: Path) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    daemon = make_daemon(tmp_path, down, [(1, 64, 64)])
    daemon.run(threading.Event(), once=True)

    assert daemon.engine.probed[0][1] is None
    assert read_status(tmp_path / "spool.sqlite").spool_depth == 1  # kept for later


class StoppingEngine(ListEngine):
    """Sets the stop event while its second probe is in flight, as SIGTERM would."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop

    def probe(self, problem, *, only=None, steer=None):
        if len(self.probed) == 1:
            self.stop.set()
        return super().probe(problem, only=only, steer=steer)


def test_stop_lets_the_probe_in_flight_finish_and_keeps_the_spool_consistent(
    tmp_path: Path,
) -> None:
    stop = threading.Event()
    service = Service()
    shapes = [(m, 64, 64) for m in range(1, 6)]
    daemon = make_daemon(tmp_path, service, shapes, engine=StoppingEngine(stop))

    daemon.run(stop)

    assert len(daemon.engine.probed) == 2  # the one in flight finished; no new one started
    status = read_status(tmp_path / "spool.sqlite")
    assert status.state == "stopped" and status.pid is None
    assert status.probed == 2
    assert status.pushed + status.spool_depth == 2


def test_metrics_follow_the_work(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, Service(), [(1, 64, 64), (2, 64, 64)])
    daemon.run(threading.Event(), once=True)
    registry = daemon.metrics.registry
    assert registry.get_sample_value("tps_agent_runs_probed_total") == 2
    assert registry.get_sample_value("tps_agent_runs_pushed_total") == 2
    assert registry.get_sample_value("tps_agent_spool_depth") == 0
    assert registry.get_sample_value("tps_agent_priors_total", {"outcome": "empty"}) == 2
