"""The client against the real service on Postgres: every call typed, every failure classified."""

from __future__ import annotations

import socket

import pytest

from client import AuthError, RejectedError, ServiceClient, ServiceUnreachable
from tests.client.conftest import ClientFactory
from tests.conftest import LiveService
from tests.factories import hardware_spec, probe_run, unique_problem


def test_pushed_runs_are_stored_once_and_read_back(agent: ServiceClient) -> None:
    runs = [probe_run(), probe_run()]

    first = agent.push(runs)
    again = agent.push(runs)

    assert (first.accepted, first.duplicates, first.measurements) == (2, 0, 6)
    assert (again.accepted, again.duplicates) == (0, 2)
    assert agent.probe_run(runs[0].run_id) == runs[0]


def test_pushes_split_into_batches_add_up(agent: ServiceClient) -> None:
    runs = [probe_run() for _ in range(5)]

    result = agent.push(runs, max_runs=2)

    assert (result.accepted, result.measurements) == (5, 15)
    assert {r.run_id for r in result.runs} == {r.run_id for r in runs}


def test_priors_of_a_stored_pair_by_spec_by_ids_and_in_a_batch(agent: ServiceClient) -> None:
    run = probe_run()
    stored = agent.push([run]).runs[0]
    unseen = unique_problem()

    by_spec = agent.prior(run.hardware, run.problem, limit=2)
    by_ids = agent.prior_by_ids(stored.hardware_id, stored.problem_hash, limit=2)
    batch = agent.priors(run.hardware, [unseen, run.problem])

    assert by_spec.source == by_ids.source == "observed"
    assert [c.candidate_id for c in by_ids.candidates] == [
        c.candidate_id for c in by_spec.candidates
    ]
    assert by_spec.candidates[0].median_us == 100.0
    assert [p.problem_hash for p in batch] == [unseen.key_hash(), run.problem.key_hash()]
    assert batch[1].source == "observed"


def test_fleet_figures_are_typed(agent: ServiceClient) -> None:
    agent.push([probe_run(hardware=hardware_spec())])

    stats = agent.stats()
    hardware = agent.hardware()

    assert stats.runs >= 1 and stats.org_runs >= 1
    assert any(entry.spec.name == hardware_spec().name for entry in hardware)


def test_an_admin_lists_jobs_models_and_manages_tokens(admin: ServiceClient) -> None:
    issued = admin.create_token(role="agent", name="client test")
    listed = {t.id: t for t in admin.tokens()}
    mine = next(t for t in listed.values() if t.name == "client test" and t.revoked_at is None)
    revoked = admin.revoke_token(mine.id)

    assert issued.role == "agent" and issued.token
    assert revoked.revoked_at is not None
    assert isinstance(admin.jobs(), list)
    assert isinstance(admin.models(), list)


def test_a_revoked_token_is_refused_for_good(admin: ServiceClient, connect: ClientFactory) -> None:
    issued = admin.create_token(role="agent", name="to revoke")
    token_id = next(t.id for t in admin.tokens() if t.name == "to revoke" and not t.revoked_at)
    admin.revoke_token(token_id)

    with pytest.raises(AuthError) as err:
        connect(issued.token).stats()

    assert err.value.status == 401 and not err.value.retryable
    assert err.value.body is not None and err.value.body.detail


def test_an_agent_may_not_retrain(agent: ServiceClient) -> None:
    with pytest.raises(AuthError) as err:
        agent.retrain({"n_estimators": 5})

    assert err.value.status == 403


def test_a_bad_request_is_rejected_with_the_service_s_field_errors(admin: ServiceClient) -> None:
    with pytest.raises(RejectedError) as err:
        admin.retrain({"n_estimators": 0})

    assert err.value.status == 422 and not err.value.retryable
    assert err.value.body is not None and err.value.body.errors
    assert err.value.body.errors[0].loc == "n_estimators"


def test_a_missing_run_is_not_found(agent: ServiceClient) -> None:
    with pytest.raises(RejectedError) as err:
        agent.probe_run(probe_run().run_id)

    assert err.value.status == 404


def test_a_service_that_is_not_there_is_retryable(live_service: LiveService) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with ServiceClient.connect(f"http://127.0.0.1:{port}", token=live_service.agent_token) as tps:
        with pytest.raises(ServiceUnreachable) as err:
            tps.stats()

    assert err.value.retryable and err.value.status is None
