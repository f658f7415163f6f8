"""The active model, loaded once per process and reloaded when another version is activated."""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from models.bundle import ArtifactError, ModelBundle
from services.profiler_api.model_registry import repository

log = logging.getLogger(__name__)


def settle_heap() -> None:
    """Take what the process keeps out of the collector's working set, after a model loads.

    A model's objects live as long as it serves; left in the collector's oldest generation,
    every full collection walks them and stalls each request of the worker for 70-300 ms
    (measured in the priors benchmark's workers). Frozen, they are not walked. The previous
    model's cycles are collected first: unfrozen, then collected, so a switch leaks nothing.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class LoadedModel:
    version: int
    bundle: ModelBundle


class ActiveModelCache:
    """Return the active model; ask the database which one that is at most once per interval."""

    def __init__(
        self,
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_load: Callable[[int, bytes, str], None] | None = None,
    ) -> None:
        self.check_interval_s = check_interval_s
        self.clock = clock
        # Told each version loaded, with its artifact and checksum (the answering processes).
        self.on_load = on_load
        self._lock = threading.Lock()
        self._loaded: LoadedModel | None = None
        self._checked_at = -math.inf

    def get(self, session: Session) -> LoadedModel | None:
        """Return the loaded active model, or None when no model is active."""
        now = self.clock()
        if now - self._checked_at < self.check_interval_s:
            return self._loaded
        with self._lock:
            if now - self._checked_at < self.check_interval_s:  # another thread just checked
                return self._loaded
            version = repository.active_version(session)
            if version is None:
                self._loaded = None
            elif self._loaded is None or self._loaded.version != version:
                loaded = self._load(session, version)
                if loaded is not None:
                    self._loaded = loaded
                    settle_heap()
            self._checked_at = now
            return self._loaded

    def expire(self) -> None:
        """Ask the database again on the next `get`: another version may be active now.

        Called when an activation is announced, so that no answer is computed with the
        model it replaced after the announcement dropped the old answers.
        """
        self._checked_at = -math.inf

    def _load(self, session: Session, version: int) -> LoadedModel | None:
        stored = repository.artifact_of(session, version)
        if stored is None:
            return None
        artifact, digest = stored
        try:
            bundle = ModelBundle.from_bytes(artifact, expected_checksum=digest)
        except ArtifactError:
            # Keep serving what was loaded; the version's row needs an admin's attention.
            log.error("model v%d does not load; still serving the previous one", version)
            return None
        bundle.warm_up()  # here, not in the first priors request after the switch
        log.info("loaded model v%d (ops %s)", version, bundle.ops)
        if self.on_load is not None:
            self.on_load(version, artifact, digest)
        return LoadedModel(version=version, bundle=bundle)
