"""A question asked by many requests at once is answered once, on one worker thread."""

from __future__ import annotations

import asyncio
import threading
from contextlib import nullcontext
from typing import Any

import pytest

from services.profiler_api.priors.cache import PriorAnswerCache
from services.profiler_api.priors.query import PriorQuery
from services.profiler_api.priors.service import PriorService
from tests.factories import gemm_problem, hardware_spec
from tps.schemas import Prior

QUERY = PriorQuery.of(hardware_spec(), gemm_problem(), limit=8)


class SlowQuestion:
    """An answer that takes until `release` is set, counting how often it was computed."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.threads: set[int] = set()
        self.started = threading.Event()
        self.release = threading.Event()
        self.error = error

    def __call__(self, session: Any) -> Prior:
        self.calls += 1
        self.threads.add(threading.get_ident())
        self.started.set()
        assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        return QUERY.empty(f"answered {self.calls} time(s)")


def service() -> PriorService:
    return PriorService([], cache=PriorAnswerCache(size=0, ttl_s=0.0))


def sessions() -> Any:
    return nullcontext(None)


async def _ask_together(priors: PriorService, ask: SlowQuestion, n: int) -> list[Any]:
    asking = [asyncio.ensure_future(priors.answer_once(sessions, "q", ask)) for _ in range(n)]
    await asyncio.get_running_loop().run_in_executor(None, ask.started.wait, 10)
    ask.release.set()
    return await asyncio.gather(*asking, return_exceptions=True)


def test_requests_asking_the_same_question_at_once_compute_it_once() -> None:
    priors, ask = service(), SlowQuestion()
    answers = asyncio.run(_ask_together(priors, ask, 50))
    assert ask.calls == 1 and len(ask.threads) == 1
    assert all(a.body == answers[0].body for a in answers)
    assert b"answered 1 time(s)" in answers[0].body
    assert priors._answering == {}  # nothing left behind for the next question

    # once answered, the same question asked again is computed again (the cache is off here)
    again = SlowQuestion()
    again.release.set()
    asyncio.run(_ask_together(priors, again, 3))
    assert again.calls == 1


def test_a_caller_that_goes_away_leaves_the_answer_to_the_others() -> None:
    priors, ask = service(), SlowQuestion()

    async def scenario() -> Any:
        first = asyncio.ensure_future(priors.answer_once(sessions, "q", ask))
        await asyncio.get_running_loop().run_in_executor(None, ask.started.wait, 10)
        second = asyncio.ensure_future(priors.answer_once(sessions, "q", ask))
        await asyncio.sleep(0)
        first.cancel()  # its client hung up
        ask.release.set()
        answer = await second
        with pytest.raises(asyncio.CancelledError):
            await first
        return answer

    answer = asyncio.run(scenario())
    assert ask.calls == 1 and b"answered 1 time(s)" in answer.body


def test_an_error_reaches_every_waiter_and_the_next_request_asks_again() -> None:
    priors, ask = service(), SlowQuestion(error=ValueError("no such hardware"))
    outcomes = asyncio.run(_ask_together(priors, ask, 5))
    assert ask.calls == 1
    assert all(isinstance(o, ValueError) and "no such hardware" in str(o) for o in outcomes)
    fixed = SlowQuestion()
    fixed.release.set()
    assert b"answered" in asyncio.run(_ask_together(priors, fixed, 1))[0].body
    assert fixed.calls == 1
