"""What a task gets on the node chosen for it: the lowest free GPU indices of its type and its ports.

Only called on a node every checker accepted, so there is always enough of everything.
"""

from __future__ import annotations

from shared.scheduling.placement.checks import Ask
from shared.scheduling.placement.snapshot import Claim, NodeState


def pick_gpus(node: NodeState, ask: Ask) -> tuple[int, ...]:
    return tuple(node.free_gpus[ask.gpu_kind][: ask.gpus]) if ask.gpus else ()


def pick_ports(node: NodeState, ask: Ask) -> dict[str, tuple[int, ...]]:
    """Fixed specs get their span; the others the lowest free ports of the node's range, walking from the
    node's port floor (below it every port is taken) over the ports already taken."""
    if not ask.labels:
        return {}
    taken = node.usage.ports
    out = dict(ask.fixed)
    mine = {p for _, ports in ask.fixed for p in ports}
    p, hi = node.port_floor, node.port_hi
    for label, count in ask.random:
        got: list[int] = []
        while len(got) < count and p <= hi:
            if p not in taken and p not in mine:
                got.append(p)
            p += 1
        out[label] = tuple(got)
    return {label: out[label] for label in ask.labels}


def claim_of(ask: Ask, gpus: tuple[int, ...], ports: dict[str, tuple[int, ...]]) -> Claim:
    return Claim(ask.cpus, ask.memory_mb, gpus, tuple(p for ps in ports.values() for p in ps))
