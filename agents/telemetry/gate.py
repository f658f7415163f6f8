"""Wait out a busy device before probing, and flag a hot one."""

from __future__ import annotations

from dataclasses import dataclass

from agents.clock import Clock
from agents.telemetry.readers import TelemetrySource
from tps.schemas import Telemetry


@dataclass
class TelemetryGate:
    """Delay a probe while utilization is high; mark it thermal-safe when the device is hot.

    Timings taken beside another job measure the contention, not the kernel, so a busy
    device gets `delay_s` more, up to `max_delays` times, then the probe runs anyway and
    the snapshot says how long it waited.
    """

    source: TelemetrySource
    clock: Clock
    busy_pct: float = 70.0
    hot_c: float = 85.0
    delay_s: float = 0.5
    max_delays: int = 3

    def wait(self) -> Telemetry:
        snap = self.source.snapshot()
        delays = 0
        while (
            snap.utilization_pct is not None
            and snap.utilization_pct > self.busy_pct
            and delays < self.max_delays
        ):
            self.clock.sleep(self.delay_s)
            delays += 1
            snap = self.source.snapshot()
        hot = snap.temperature_c is not None and snap.temperature_c > self.hot_c
        return snap.model_copy(
            update={"delayed_ms": delays * self.delay_s * 1000.0, "thermal_safe": hot}
        )
