"""The launcher's GPU discovery and sampling on a machine with a real NVIDIA GPU (not part of the suite:
CI has no GPU). Run there as ``python3 tests/gpu/nvml_check.py``; prints what NVML gave the launcher and,
as its last line, one JSON object.

1. discovery as the launcher does it at start (``services.launcher.profiling.gpus.discover``), with nothing declared
   and with a declaration that disagrees (the launcher must say so);
2. the sampler's readings (``NvmlGpus.read``) while the GPU idles and while a matrix multiply loop keeps it
   busy (torch, when the machine has it).
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.launcher.profiling.gpus import discover
from services.launcher.profiling.nvml import NvmlGpus
from shared.settings.model import Settings


def sample(reader: NvmlGpus, seconds: float) -> dict[int, tuple[float, int]]:
    """Highest utilisation and memory in use per GPU over ``seconds``."""
    peak: dict[int, tuple[float, int]] = {}
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for index, r in reader.read().items():
            util, mem = peak.get(index, (0.0, 0))
            peak[index] = (max(util, r.utilization_percent), max(mem, r.memory_used_bytes))
        time.sleep(0.2)
    return peak


def busy(stop: threading.Event) -> str:
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return "no torch"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        (a @ a).sum().item()
    return "matmul"


def main() -> None:
    base = {"PAIQ_NODE_ID": "gpu-check", "PAIQ_GPU_DEVICES": "nvidia"}
    found, reader = discover(Settings.from_env(base))
    print(f"discovered ({found.source}): {found.note}")
    for g in found.gpus:
        print(f"  gpu {g.index}: type {g.type}, {g.model}, uuid {g.uuid}, {g.memory_mb} MB")
    declared, other = discover(Settings.from_env({**base, "PAIQ_NODE_GPUS": "0:V100"}))
    if other is not None:
        other.close()
    print(f"declared 0:V100 ({declared.source}, mismatch {declared.mismatch}): {declared.note}")
    result: dict[str, object] = {
        "source": found.source, "gpus": [g.model_dump(mode="json") for g in found.gpus],
        "declared_mismatch_said": declared.mismatch, "declared_kept": [g.type for g in declared.gpus]}
    if reader is not None:
        idle = sample(reader, 2)
        stop = threading.Event()
        worker = threading.Thread(target=lambda: result.__setitem__("load", busy(stop)))
        worker.start()
        time.sleep(2)  # the kernel running
        loaded = sample(reader, 4)
        stop.set()
        worker.join()
        reader.close()
        for index in sorted(idle):
            print(f"  gpu {index}: idle {idle[index][0]:.0f}% {idle[index][1] >> 20} MB; "
                  f"under {result.get('load')} {loaded.get(index, (0, 0))[0]:.0f}% "
                  f"{loaded.get(index, (0, 0))[1] >> 20} MB")
        result["idle"] = {str(i): {"util": u, "mem_mb": m >> 20} for i, (u, m) in idle.items()}
        result["loaded"] = {str(i): {"util": u, "mem_mb": m >> 20} for i, (u, m) in loaded.items()}
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
