"""cuBLASLt ordering, without a GPU."""

from agents.providers.cublaslt import _plain, diversify


def test_cublaslt_short_list_tries_one_of_each_kind_first():
    ranked = [
        {"algo_id": 66, "tile": "64x8", "split_k": 1},
        {"algo_id": 66, "tile": "64x8", "split_k": 1, "stages": "x"},
        {"algo_id": 66, "tile": "64x8", "split_k": 4},
        {"algo_id": 21, "tile": "128x128", "split_k": 1},
    ]
    order = diversify(ranked)
    assert order[:3] == [ranked[0], ranked[2], ranked[3]] and order[3] == ranked[1]
    assert _plain((1, 2, 1)) == "1x2x1" and _plain(True) is True


def test_cublaslt_without_nvmath_is_unavailable_and_says_so_once(monkeypatch, caplog):
    import sys

    from agents.probe.device import Device
    from agents.providers.cublaslt import CublasLtProvider

    monkeypatch.setitem(sys.modules, "nvmath", None)  # an import of it raises ImportError
    provider = CublasLtProvider()
    with caplog.at_level("WARNING", logger="agents.providers.cublaslt"):
        assert provider.available(Device("cuda")) is False
        assert provider.available(Device("cuda")) is False
    said = [r.getMessage() for r in caplog.records if "nvmath-python" in r.getMessage()]
    assert len(said) == 1 and "tps[nvidia]" in said[0]
