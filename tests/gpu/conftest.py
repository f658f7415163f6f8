import importlib.util

import pytest

# cuBLASLt's algorithms are enumerated and launched through nvmath-python, the agent's
# `nvidia` extra: where it is missing, the cuBLASLt tests skip, naming it.
NVMATH = importlib.util.find_spec("nvmath") is not None
NO_NVMATH = "cuBLASLt runs through nvmath-python: pip install 'tps[nvidia]'"
needs_nvmath = pytest.mark.skipif(not NVMATH, reason=NO_NVMATH)


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    from agents.probe.assemble import build_engine

    return build_engine(
        device="cuda",
        host_id="0123456789abcdef",
        bans_path=tmp_path_factory.mktemp("bans") / "bans.json",
    )
