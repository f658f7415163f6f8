"""Model answers shared by a replica's worker processes: computed once among them."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from services.profiler_api.priors.model import AnswerMemo
from services.profiler_api.priors.shared import SharedAnswers
from tps.schemas import Prior


def _prior(tag: str) -> Prior:
    return Prior(hardware_fingerprint=tag, problem_hash="", canonical="", reason=tag)


def _ask_in_a_process(folder: str, key: tuple[object, ...], counter: str) -> None:
    """A worker process: answer `key` through the shared folder, counting computations."""

    def compute() -> Prior:
        with open(counter, "a") as marks:
            marks.write("x")
        threading.Event().wait(0.3)  # long enough for the other process to ask meanwhile
        return _prior("computed")

    prior = AnswerMemo(shared=SharedAnswers(Path(folder))).get(key, compute)
    assert prior.reason == "computed"


def test_workers_sharing_a_folder_compute_an_answer_once(tmp_path: Path) -> None:
    counter = tmp_path / "computed"
    key = (3, "fingerprint", "problem", 8)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_ask_in_a_process, args=(str(tmp_path), key, str(counter)))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert counter.read_text() == "x"  # one computation among three processes


def test_another_key_or_a_damaged_file_is_computed(tmp_path: Path) -> None:
    shared, calls = SharedAnswers(tmp_path), []

    def compute(tag: str) -> Prior:
        calls.append(tag)
        return _prior(tag)

    assert shared.get(("v1", "a"), lambda: compute("a")).reason == "a"
    assert shared.get(("v1", "a"), lambda: compute("again")).reason == "a"  # read back
    assert shared.get(("v2", "a"), lambda: compute("b")).reason == "b"  # a new model version
    for answer in tmp_path.glob("*.json"):
        answer.write_text("{not json")
    assert shared.get(("v1", "a"), lambda: compute("c")).reason == "c"
    assert calls == ["a", "b", "c"]


def test_the_folder_keeps_at_most_its_limit(tmp_path: Path) -> None:
    shared = SharedAnswers(tmp_path, max_files=10)
    for i in range(30):
        shared.get(("v", i), lambda i=i: _prior(str(i)))
    shared.prune()
    assert len(list(tmp_path.glob("*.json"))) <= 10


def test_an_unwritable_folder_still_answers(tmp_path: Path) -> None:
    shared = SharedAnswers(tmp_path / "missing")
    assert shared.get(("v", 1), lambda: _prior("alone")).reason == "alone"
