"""Model answers shared by the worker processes of one replica, in a folder they all see.

The hosts of a job ask about a new GPU all at once, and their requests land on every worker:
each worker computed each question itself, on cores the others needed (in the priors
benchmark, 400 answers where 200 questions were asked). A model answer is keyed by the model
version, so it never goes stale: the first worker to ask computes it under a file lock and
writes it; the others wait on the lock and read it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from collections.abc import Callable, Hashable
from pathlib import Path

from pydantic import ValidationError

from tps.schemas import Prior

log = logging.getLogger(__name__)

# Answers kept in the folder (a few kilobytes each); past this the newest half of it stays.
MAX_FILES = 20_000
PRUNE_EVERY = 256


class SharedAnswers:
    """Answers by key in `folder`: computed once among the processes that share it."""

    def __init__(self, folder: Path, *, max_files: int = MAX_FILES) -> None:
        self.folder = folder
        self.max_files = max_files
        self._written = 0

    def get(self, key: Hashable, compute: Callable[[], Prior]) -> Prior:
        """Return the answer to `key` that some process wrote, or compute and write it."""
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
        path = self.folder / f"{name}.json"
        try:
            lock = open(self.folder / f"{name}.lock", "a+b")  # noqa: SIM115 (held below)
        except OSError as exc:  # a folder gone or read-only: answer, unshared
            log.warning("shared answers unavailable in %s: %s", self.folder, exc)
            return compute()
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                found = _read(path)
                if found is not None:
                    return found
                prior = compute()
                _write(path, prior)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        self._written += 1
        if self._written % PRUNE_EVERY == 0:
            self.prune()
        return prior

    def prune(self) -> None:
        """Keep the newest `max_files // 2` answers once there are more than `max_files`."""
        try:
            answers = sorted(self.folder.glob("*.json"), key=_mtime)
        except OSError:
            return
        if len(answers) <= self.max_files:
            return
        for path in answers[: len(answers) - self.max_files // 2]:
            for stale in (path, path.with_suffix(".lock")):
                stale.unlink(missing_ok=True)


def _read(path: Path) -> Prior | None:
    try:
        return Prior.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:  # damaged: computed again and rewritten
        log.warning("shared answer %s unreadable, computing it again: %s", path.name, exc)
        return None


def _write(path: Path, prior: Prior) -> None:
    partial = path.with_suffix(f".{os.getpid()}.part")
    try:
        partial.write_bytes(prior.model_dump_json().encode())
        os.replace(partial, path)
    except OSError as exc:  # the answer stands; only the sharing is lost
        log.warning("cannot share answer %s: %s", path.name, exc)
        partial.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
