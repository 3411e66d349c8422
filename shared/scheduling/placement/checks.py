"""Feasibility: can this node take this task? One small checker per resource, run in a fixed order.

A checker answers ``None`` (fits) or the reason, worded for many nodes ("lack 2 free CPUs"), so the
reasons of the nodes that fail add up into :attr:`Unplaceable.counts`. The order is part of the
answer: a node is counted under the first check it fails (see :func:`shared.scheduling.placement.reasons`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.jobconfig.model import TaskRole
from shared.scheduling.placement.snapshot import ANY_GPU, NodeState


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def span(ports: tuple[int, ...]) -> str:
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"


@dataclass(frozen=True, slots=True)
class Ask:
    """What one task of a role needs from a node, with the words used when a node cannot give it."""

    cpus: int
    memory_mb: int
    gpus: int
    gpu_kind: str | None  # ANY_GPU when the job names no gpuType
    fixed: tuple[tuple[str, tuple[int, ...]], ...]  # (label, ports) of beginAt > 0 specs
    random: tuple[tuple[str, int], ...]  # (label, portNumber) of beginAt == 0 specs
    labels: tuple[str, ...]  # every port label in the config's order
    lack_cpus: str
    lack_memory: str
    lack_gpus: str

    @classmethod
    def of(cls, role: TaskRole, gpu_type: str) -> Ask:
        kind = gpu_type or ANY_GPU
        return cls(
            cpus=role.cpu_number,
            memory_mb=role.memory_mb,
            gpus=role.gpu_number,
            gpu_kind=kind,
            fixed=tuple((s.label, tuple(range(s.begin_at, s.begin_at + s.port_number)))
                        for s in role.ports if s.begin_at),
            random=tuple((s.label, s.port_number) for s in role.ports if not s.begin_at),
            labels=tuple(s.label for s in role.ports),
            lack_cpus=f"lack {_plural(role.cpu_number, 'free CPU')}",
            lack_memory=f"lack {role.memory_mb} MB of free memory",
            lack_gpus=f"lack {_plural(role.gpu_number, 'free GPU')}" + (f" of type {gpu_type}" if gpu_type else ""),
        )


class Checker(Protocol):
    def check(self, node: NodeState, ask: Ask) -> str | None: ...


class CpuChecker:
    def check(self, node: NodeState, ask: Ask) -> str | None:
        return ask.lack_cpus if node.free_cpus < ask.cpus else None


class MemoryChecker:
    def check(self, node: NodeState, ask: Ask) -> str | None:
        return ask.lack_memory if node.free_memory_mb < ask.memory_mb else None


class GpuChecker:
    """Enough free GPUs of the asked type (of any type without gpuType); a task without GPUs passes."""

    def check(self, node: NodeState, ask: Ask) -> str | None:
        return ask.lack_gpus if ask.gpus and node.gpu_count(ask.gpu_kind) < ask.gpus else None


class PortChecker:
    """Fixed ports (``beginAt`` > 0) must all be free; the other specs need that many free ports in the
    node's range, counted without those the task's own fixed ports take from it."""

    def check(self, node: NodeState, ask: Ask) -> str | None:
        taken = node.usage.ports
        mine: set[int] = set()
        for label, ports in ask.fixed:
            if any(p in taken or p in mine for p in ports):
                return f"have port {span(ports)} ({label}) taken"
            mine.update(ports)
        if not ask.random:
            return None
        lo, hi = node.port_lo, node.port_hi
        free = hi - lo + 1 - node.ports_in_range - sum(1 for p in mine if lo <= p <= hi)
        for _, count in ask.random:
            if free < count:
                return f"lack {_plural(count, 'free port')} in {lo}-{hi}"
            free -= count
        return None


# The chain, cheapest and most often failing first. CPU and memory lead because their reasons are the
# plainest to act on; GPUs follow (the index has already picked nodes with enough of them, so this
# check only speaks when the counts are made); ports come last, the only check that walks a set.
CHAIN: tuple[Checker, ...] = (CpuChecker(), MemoryChecker(), GpuChecker(), PortChecker())


def first_failure(node: NodeState, ask: Ask) -> str | None:
    """The reason of the first check ``node`` fails for ``ask``, or None when it can take the task."""
    for checker in CHAIN:
        reason = checker.check(node, ask)
        if reason is not None:
            return reason
    return None
