import pytest


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    from agents.probe.assemble import build_engine

    return build_engine(
        device="cuda",
        host_id="0123456789abcdef",
        bans_path=tmp_path_factory.mktemp("bans") / "bans.json",
    )
