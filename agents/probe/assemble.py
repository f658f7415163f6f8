"""Assemble a probe engine: open the device and pick its providers, timer and telemetry."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import platformdirs

from agents.bans import BanList
from agents.clock import Clock
from agents.opconfig import OpConfig
from agents.probe.device import open_device
from agents.probe.engine import ProbeEngine
from agents.probe.hardware import detect_hardware
from agents.probe.settings import ProbeSettings
from agents.probe.timers.base import Timer
from agents.probe.timers.table import TIMERS
from agents.providers.table import VENDOR_PROVIDERS, create_provider
from agents.telemetry.table import TELEMETRY_SOURCES, default_source


def build_engine(
    *,
    device: str = "auto",
    op_config: OpConfig | None = None,
    host_id: str,
    settings: ProbeSettings | None = None,
    sm_limit: int | None = None,
    providers: Sequence[str] | None = None,
    bans_path: str | Path | None = None,
    telemetry: str | None = None,
    clock: Clock | None = None,
    measure_bandwidth: bool = False,
) -> ProbeEngine:
    """Open the device and assemble an engine from the plugin tables."""
    settings = settings or ProbeSettings()
    dev = open_device(device, sm_limit=sm_limit)
    names = providers or VENDOR_PROVIDERS[dev.vendor]
    chosen = [create_provider(name, settings=settings) for name in names]
    hardware = detect_hardware(dev, measure_bandwidth=measure_bandwidth)
    if dev.is_gpu:
        # warmup=0: the engine's first launch of each candidate (compile and validation)
        # already warmed it up.
        timer: Timer = TIMERS.create(
            "cuda-graph", stream=dev.stream, warmup=0, use_graphs=settings.use_graphs
        )
    else:
        timer = TIMERS.create("cpu")
    source = (
        TELEMETRY_SOURCES.create(telemetry) if telemetry else default_source(dev.vendor, dev.index)
    )
    if bans_path is None:
        bans_path = Path(platformdirs.user_state_dir("tps")) / "bans.json"
    return ProbeEngine(
        device=dev,
        providers=chosen,
        timer=timer,
        telemetry=source,
        bans=BanList.load(bans_path),
        host_id=host_id,
        settings=settings,
        op_config=op_config,
        clock=clock,
        hardware=hardware,
    )
