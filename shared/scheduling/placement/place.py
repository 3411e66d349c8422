"""Gang placement: every task of a job gets a node, or the job gets nothing and the reasons, counted.

:func:`place` wires the stages for one task after another (Nomad's stack, kube-scheduler's extension
points): candidates from the index in strategy order (score), the checker chain (filter), then GPUs
and ports picked and held (reserve), so the next task of the job sees what this one took. Tasks are
tried on the snapshot itself and every hold is given back before :func:`place` returns, so placing
changes nothing; :meth:`ClusterSnapshot.hold` is what commits a plan.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator

from shared.jobconfig.model import JobConfig
from shared.scheduling.placement.assign import claim_of, pick_gpus, pick_ports
from shared.scheduling.placement.checks import Ask, first_failure
from shared.scheduling.placement.order import Strategy, candidates
from shared.scheduling.placement.reasons import count_ruled_out
from shared.scheduling.placement.snapshot import Claim, ClusterSnapshot, NodeState
from shared.scheduling.placement.values import Plan, TaskPlacement, Unplaceable


def default_strategy(config: JobConfig) -> Strategy:
    """Pack jobs that use GPUs (whole nodes stay free for the next big gang); spread CPU-only jobs."""
    return "pack" if config.total_gpus else "spread"


def place(snapshot: ClusterSnapshot, config: JobConfig, *, seed: int = 0,
          strategy: Strategy | None = None) -> Plan | Unplaceable:
    """Place every task of ``config`` or none: roles in config order, then task index.

    ``strategy`` None means :func:`default_strategy`. Nodes that score the same are chosen by a generator
    seeded with ``seed``: the same seed on the same cluster state gives the same plan.
    """
    how = strategy or default_strategy(config)
    rng = random.Random(seed)
    held: list[tuple[NodeState, Claim]] = []
    used: set[int] = set()
    tasks: list[TaskPlacement] = []
    try:
        for role in config.task_roles:
            ask = Ask.of(role, config.gpu_type)
            for index in range(role.task_number):
                # Score and filter: the first node, in strategy order, that every checker accepts.
                found = _first_fit(snapshot, ask, how, rng.random(), used)
                if not isinstance(found, NodeState):
                    return Unplaceable.model_construct(task=f"{role.name}[{index}]", counts=dict(found))
                # Reserve: pick its GPUs and ports and hold them, so the job's next task sees them taken.
                gpus, ports = pick_gpus(found, ask), pick_ports(found, ask)
                claim = claim_of(ask, gpus, ports)
                snapshot.take(found, claim)
                held.append((found, claim))
                used.add(found.pos)
                tasks.append(TaskPlacement.model_construct(
                    role=role.name, index=index, node_id=found.id, ip=found.ip, gpus=gpus, ports=ports))
        return Plan.model_construct(tasks=tuple(tasks))
    finally:
        # Give back in reverse order what this call held: the snapshot is as it was.
        for node, claim in reversed(held):
            snapshot.give(node, claim)


def _first_fit(snapshot: ClusterSnapshot, ask: Ask, how: Strategy, turn: float,
               used: set[int]) -> NodeState | Counter[str]:
    """The node for one task, or (when none fits) how many live nodes fail each check."""
    tried: Counter[str] = Counter()
    nodes = candidates(snapshot, ask, how, turn)
    for node in _fresh_first(nodes, used) if how == "spread" else nodes:
        reason = first_failure(node, ask)
        if reason is None:
            return node
        tried[reason] += 1
    # Nothing fits: the nodes the index ruled out are counted from the indexes, not visited.
    return count_ruled_out(snapshot, ask, tried, tried.total())


def _fresh_first(nodes: Iterable[NodeState], used: set[int]) -> Iterator[NodeState]:
    """Spread: nodes that hold none of this job's tasks first, keeping their order; the others after."""
    later: list[NodeState] = []
    for node in nodes:
        if node.pos in used:
            later.append(node)
        else:
            yield node
    yield from later
