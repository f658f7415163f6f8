"""Every timer the agent has, by name."""

from __future__ import annotations

from agents.plugins import PluginTable
from agents.probe.timers.base import Timer
from agents.probe.timers.cpu import CpuTimer
from agents.probe.timers.cuda_graph import CudaGraphTimer

TIMERS: PluginTable[Timer] = PluginTable("timer", {"cpu": CpuTimer, "cuda-graph": CudaGraphTimer})
