"""Plugin tables: each kind of backend is chosen by name from one explicit, fixed table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class PluginTable(Mapping[str, Callable[..., T]], Generic[T]):
    """Map names to the factories of one kind of plugin (timers, providers, op kinds...)."""

    def __init__(self, kind: str, factories: Mapping[str, Callable[..., T]]) -> None:
        self.kind = kind
        self._factories = dict(factories)

    def create(self, name: str, /, **kwargs: object) -> T:
        """Build the plugin listed under `name`."""
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise KeyError(f"no {self.kind} named {name!r}; known: {known}") from None
        return factory(**kwargs)

    def __getitem__(self, name: str) -> Callable[..., T]:
        return self._factories[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)
