"""What the sampler asks of a node's GPUs: one reading of every device (utilisation, memory in use).

:class:`services.launcher.profiling.nvml.NvmlGpus` reads them through NVML; a node without NVML has no reader, and
its tasks' GPU use is "not measured" (never zero).
"""

from __future__ import annotations

from typing import Protocol

from services.launcher.engine.enginestats import GpuReading


class GpuReader(Protocol):
    def read(self) -> dict[int, GpuReading]:
        """Every device's reading now, by index (a device that cannot be read is left out)."""
