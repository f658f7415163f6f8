"""A small registry: plugins are chosen by name, never by if/elif chains."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Map names to factories that register themselves (the runtime's runners)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Register the decorated factory under `name`."""

        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            self._factories[name] = factory
            return factory

        return decorate

    def create(self, name: str, /, **kwargs: object) -> T:
        """Build the plugin registered under `name`."""
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise KeyError(f"no {self.kind} named {name!r}; known: {known}") from None
        return factory(**kwargs)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)
