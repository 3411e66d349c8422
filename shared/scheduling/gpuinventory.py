"""A node's GPUs: what NVML reports of its devices, mapped to the ``gpuType`` jobs ask for, and the choice
between that and the inventory the operator declared (``PAIQ_NODE_GPUS``).

Pure: fed with what :mod:`services.launcher.profiling.nvml` read (or why it could not), and tested with recorded
NVML values. ``gpu_type`` maps a device name to the short type OpenPAI users write ("Tesla V100-SXM2-16GB"
-> ``V100``); ``inventory`` turns devices into the node record's :class:`GpuInfo`; ``choose`` decides
which inventory the node offers and says why in one sentence (:class:`NodeGpus`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.records import GpuInfo

MIB = 1024 * 1024
MAX_TYPE_LENGTH = 32


class NvmlDevice(BaseModel):
    """What NVML reports of one device."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    uuid: str
    name: str  # nvmlDeviceGetName: "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB"
    memory_total_bytes: int


class NodeGpus(BaseModel):
    """The GPUs this node offers, where they come from, and the sentence that tells an operator why."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpus: tuple[GpuInfo, ...]
    source: Literal["declared", "discovered", "none"]
    note: str
    mismatch: bool = False  # the declaration and NVML disagree (count, indices or types)


# Known models first: the data-centre families, matched anywhere in the name ("A100" in
# "NVIDIA A100-SXM4-80GB" or "NVIDIA A100 80GB PCIe"), and the professional "RTX A6000" named by its model.
# ``\b`` after each model keeps "A10" from matching inside "A100" and "T4" inside "T400".
_KNOWN = (
    (re.compile(r"\bRTX\s+(A\d{4})\b", re.IGNORECASE), r"\1"),
    (re.compile(
        r"\b(K80|K40|K20X?|M40|M60|M10|P4|P40|P100|P6|V100S?|T4|A2|A10G?|A16|A30|A40|A100|A800|"
        r"L4|L20|L40S?|H20|H100|H200|H800|GH200|B100|B200|GB200|B300)\b", re.IGNORECASE), r"\1"),
)
# Brand words, not part of the model.
_BRANDS = {"nvidia", "tesla", "geforce", "quadro"}
# Where the model ends: a memory size, a memory kind, a form factor or a variant word.
_SUFFIX = re.compile(
    r"\d+(GB|G|MB)|HBM\d*e?|PCIe|PCI|SXM\d*|NVL\d*|MIG|GPU|Laptop|Mobile|with|Max-Q|Generation|Edition|Server",
    re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def gpu_type(name: str) -> str:
    """NVML's device name -> the short gpuType OpenPAI users write: "NVIDIA H100 80GB HBM3" -> ``H100``,
    "NVIDIA GeForce RTX 3090" -> ``RTX3090``, "Quadro RTX 8000" -> ``RTX8000``. Never empty."""
    for pattern, replacement in _KNOWN:
        found = pattern.search(name)
        if found:
            return found.expand(replacement).upper()  # "tesla v100" (a hand-typed name) too
    kind = _general(name)
    return kind if any(c.isalnum() for c in kind) else _fallback(name)


def _general(name: str) -> str:
    """Brand words dropped, the words of the model kept up to the first suffix, joined ("RTX 3090 Ti" ->
    ``RTX3090Ti``); a word with a dash ends the model at its dash ("P100-PCIE-16GB" -> ``P100``)."""
    kept: list[str] = []
    for word in name.split():
        if word.lower() in _BRANDS:
            continue
        head, dash, _ = word.partition("-")
        if _SUFFIX.fullmatch(word) or (dash and _SUFFIX.fullmatch(head)):
            break
        kept.append(head)
        if dash:
            break
    return _UNSAFE.sub("", "".join(kept))[:MAX_TYPE_LENGTH]


def _fallback(name: str) -> str:
    """The name with only [A-Za-z0-9_-] kept, or ``GPU`` when that leaves no letter or digit."""
    kept = _UNSAFE.sub("", name)[:MAX_TYPE_LENGTH]
    return kept if any(c.isalnum() for c in kept) else "GPU"


def inventory(devices: Iterable[NvmlDevice]) -> tuple[GpuInfo, ...]:
    """The node record's GPUs as NVML finds them, by index."""
    return tuple(_info(d, gpu_type(d.name)) for d in sorted(devices, key=lambda d: d.index))


def _info(device: NvmlDevice, kind: str) -> GpuInfo:
    return GpuInfo(index=device.index, type=kind, uuid=device.uuid, model=device.name,
                   memory_mb=device.memory_total_bytes // MIB)


def choose(declared: tuple[tuple[int, str], ...], discovered: tuple[NvmlDevice, ...] | None,
           why_none: str) -> NodeGpus:
    """The GPUs the node offers. A declaration (``PAIQ_NODE_GPUS``) always wins, with its types, enriched
    with the UUID, model and memory NVML reports at the same index; without one, what NVML finds; without
    either, none. ``discovered`` is None when NVML could not be read, and ``why_none`` then says why."""
    reason = why_none or "NVML finds no GPU"
    if declared:
        return _declared(declared, discovered, reason)
    if discovered:
        gpus = inventory(discovered)
        models = ", ".join(dict.fromkeys(g.model for g in gpus))
        return NodeGpus(gpus=gpus, source="discovered",
                        note=f"NVML finds {_count(len(gpus))}, offered as {_listed(gpus)} ({models}); "
                             "PAIQ_NODE_GPUS declares none")
    return NodeGpus(gpus=(), source="none",
                    note=f"{reason}; this node offers no GPUs (declare them with PAIQ_NODE_GPUS)")


def _declared(declared: tuple[tuple[int, str], ...], discovered: tuple[NvmlDevice, ...] | None,
              reason: str) -> NodeGpus:
    found = {d.index: d for d in discovered or ()}
    gpus = tuple(_info(found[i], kind) if i in found else GpuInfo(index=i, type=kind) for i, kind in declared)
    said = f"PAIQ_NODE_GPUS declares {_count(len(gpus))} ({_listed(gpus)})"
    if discovered is None:
        return NodeGpus(gpus=gpus, source="declared", note=f"{said} and they are used unchecked: {reason}")
    seen = inventory(discovered)
    if _agree(gpus, seen):
        return NodeGpus(gpus=gpus, source="declared",
                        note=f"{said}, as NVML finds them: the declaration is used, with NVML's UUIDs and memory")
    kinds = ", ".join(dict.fromkeys(g.type for g in seen))
    finds = f"NVML finds {len(seen)} ({kinds})" if seen else "NVML finds none"
    return NodeGpus(gpus=gpus, source="declared", mismatch=True, note=f"{said}; {finds}: the declaration is used")


def _agree(declared: tuple[GpuInfo, ...], seen: tuple[GpuInfo, ...]) -> bool:
    """Same indices, and the same types whatever their case."""
    return sorted((g.index, g.type.upper()) for g in declared) == sorted((g.index, g.type.upper()) for g in seen)


def _count(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _listed(gpus: Iterable[GpuInfo]) -> str:
    return ", ".join(f"{g.index}:{g.type}" for g in gpus)
