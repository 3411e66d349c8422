"""Scoring: in which order the nodes that may serve a task are tried.

The index does the scoring. A task with GPUs is scored on its node's free GPUs of the asked type, a
CPU-only task on free CPUs: ``pack`` tries the fewest that still fit first (best fit: a node fills
before the next one starts, and whole nodes stay whole for big tasks), ``spread`` the most first.
Nodes with equal scores are tried in a rotation of their snapshot order that starts at ``turn``, a
draw from the placement's seeded generator: ties go to a uniformly random node, and the same seed on
the same cluster state gives the same plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from shared.scheduling.placement.checks import Ask
from shared.scheduling.placement.snapshot import ClusterSnapshot, NodeState

Strategy = Literal["pack", "spread"]


def candidates(snapshot: ClusterSnapshot, ask: Ask, strategy: Strategy, turn: float) -> Iterator[NodeState]:
    """Every node with enough of the task's scored resource (no other), best first."""
    if ask.gpus:
        index, need = snapshot.gpu_index.get(ask.gpu_kind), ask.gpus
    else:
        index, need = snapshot.cpu_index, ask.cpus
    if index is None:  # no node has a GPU of this type
        return
    states = snapshot.states
    for group in index.groups_from(need, ascending=strategy == "pack"):
        n = len(group)
        start = int(turn * n)
        for i in range(start, start + n):
            yield states[group[i - n if i >= n else i]]
