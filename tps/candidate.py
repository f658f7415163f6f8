"""Candidates: a backend plus its parameters, with an id that means the same on every host."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property, lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tps.bounds import BIGINT_MAX, NO_NUL, Key

MAX_PARAMS = 64
# Under 2**63 with room to spare: a JSON integer just past a bigint rounds to a float of
# exactly -2**63, which a bound of 2**63 would let through as a float.
PARAM_FLOAT_MAX = 1e18


# Strict: "5" stays a string and 5 an int, as the id hashes types. Ints fit a bigint; a
# float is bounded alike, so that an int too large for the int branch (a strict float takes
# ints) is refused rather than stored as a float.
ParamValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(ge=-BIGINT_MAX - 1, le=BIGINT_MAX, strict=True)]
    | Annotated[
        float, Field(ge=-PARAM_FLOAT_MAX, le=PARAM_FLOAT_MAX, allow_inf_nan=False, strict=True)
    ]
    | Annotated[str, Field(max_length=256, pattern=NO_NUL)]
    | None
)


class _memoised(cached_property[str]):
    """A cached_property without the lock that Python 3.11 takes on every first access.

    The value is a pure function of frozen fields: two threads that compute it at once
    store the same string, so the lock buys nothing and costs about a microsecond per
    measurement at ingest. Like cached_property, the value lands in the instance's
    __dict__, which pydantic leaves out of comparison and serialisation.
    """

    def __get__(self, instance: object, owner: type[Any] | None = None) -> Any:
        if instance is None:
            return self
        assert self.attrname is not None
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value


class Candidate(BaseModel):
    """One way to run a problem: a backend and its tuning parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(_memoised,))

    backend: Key
    params: dict[Key, ParamValue] = Field(
        default_factory=dict,
        max_length=MAX_PARAMS,
        json_schema_extra={"additionalProperties": False},
    )

    @_memoised
    def id(self) -> str:
        return candidate_id(self.backend, self.params)

    def label(self) -> str:
        """Return a short human-readable form."""
        if not self.params:
            return self.backend
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.backend}({inner})"


def candidate_id(backend: str, params: dict[str, Any]) -> str:
    """Hash backend and params into a 16-hex-digit id, independent of any heuristic rank."""
    # Types are part of the key: 1, 1.0 and True are equal in Python, not in JSON.
    items = tuple(params.items())
    try:
        return _cached_candidate_id(backend, items, tuple(map(type, params.values())))
    except TypeError:  # an unhashable value; rare enough to hash every time
        return _hash_candidate(backend, params)


@lru_cache(maxsize=65536)
def _cached_candidate_id(
    backend: str, items: tuple[tuple[str, Any], ...], _types: tuple[type, ...]
) -> str:
    return _hash_candidate(backend, dict(items))


def _hash_candidate(backend: str, params: dict[str, Any]) -> str:
    payload = json.dumps({"backend": backend, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


VENDOR_DEFAULT = Candidate(backend="vendor-default")
# Candidates a compiler runs inside its own generated code (the compiled runtime records
# inductor's GEMM search under this backend): served as observed winners to compiling hosts,
# never offered to an agent's probe, which has no provider for them.
INDUCTOR_BACKEND = "inductor"
COMPILER_BACKENDS = frozenset({INDUCTOR_BACKEND})
