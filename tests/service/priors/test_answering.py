"""Model answers computed in processes of their own: the same answers, and none lost."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from models.bundle import ModelBundle, checksum, train_bundle
from services.profiler_api import migrate
from services.profiler_api.auth.service import Role
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.model_registry import repository as registry
from services.profiler_api.priors.answering import (
    KEEP_VERSIONS,
    AnswerPool,
    family_answer,
    model_answer,
)
from services.profiler_api.priors.query import PriorQuery
from services.profiler_api.settings import Settings
from tests.factories import tuning_runs
from tools.local_service import issue_tokens, running_service
from tps.catalog import resolve
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

READY_S = 120.0


@pytest.fixture(scope="module")
def runs() -> list[ProbeRun]:
    return tuning_runs(["RTX A4000", "W6600"], variant="answering_test")


def _bundle(runs: list[ProbeRun], trees: int) -> tuple[ModelBundle, bytes]:
    bundle = train_bundle(
        runs, model_params={"n_estimators": trees, "n_jobs": 1}, seed=0, select_policy=False
    )
    artifact = bundle.to_bytes()
    return ModelBundle.from_bytes(artifact), artifact


@pytest.fixture(scope="module")
def bundles(runs: list[ProbeRun]) -> list[tuple[ModelBundle, bytes]]:
    # two versions that answer differently
    return [_bundle(runs, 3), _bundle(tuning_runs(["A100", "W6600"], variant="answering_test"), 6)]


def _wait_ready(pool: AnswerPool, count: int) -> None:
    deadline = time.monotonic() + READY_S
    while pool.ready() < count:
        assert time.monotonic() < deadline, "the answering processes did not load the model"
        time.sleep(0.05)


class Counted:
    def __init__(self) -> None:
        self.where: list[str] = []

    def __call__(self, where: str) -> None:
        self.where.append(where)


def _query(runs: list[ProbeRun], gpu: str = "MI300X") -> PriorQuery:
    return PriorQuery.of(resolve(gpu), runs[0].problem, limit=8)


def test_a_process_gives_the_answer_the_api_process_would(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]]
) -> None:
    bundle, artifact = bundles[0]
    counted = Counted()
    pool = AnswerPool(1, on_answer=counted)
    try:
        query = _query(runs)
        # Before any version is published, and while the process loads, this thread answers.
        assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
        pool.publish(1, artifact, checksum(artifact))
        _wait_ready(pool, 1)
        counted.where.clear()
        for gpu in ("MI300X", "A100", "RTX 3090"):
            query = _query(runs, gpu)
            answer = pool.answer("model", 1, bundle, query)
            assert answer.candidates and answer == model_answer(bundle, 1, query)
        unmeasured = PriorQuery.of(
            resolve("MI300X"),
            ProblemKey(op="convolution", dims={"x": 33, "y": 65}, variant="answering_test"),
            limit=4,
        )
        family = pool.answer("family", 1, bundle, unmeasured)
        assert family.candidates and family == family_answer(bundle, 1, unmeasured)
        assert counted.where == ["process"] * 4
    finally:
        pool.close()


def test_a_process_that_ends_loses_no_answer_and_is_started_again(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]]
) -> None:
    bundle, artifact = bundles[0]
    counted = Counted()
    pool = AnswerPool(1, on_answer=counted)
    try:
        pool.publish(1, artifact, checksum(artifact))
        _wait_ready(pool, 1)
        executor = pool._slots[0].executor
        assert executor is not None
        pid = next(iter(executor._processes))  # the one process of its executor
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        counted.where.clear()
        query = _query(runs)
        assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
        assert counted.where == ["api"]
        # The next question starts a new process and loads the model in it.
        assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
        _wait_ready(pool, 1)
        assert pool._slots[0].executor is not executor
        counted.where.clear()
        assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
        assert counted.where == ["process"]
    finally:
        pool.close()


def test_a_new_version_is_loaded_in_the_processes_and_old_files_are_removed(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]]
) -> None:
    (first, first_artifact), (second, second_artifact) = bundles
    query = _query(runs)
    assert model_answer(first, 1, query) != model_answer(second, 2, query)
    counted = Counted()
    pool = AnswerPool(2, on_answer=counted)
    try:
        pool.publish(1, first_artifact, checksum(first_artifact))
        _wait_ready(pool, 2)
        pool.publish(2, second_artifact, checksum(second_artifact))
        _wait_ready(pool, 2)
        counted.where.clear()
        assert pool.answer("model", 2, second, query) == model_answer(second, 2, query)
        # A question still on version 1 is answered with version 1, by this thread.
        assert pool.answer("model", 1, first, query) == model_answer(first, 1, query)
        assert counted.where == ["process", "api"]
        pool.publish(3, first_artifact, checksum(first_artifact))
        folder = pool._folder
        assert folder is not None
        assert len(list(folder.glob("*.tpsm"))) == KEEP_VERSIONS
    finally:
        pool.close()
    assert not folder.exists()


def test_an_artifact_that_does_not_load_leaves_the_answers_to_the_api_process(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    bundle, artifact = bundles[0]
    counted = Counted()
    pool = AnswerPool(1, on_answer=counted)
    try:
        pool.publish(1, artifact, "0" * 64)  # a checksum the artifact does not have
        deadline = time.monotonic() + READY_S
        while pool._slots[0].loading is not None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert pool.ready() == 0
        query = _query(runs)
        assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
        assert counted.where == ["api"]
        assert "could not load" in caplog.text or "failed" in caplog.text
    finally:
        pool.close()


def test_without_processes_the_thread_answers_and_nothing_is_written(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]], tmp_path: Path
) -> None:
    bundle, artifact = bundles[0]
    counted = Counted()
    pool = AnswerPool(0, on_answer=counted)
    pool.publish(1, artifact, checksum(artifact))
    query = _query(runs)
    assert pool.answer("model", 1, bundle, query) == model_answer(bundle, 1, query)
    assert counted.where == ["api"] and pool._folder is None and pool.ready() == 0
    pool.close()


def _where(text: str) -> dict[str, float]:
    return {
        sample.labels["where"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "tps_model_answers"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_the_service_answers_new_gpus_from_its_answering_process(
    postgres_server_url: str, runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]]
) -> None:
    bundle, artifact = bundles[0]
    with scratch_database(postgres_server_url, prefix="tps_answering") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings(db_pool_size=1))
        with Session(engine) as session, session.begin():
            version = registry.add_version(
                session,
                ops=["convolution"],
                data_counts={},
                params={},
                metrics={},
                artifact=artifact,
                sha256=checksum(artifact),
                job_id=None,
            )
            registry.activate(session, version)
        engine.dispose()
        token = issue_tokens(url, org="answering", roles=[Role.AGENT]).tokens[Role.AGENT]
        env = {"TPS_TRAINING_WORKER": "false", "TPS_MODEL_ANSWER_PROCESSES": "1"}
        headers = {"Authorization": f"Bearer {token}"}
        with (
            running_service(url, env=env) as service,
            httpx.Client(base_url=service.base_url, headers=headers, timeout=60.0) as client,
        ):
            spec = resolve("MI300X")
            deadline = time.monotonic() + READY_S
            for asked in range(10_000):
                # A GPU no one asked about before: the model computes each answer.
                hardware = spec.model_copy(update={"clock_mhz": spec.clock_mhz + asked + 1})
                query = PriorQuery.of(hardware, runs[0].problem, limit=8)
                body = {
                    "hardware": hardware.model_dump(mode="json"),
                    "problem": runs[0].problem.model_dump(mode="json"),
                    "limit": 8,
                }
                response = client.post("/v1/priors", json=body)
                assert response.status_code == 200, response.text
                expected = model_answer(bundle, version, query)
                assert response.json() == json.loads(expected.model_dump_json())
                where = _where(client.get("/metrics").text)
                if where.get("process", 0) >= 3:
                    break
                assert time.monotonic() < deadline, f"no answer from a process: {where}"
                time.sleep(0.1)


def test_auto_answer_processes_start_only_where_the_cpus_are_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from services.profiler_api import settings as settings_module

    auto = Settings(model_answer_processes="auto")
    assert auto.answer_processes(cpus=2) == 0
    assert auto.answer_processes(cpus=settings_module.AUTO_ANSWER_MIN_CPUS - 1) == 0
    many = settings_module.AUTO_ANSWER_MIN_CPUS
    assert auto.answer_processes(cpus=many) == settings_module.AUTO_ANSWER_PROCESSES > 0
    assert Settings(model_answer_processes=3).answer_processes(cpus=2) == 3
    monkeypatch.setenv("TPS_MODEL_ANSWER_PROCESSES", "4")
    assert Settings().answer_processes(cpus=64) == 4
    monkeypatch.setenv("TPS_MODEL_ANSWER_PROCESSES", "auto")
    assert Settings().model_answer_processes == "auto"
    monkeypatch.delenv("TPS_MODEL_ANSWER_PROCESSES")
    assert Settings().model_answer_processes == "auto"  # the default
    for bad in ("-1", "65", "many"):
        monkeypatch.setenv("TPS_MODEL_ANSWER_PROCESSES", bad)
        with pytest.raises(ValueError, match="model_answer_processes"):
            Settings()


def test_auto_counts_the_cpus_the_replica_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import joblib

    from services.profiler_api import settings as settings_module

    auto = Settings(model_answer_processes="auto")
    monkeypatch.setattr(joblib, "cpu_count", lambda: settings_module.AUTO_ANSWER_MIN_CPUS)
    assert auto.answer_processes() == settings_module.AUTO_ANSWER_PROCESSES
    monkeypatch.setattr(joblib, "cpu_count", lambda: 2)  # a container limited to 2 CPUs
    assert auto.answer_processes() == 0


def test_an_offer_is_ranked_alone_for_a_problem_measured_or_never_measured(
    runs: list[ProbeRun], bundles: list[tuple[ModelBundle, bytes]]
) -> None:
    bundle, _ = bundles[0]
    measured = runs[0].problem
    unseen = measured.model_copy(update={"dims": {"x": 1024, "y": 512}})
    universe = [m.candidate for m in runs[0].measurements]
    # what this host offers: a third of the universe and a candidate no GPU ever measured
    never = universe[0].model_copy(update={"params": {**universe[0].params, "tile_size": 16}})
    offered = [*universe[::3], never]
    ids = {c.id for c in offered}
    for problem, answer in ((measured, model_answer), (unseen, family_answer)):
        query = PriorQuery.of(resolve("MI300X"), problem, limit=5, offered=offered)
        prior = answer(bundle, 1, query)
        assert len(prior.candidates) == 5 and {c.candidate_id for c in prior.candidates} <= ids
        assert [c.rank for c in prior.candidates] == list(range(5))
        without = answer(bundle, 1, PriorQuery.of(resolve("MI300X"), problem, limit=5))
        assert without.candidates and query.offered_key is not None
    # never measured: the model's ranker orders the whole offer, the family's winners leave it
    family = family_answer(bundle, 1, PriorQuery.of(resolve("MI300X"), unseen, limit=5))
    assert not {c.candidate_id for c in family.candidates} <= ids
    assert prior.source == "family" and prior.candidates[0].confidence > 0
    full = family_answer(
        bundle, 1, PriorQuery.of(resolve("MI300X"), unseen, limit=len(offered), offered=offered)
    )
    scores = bundle.models[unseen.op].predict_frame(resolve("MI300X"), unseen, offered)
    by_id = dict(zip(scores["candidate_id"], scores["ranker_score"], strict=True))
    ranked = [by_id[c.candidate_id] for c in full.candidates]
    assert ranked == sorted(ranked, reverse=True) and len(full.candidates) == len(offered)


def test_an_offer_keeps_a_sources_answer_to_the_offered_candidates(runs: list[ProbeRun]) -> None:
    from tps.schemas import Prior, PriorCandidate

    universe = [m.candidate for m in runs[0].measurements][:6]
    query = PriorQuery.of(resolve("MI300X"), runs[0].problem, limit=6, offered=universe[3:])
    prior = Prior(
        hardware_fingerprint=query.hardware_fingerprint,
        problem_hash=query.problem_hash,
        canonical="",
        source="observed",
        candidates=[
            PriorCandidate(candidate_id=c.id, candidate=c, rank=i, source="observed", confidence=1)
            for i, c in enumerate(universe)
        ],
    )
    kept = query.among_offered(prior)
    assert [c.candidate_id for c in kept.candidates] == [c.id for c in universe[3:]]
    assert [c.rank for c in kept.candidates] == [0, 1, 2]
    none = PriorQuery.of(resolve("MI300X"), runs[0].problem, offered=[universe[0]]).among_offered(
        prior.model_copy(update={"candidates": prior.candidates[1:]})
    )
    assert not none.candidates and "none of its 5 candidates is among the 1 offered" in none.reason
    # the same offer in another order is the same question
    again = PriorQuery.of(resolve("MI300X"), runs[0].problem, offered=universe[3:][::-1])
    assert again.offered_key == query.offered_key
    assert PriorQuery.of(resolve("MI300X"), runs[0].problem).offered_key is None
