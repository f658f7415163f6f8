"""The memo of the model's answers, and the table the sources of priors are built from."""

from __future__ import annotations

import threading

import pytest

from services.profiler_api.model_registry.cache import ActiveModelCache
from services.profiler_api.priors.model import AnswerMemo, FamilyPriors, ModelPriors
from services.profiler_api.priors.observed import ObservedPriors
from services.profiler_api.priors.table import PRIOR_SOURCES, build_prior_sources
from tps.schemas import Prior


def _prior(tag: str) -> Prior:
    return Prior(hardware_fingerprint=tag, problem_hash="", canonical="", reason=tag)


def test_memo_answers_repeats_from_memory_and_forgets_the_least_recent() -> None:
    memo = AnswerMemo(size=1)
    calls: list[str] = []

    def compute(tag: str) -> Prior:
        calls.append(tag)
        return _prior(tag)

    first = memo.get("a", lambda: compute("a"))
    assert memo.get("a", lambda: compute("a")) is first
    memo.get("b", lambda: compute("b"))  # evicts a
    assert memo.get("a", lambda: compute("a")) is not first
    assert calls == ["a", "b", "a"]


def test_memo_computes_once_for_concurrent_askers() -> None:
    memo = AnswerMemo()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> Prior:
        calls.append(1)
        started.set()
        assert release.wait(5.0)
        return _prior("slow")

    answers: list[Prior] = []
    first = threading.Thread(target=lambda: answers.append(memo.get("k", slow)))
    first.start()
    assert started.wait(5.0)
    second = threading.Thread(target=lambda: answers.append(memo.get("k", slow)))
    second.start()
    release.set()
    first.join(5.0)
    second.join(5.0)
    assert calls == [1] and len(answers) == 2 and answers[0] is answers[1]


def test_memo_forgets_a_failed_answer() -> None:
    memo = AnswerMemo()

    def fail() -> Prior:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError):
        memo.get("k", fail)
    assert memo.get("k", lambda: _prior("ok")).reason == "ok"


def test_sources_are_built_in_the_order_asked_and_share_one_active_model() -> None:
    assert [name for name, _ in PRIOR_SOURCES] == ["observed", "compiled", "model", "family"]
    active = ActiveModelCache()
    family, observed, model = build_prior_sources(["family", "observed", "model"], active=active)
    assert isinstance(family, FamilyPriors) and isinstance(model, ModelPriors)
    assert isinstance(observed, ObservedPriors)
    assert family.active is active and model.active is active
    assert [s.name for s in (family, observed, model)] == ["family", "observed", "model"]
    with pytest.raises(ValueError, match="unknown prior sources \\['nearest'\\]"):
        build_prior_sources(["observed", "nearest"], active=active)
