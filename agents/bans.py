"""Candidates that gave wrong results, banned per hardware, software and problem, on disk."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey


class Ban(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    candidate: Candidate
    canonical: str
    reason: str


class BanList:
    """A persisted set of (hardware, software, problem, candidate) bans.

    A candidate wrong on one problem may be right on another (a split-K bug at one K, a
    tail bug at one size), so a ban names the problem; new library versions lift it.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._bans: dict[str, Ban] = {}

    @classmethod
    def load(cls, path: str | Path | None) -> BanList:
        """Read the ban file at `path`; a missing file is an empty list."""
        bans = cls(Path(path) if path is not None else None)
        if bans.path is not None and bans.path.exists():
            for row in json.loads(bans.path.read_text()).get("bans", []):
                ban = Ban.model_validate(row)
                bans._bans[ban.key] = ban
        return bans

    @staticmethod
    def key(hardware: HardwareSpec, problem: ProblemKey, candidate: Candidate) -> str:
        return "|".join(
            (hardware.fingerprint(), hardware.software_key(), problem.key_hash(), candidate.id)
        )

    def is_banned(
        self, hardware: HardwareSpec, problem: ProblemKey, candidate: Candidate
    ) -> Ban | None:
        return self._bans.get(self.key(hardware, problem, candidate))

    def ban(
        self, hardware: HardwareSpec, problem: ProblemKey, candidate: Candidate, reason: str
    ) -> None:
        """Ban a candidate and persist the list at once, so a crash cannot forget it."""
        key = self.key(hardware, problem, candidate)
        self._bans[key] = Ban(
            key=key, candidate=candidate, canonical=problem.canonical(), reason=reason[:500]
        )
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        write_json_atomic(self.path, {"bans": [b.model_dump(mode="json") for b in self]})

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._bans.values())

    def __len__(self) -> int:
        return len(self._bans)


def write_json_atomic(path: Path, payload: object) -> None:
    """Write JSON next to `path` and rename it over, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
