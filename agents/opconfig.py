"""The op config file: which ops the agent tunes and how many candidates each may try."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.errors import OpConfigError
from tps.problem import OPS


class TunableOpEntry(BaseModel):
    """One op: whether it is tuned, and how many candidates besides the vendor default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    enabled: bool = True
    candidates: int = Field(default=7, ge=0, le=256)

    @field_validator("name")
    @classmethod
    def _known_op(cls, name: str) -> str:
        if name not in OPS:
            raise ValueError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}")
        return name


class OpConfig(BaseModel):
    """The `tunable_ops` list a user writes in YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tunable_ops: list[TunableOpEntry] = Field(default_factory=list)

    @field_validator("tunable_ops")
    @classmethod
    def _unique(cls, entries: list[TunableOpEntry]) -> list[TunableOpEntry]:
        names = [e.name for e in entries]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"ops listed twice: {dupes}")
        return entries

    @classmethod
    def default(cls) -> OpConfig:
        """Return the configuration used when the user gives none."""
        return cls(
            tunable_ops=[
                TunableOpEntry(name="gemm", candidates=7),
                TunableOpEntry(name="conv2d", candidates=12),
                TunableOpEntry(name="layernorm", candidates=4),
                TunableOpEntry(name="add", enabled=False),
            ]
        )

    @classmethod
    def load(cls, path: str | Path) -> OpConfig:
        """Read an op config from a YAML file."""
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise OpConfigError(f"cannot read op config {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise OpConfigError(f"op config {path} is not valid YAML: {exc}") from exc
        return cls.parse(raw, origin=str(path))

    @classmethod
    def parse(cls, raw: object, *, origin: str = "op config") -> OpConfig:
        """Validate an already-parsed mapping."""
        if not isinstance(raw, dict) or "tunable_ops" not in raw:
            raise OpConfigError(f"{origin} needs a top-level 'tunable_ops' list")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise OpConfigError(f"{origin} is invalid: {exc}") from exc

    def entry(self, op: str) -> TunableOpEntry | None:
        return next((e for e in self.tunable_ops if e.name == op), None)

    def enabled(self, op: str) -> bool:
        entry = self.entry(op)
        return entry is not None and entry.enabled

    def candidate_limit(self, op: str) -> int:
        """Return how many candidates besides the vendor default the op may try."""
        entry = self.entry(op)
        return entry.candidates if entry is not None and entry.enabled else 0
