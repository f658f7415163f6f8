"""The ingest beside the priors benchmark offers the rate asked, whatever each push takes."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import LiveService
from tools.bench.priors import IngestPacer, IngestProcess


class SlowIngest(http.server.BaseHTTPRequestHandler):
    """Answers every push after `delay_s`, counting what arrived."""

    delay_s = 0.3
    arrived: list[float] = []

    def do_POST(self) -> None:  # noqa: N802 (the handler's protocol)
        self.rfile.read(int(self.headers["content-length"]))
        SlowIngest.arrived.append(time.perf_counter())
        time.sleep(self.delay_s)
        body = b'{"accepted": 0, "duplicates": 0, "runs": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_ingest() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowIngest)
    SlowIngest.arrived = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_slow_answer_delays_its_own_sender_not_the_schedule(slow_ingest: str) -> None:
    # about 10 batches due in 1 s, each answered after 0.3 s: one sender that waited for
    # each answer would push about 4 of them
    pacer = IngestPacer(slow_ingest, "t", per_s=300, duration_s=1.0, batch_runs=1, senders=8)
    due_in_window = sum(1 for d in pacer._due_s if d < pacer.duration_s)
    assert due_in_window >= 6
    pacer.start()
    pacer.join()
    assert pacer.errors == []
    assert len(SlowIngest.arrived) == due_in_window
    due = [pacer._started + d for d in pacer._due_s[:due_in_window]]
    late = [round(a - d, 3) for a, d in zip(sorted(SlowIngest.arrived), due, strict=True)]
    assert max(late) < 0.15, late  # each push left when due, not after the one before


def test_the_pacer_stores_what_it_counts(live_service: LiveService) -> None:
    pacer = IngestPacer(
        live_service.base_url, live_service.agent_token, per_s=4000, duration_s=1.0, senders=2
    )
    pacer.start()
    pacer.join()
    assert pacer.errors == []
    assert pacer.sent_measurements > 2000
    assert 2000 < pacer.achieved_per_s() < 6000


def test_the_ingest_process_pushes_on_schedule_from_its_own_interpreter(
    slow_ingest: str,
) -> None:
    pushing = IngestProcess(slow_ingest, "t", per_s=20_000, duration_s=1.0)
    assert SlowIngest.arrived == []  # nothing leaves before start, whatever the set-up took
    pushing.start()
    held = time.perf_counter() + 0.5
    while time.perf_counter() < held:  # this interpreter busy: the pushes go on regardless
        sum(range(1000))
    pushing.join()
    assert pushing.errors == []
    assert len(SlowIngest.arrived) >= 5
    assert pushing.sent_measurements > 0 and pushing.achieved_per_s() > 0


def test_the_pacer_holds_batches_for_its_whole_window() -> None:
    pacer = IngestPacer("http://127.0.0.1:9", "t", per_s=5_000, duration_s=3.0)
    held = sum(measurements for _, measurements in pacer._bodies)
    assert held >= 15_000  # what 3 s at 5,000/s asks, whatever a simulated run holds
    last_due, last_size = pacer._due_s[-1], pacer._bodies[-1][1]
    assert last_due + last_size / 5_000 >= 3.0  # the last batch is due at the window's end
