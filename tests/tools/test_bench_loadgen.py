"""The load generator keeps its own collector out of what it measures, and says what it paused."""

from __future__ import annotations

import gc
import http.server
import threading
from collections.abc import Iterator

import pytest

from tools.bench.loadgen import Call, open_loop, steady_heap


class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the handler's protocol)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_heap_before_a_loop_is_not_walked_during_it() -> None:
    held = [[i] for i in range(10_000)]  # the benchmark's data, alive through the loop
    with steady_heap() as pauses:
        walked = {id(o) for o in gc.get_objects()}
        assert id(held) not in walked and id(held[0]) not in walked
        gc.collect()
        assert len(pauses) == 1 and pauses[0] >= 0.0  # the loop's own collections are timed
    assert gc.get_freeze_count() == 0  # given back to the collector afterwards
    assert id(held) in {id(o) for o in gc.get_objects()}


def test_a_loop_reports_the_clients_longest_collection(server: str) -> None:
    thresholds = gc.get_threshold()
    gc.set_threshold(100)  # a collection every hundred allocations, whatever ran before
    try:
        result = open_loop(server, [Call("/")], rate=200.0, duration_s=0.5)
    finally:
        gc.set_threshold(*thresholds)
    assert result.errors == 0 and result.requests == 100
    assert result.client_gc_pauses_s
    summary = result.summary()
    assert summary["client_gc_max_ms"] == round(max(result.client_gc_pauses_s, default=0) * 1e3, 2)
    assert gc.get_freeze_count() == 0
