"""The cluster as placement sees it: live nodes, what placed jobs hold on them, and indexes over both.

``usage`` is the plain view (per node: CPUs, memory, GPU indices and ports held), for the service's
gauges and for tests. :class:`NodeState` keeps the same numbers as free amounts, and the snapshot keeps
:class:`Buckets` over them, so a search touches the nodes that can serve a task, not the whole cluster.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shared.jobconfig.model import JobConfig
from shared.records import JobRecord, NodeRecord, holdings
from shared.scheduling.placement.buckets import Buckets
from shared.scheduling.placement.values import Plan

ANY_GPU: None = None  # the GPU index key of "any type" (a config without gpuType)


@dataclass
class NodeUsage:
    cpus: int = 0
    memory_mb: int = 0
    gpus: set[int] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)

    def copy(self) -> NodeUsage:
        return NodeUsage(self.cpus, self.memory_mb, set(self.gpus), set(self.ports))


@dataclass(frozen=True, slots=True)
class Claim:
    """What one task takes from one node."""

    cpus: int
    memory_mb: int
    gpus: tuple[int, ...]
    ports: tuple[int, ...]


class NodeState:
    """One live node's free resources, kept in step with its :class:`NodeUsage`."""

    __slots__ = (
        "free_cpus",
        "free_gpus",
        "free_memory_mb",
        "gpu_kinds",
        "id",
        "ip",
        "port_floor",
        "port_hi",
        "port_lo",
        "ports_in_range",
        "pos",
        "record",
        "usage",
    )

    def __init__(self, pos: int, record: NodeRecord, usage: NodeUsage) -> None:
        self.pos, self.record, self.usage = pos, record, usage
        self.id, self.ip = record.id, record.ip
        self.free_cpus = record.cpus - usage.cpus
        self.free_memory_mb = record.memory_mb - usage.memory_mb
        self.gpu_kinds = {g.index: g.type for g in record.gpus}
        free = sorted(i for i in self.gpu_kinds if i not in usage.gpus)
        # Free indices per GPU type, and of any type under ANY_GPU; every list sorted.
        self.free_gpus: dict[str | None, list[int]] = {ANY_GPU: free}
        for i in free:
            self.free_gpus.setdefault(self.gpu_kinds[i], []).append(i)
        for kind in set(self.gpu_kinds.values()):
            self.free_gpus.setdefault(kind, [])
        self.port_lo, self.port_hi = record.port_range
        self.ports_in_range = sum(1 for p in usage.ports if self.port_lo <= p <= self.port_hi)
        # Every port of the range below the floor is taken: a search for free ports starts there, so
        # a node whose range fills from the bottom is searched in O(1), not over every port it holds.
        self.port_floor = self.port_lo
        self._raise_port_floor()

    def _raise_port_floor(self) -> None:
        taken = self.usage.ports
        while self.port_floor <= self.port_hi and self.port_floor in taken:
            self.port_floor += 1

    def gpu_count(self, kind: str | None) -> int:
        free = self.free_gpus.get(kind)
        return len(free) if free is not None else 0

    def take(self, claim: Claim) -> None:
        u = self.usage
        self.free_cpus -= claim.cpus
        self.free_memory_mb -= claim.memory_mb
        u.cpus += claim.cpus
        u.memory_mb += claim.memory_mb
        for g in claim.gpus:
            u.gpus.add(g)
            kind = self.gpu_kinds.get(g)
            if kind is not None:  # an index the inventory does not list is in no free list
                _discard(self.free_gpus[kind], g)
                _discard(self.free_gpus[ANY_GPU], g)
        for p in claim.ports:
            if p not in u.ports:
                u.ports.add(p)
                self.ports_in_range += self.port_lo <= p <= self.port_hi
        self._raise_port_floor()

    def give(self, claim: Claim) -> None:
        """Undo :meth:`take` of the same claim."""
        u = self.usage
        self.free_cpus += claim.cpus
        self.free_memory_mb += claim.memory_mb
        u.cpus -= claim.cpus
        u.memory_mb -= claim.memory_mb
        for g in claim.gpus:
            u.gpus.discard(g)
            kind = self.gpu_kinds.get(g)
            if kind is not None:
                insort(self.free_gpus[kind], g)
                insort(self.free_gpus[ANY_GPU], g)
        for p in claim.ports:
            if p in u.ports:
                u.ports.remove(p)
                self.ports_in_range -= self.port_lo <= p <= self.port_hi
                if self.port_lo <= p < self.port_floor:
                    self.port_floor = p


class ClusterSnapshot:
    """Live nodes and their usage, indexed: nodes by free CPUs, by free memory, and by free GPUs per type."""

    def __init__(self, nodes: tuple[NodeRecord, ...], usage: dict[str, NodeUsage]) -> None:
        self.nodes = nodes
        self.usage = usage
        self.states = tuple(NodeState(pos, n, usage[n.id]) for pos, n in enumerate(nodes))
        self.by_id = {s.id: s for s in self.states}
        self.cpu_index = Buckets()
        self.memory_index = Buckets()
        self.gpu_index: dict[str | None, Buckets] = {}
        for s in self.states:
            self.cpu_index.add(s.free_cpus, s.pos)
            self.memory_index.add(s.free_memory_mb, s.pos)
            for kind, free in s.free_gpus.items():
                self.gpu_index.setdefault(kind, Buckets()).add(len(free), s.pos)

    @classmethod
    def build(cls, nodes: Iterable[NodeRecord], placed_jobs: Iterable[JobRecord]) -> ClusterSnapshot:
        """Capacity of live nodes minus what the non-final tasks of placed jobs hold."""
        live = tuple(n for n in nodes if not n.lost)
        usage = {n.id: NodeUsage() for n in live}
        for _, task, role in holdings(placed_jobs):
            u = usage.get(str(task.node_id))
            if u is None:  # on a node that is lost or gone: nothing to subtract from
                continue
            u.cpus += role.cpu_number
            u.memory_mb += role.memory_mb
            u.gpus.update(task.gpus)
            u.ports.update(p for ps in task.ports.values() for p in ps)
        return cls(live, usage)

    def hold(self, plan: Plan, config: JobConfig) -> None:
        """Count a committed plan's tasks as using their nodes (so one pass places several jobs)."""
        for t in plan.tasks:
            node = self.by_id.get(t.node_id)
            if node is not None:  # a plan names only nodes of the snapshot it was made from
                role = config.role(t.role)
                self.take(node, Claim(role.cpu_number, role.memory_mb, t.gpus,
                                      tuple(p for ps in t.ports.values() for p in ps)))

    def take(self, node: NodeState, claim: Claim) -> None:
        """Hold ``claim`` on ``node``, and move the node to its new place in every index."""
        self._reindex(node, claim, node.take)

    def give(self, node: NodeState, claim: Claim) -> None:
        """Undo :meth:`take` (placement tries tasks on the snapshot itself and gives back what it tried)."""
        self._reindex(node, claim, node.give)

    def _reindex(self, node: NodeState, claim: Claim, change: Callable[[Claim], None]) -> None:
        cpus, memory = node.free_cpus, node.free_memory_mb
        kinds = ({node.gpu_kinds.get(g) for g in claim.gpus} | {ANY_GPU}) if claim.gpus else set()
        gpus = {kind: node.gpu_count(kind) for kind in kinds}
        change(claim)
        self.cpu_index.move(cpus, node.free_cpus, node.pos)
        self.memory_index.move(memory, node.free_memory_mb, node.pos)
        for kind, before in gpus.items():
            if kind in node.free_gpus:
                self.gpu_index[kind].move(before, node.gpu_count(kind), node.pos)


def _discard(ordered: list[int], value: int) -> None:
    at = bisect_left(ordered, value)
    if at < len(ordered) and ordered[at] == value:
        del ordered[at]
