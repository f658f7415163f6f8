"""TPS core: wire schemas, problem keys, hardware specs and the hardware catalog."""

__version__ = "0.1.0"
