"""Clients of the session's live service, one per role."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from client import ServiceClient
from tests.conftest import LiveService

ClientFactory = Callable[[str | None], ServiceClient]


@pytest.fixture
def connect(live_service: LiveService) -> Iterator[ClientFactory]:
    """Yield a factory of clients of the live service with a given token, closed afterwards."""
    opened: list[ServiceClient] = []

    def make(token: str | None) -> ServiceClient:
        client = ServiceClient.connect(live_service.base_url, token=token, timeout_s=30.0)
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()


@pytest.fixture
def agent(connect: ClientFactory, live_service: LiveService) -> ServiceClient:
    return connect(live_service.agent_token)


@pytest.fixture
def admin(connect: ClientFactory, live_service: LiveService) -> ServiceClient:
    return connect(live_service.admin_token)
