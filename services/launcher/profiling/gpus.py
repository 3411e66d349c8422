"""The GPUs a launcher offers: found through NVML, or declared by the operator (``PAIQ_NODE_GPUS``, which
always wins), decided by :func:`shared.scheduling.gpuinventory.choose` and said once in the log."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from services.launcher.profiling.nvml import NvmlGpus
from shared.scheduling.gpuinventory import NodeGpus, NvmlDevice, choose
from shared.settings.model import Settings

log = structlog.get_logger("paiq.launcher")

NOT_OPENED = "NVML is not opened (PAIQ_GPU_DEVICES=none: declared test GPUs, no devices passed to containers)"


def discover(settings: Settings, open_nvml: Callable[[], NvmlGpus | str] = NvmlGpus.open,
             ) -> tuple[NodeGpus, NvmlGpus | None]:
    """The node's GPUs and, when NVML opened, the reader of their use (even when the declaration is used);
    the caller closes it (:meth:`NvmlGpus.close`) when the launcher stops. ``open_nvml``: for tests."""
    reader: NvmlGpus | None = None
    found: tuple[NvmlDevice, ...] | None = None
    why = NOT_OPENED
    if settings.launcher.gpu_devices != "none":
        opened = open_nvml()
        if isinstance(opened, str):
            why = opened
        else:
            reader, found, why = opened, opened.devices(), ""
    chosen = choose(settings.node.gpus, found, why)
    said = log.warning if chosen.mismatch else log.info
    said(chosen.note, node=settings.node.node_id, source=chosen.source,
         gpus=[f"{g.index}:{g.type}" for g in chosen.gpus])
    return chosen, reader
