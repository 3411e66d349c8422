"""Gang placement as a pure function: (cluster snapshot, job config) -> Plan | Unplaceable.

Every task of the job gets a node, distinct GPU indices of the asked type and ports that no other task
on that node holds, or the job gets nothing and a reason with counts. No I/O happens here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from shared.jobconfig import JobConfig, PortSpec, TaskRole
from shared.records import JobRecord, NodeRecord


@dataclass
class NodeUsage:
    cpus: int = 0
    memory_mb: int = 0
    gpus: set[int] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)

    def copy(self) -> NodeUsage:
        return NodeUsage(self.cpus, self.memory_mb, set(self.gpus), set(self.ports))


@dataclass
class ClusterSnapshot:
    nodes: tuple[NodeRecord, ...]
    usage: dict[str, NodeUsage]

    @classmethod
    def build(cls, nodes: Iterable[NodeRecord], placed_jobs: Iterable[JobRecord]) -> ClusterSnapshot:
        """Capacity of live nodes minus what the non-final tasks of placed jobs hold."""
        live = tuple(n for n in nodes if not n.lost)
        usage = {n.id: NodeUsage() for n in live}
        for job in placed_jobs:
            roles = {r.name: r for r in job.config.task_roles}
            for task in job.tasks:
                if task.node_id not in usage or task.state.is_final or task.role not in roles:
                    continue
                u, role = usage[task.node_id], roles[task.role]
                u.cpus += role.cpu_number
                u.memory_mb += role.memory_mb
                u.gpus.update(task.gpus)
                u.ports.update(p for ps in task.ports.values() for p in ps)
        return cls(live, usage)


    def hold(self, plan: Plan, config: JobConfig) -> None:
        """Count a committed plan's tasks as using their nodes (so one pass places several jobs)."""
        for t in plan.tasks:
            _hold(self.usage[t.node_id], config.role(t.role), t.gpus, t.ports)


class TaskPlacement(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: str
    index: int
    node_id: str
    ip: str
    gpus: tuple[int, ...] = ()
    ports: dict[str, tuple[int, ...]] = {}


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)
    tasks: tuple[TaskPlacement, ...]

    def for_task(self, role: str, index: int) -> TaskPlacement:
        for t in self.tasks:
            if t.role == role and t.index == index:
                return t
        raise KeyError(f"{role}[{index}]")


class Unplaceable(BaseModel):
    """Why a job does not fit now: per failing task, how many nodes failed each check."""

    model_config = ConfigDict(frozen=True)
    task: str
    counts: dict[str, int]

    @property
    def reason(self) -> str:
        if not self.counts:
            return "no live node is registered"
        parts = [f"{n} node{'s' if n != 1 else ''} {_verb(why, n)}" for why, n in sorted(self.counts.items())]
        return f"task {self.task} fits on no node: " + "; ".join(parts)


def _verb(why: str, count: int) -> str:
    """Reasons are written for many nodes ("lack ..."); one node "lacks"."""
    if count != 1:
        return why
    verb, _, rest = why.partition(" ")
    return f"{ {'lack': 'lacks', 'have': 'has'}.get(verb, verb)} {rest}"


def place(snapshot: ClusterSnapshot, config: JobConfig) -> Plan | Unplaceable:
    """Place every task of ``config`` or none. First fit over nodes in snapshot order."""
    usage = {node_id: u.copy() for node_id, u in snapshot.usage.items()}
    placements: list[TaskPlacement] = []
    for role in config.task_roles:
        for index in range(role.task_number):
            counts: Counter[str] = Counter()
            chosen: TaskPlacement | None = None
            for node in snapshot.nodes:
                result = _fit(node, usage[node.id], role, config.gpu_type)
                if isinstance(result, str):
                    counts[result] += 1
                    continue
                gpus, ports = result
                _hold(usage[node.id], role, gpus, ports)
                chosen = TaskPlacement(role=role.name, index=index, node_id=node.id, ip=node.ip,
                                       gpus=gpus, ports=ports)
                break
            if chosen is None:
                return Unplaceable(task=f"{role.name}[{index}]", counts=dict(counts))
            placements.append(chosen)
    return Plan(tasks=tuple(placements))


def _hold(u: NodeUsage, role: TaskRole, gpus: Sequence[int], ports: dict[str, tuple[int, ...]]) -> None:
    u.cpus += role.cpu_number
    u.memory_mb += role.memory_mb
    u.gpus.update(gpus)
    u.ports.update(p for ps in ports.values() for p in ps)


def _fit(node: NodeRecord, u: NodeUsage, role: TaskRole,
         gpu_type: str) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]] | str:
    """The GPUs and ports this task would get on ``node``, or why it cannot go there."""
    if node.cpus - u.cpus < role.cpu_number:
        return f"lack {role.cpu_number} free CPU{'s' if role.cpu_number != 1 else ''}"
    if node.memory_mb - u.memory_mb < role.memory_mb:
        return f"lack {role.memory_mb} MB of free memory"
    gpus = _pick_gpus(node, u, role.gpu_number, gpu_type)
    if gpus is None:
        kind = f" of type {gpu_type}" if gpu_type else ""
        return f"lack {role.gpu_number} free GPU{'s' if role.gpu_number != 1 else ''}{kind}"
    ports = _pick_ports(node, u, role.port_list)
    if isinstance(ports, str):
        return ports
    return gpus, ports


def _pick_gpus(node: NodeRecord, u: NodeUsage, count: int, gpu_type: str) -> tuple[int, ...] | None:
    if count == 0:
        return ()
    free = sorted(g.index for g in node.gpus if g.index not in u.gpus and (not gpu_type or g.type == gpu_type))
    return tuple(free[:count]) if len(free) >= count else None


def _pick_ports(node: NodeRecord, u: NodeUsage, specs: Sequence[PortSpec]) -> dict[str, tuple[int, ...]] | str:
    taken = set(u.ports)
    out: dict[str, tuple[int, ...]] = {}
    # Fixed ports first, so a random pick never takes a port a later fixed spec of this task needs.
    for spec in sorted(specs, key=lambda s: s.begin_at == 0):
        if spec.begin_at:
            wanted = tuple(range(spec.begin_at, spec.begin_at + spec.port_number))
            if taken.intersection(wanted):
                return f"have port {_span(wanted)} ({spec.label}) taken"
        else:
            lo, hi = node.port_range
            wanted = tuple(p for p in range(lo, hi + 1) if p not in taken)[: spec.port_number]
            if len(wanted) < spec.port_number:
                return f"lack {spec.port_number} free port{'s' if spec.port_number != 1 else ''} in {lo}-{hi}"
        taken.update(wanted)
        out[spec.label] = wanted
    return {s.label: out[s.label] for s in specs}


def _span(ports: tuple[int, ...]) -> str:
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"
