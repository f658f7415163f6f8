"""The provider table: every backend by name, the sets each vendor starts with."""

from agents.probe.settings import ProbeSettings
from agents.providers.cublaslt import CublasLtProvider
from agents.providers.table import PROVIDERS, VENDOR_PROVIDERS, create_provider


def test_every_provider_is_built_under_the_backend_it_names():
    for name in PROVIDERS:
        assert create_provider(name, settings=ProbeSettings()).backend == name


def test_every_vendor_set_starts_with_the_default_and_lists_known_providers():
    for names in VENDOR_PROVIDERS.values():
        assert names[0] == "vendor-default" and set(names) <= set(PROVIDERS)


def test_the_vendor_default_runs_every_op_and_providers_get_their_settings():
    default = create_provider("vendor-default", settings=ProbeSettings())
    assert default.ops == frozenset({"gemm", "conv2d", "layernorm"})
    cublaslt = create_provider("cublaslt", settings=ProbeSettings(cublaslt_limit=5))
    assert isinstance(cublaslt, CublasLtProvider) and cublaslt.limit == 5
