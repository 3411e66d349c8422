"""Why a task fits nowhere, counted per reason over every live node without visiting most of them.

The search has already tried, and counted, every candidate: each node the index offered (enough free
GPUs of the type for a GPU task, enough free CPUs for a CPU-only task). This module counts the rest,
the nodes the index ruled out, under the first check of :data:`shared.scheduling.placement.checks.CHAIN` each
fails: CPU, then memory, then GPUs. The counts therefore match a scan of every node in chain order.
"""

from __future__ import annotations

from collections import Counter

from shared.scheduling.placement.checks import Ask
from shared.scheduling.placement.snapshot import ClusterSnapshot


def count_ruled_out(snapshot: ClusterSnapshot, ask: Ask, tried: Counter[str], n_tried: int) -> Counter[str]:
    """``tried`` (the candidates' reasons, ``n_tried`` of them) plus the reasons of all other nodes."""
    counts = Counter(tried)
    others = len(snapshot.states) - n_tried
    if not others:
        return counts
    if not ask.gpus:
        counts[ask.lack_cpus] += others  # ruled out on CPUs, the first check
        return counts
    # Ruled out on GPUs, unless CPU or memory fails first. CPU-short nodes: all of them (a count per
    # distinct free-CPU value) minus the candidates already counted so. Memory-short ones: only the
    # nodes short of memory are visited.
    short_cpus = snapshot.cpu_index.count_below(ask.cpus) - tried[ask.lack_cpus]
    states, kind = snapshot.states, ask.gpu_kind
    short_memory = sum(
        1 for pos in snapshot.memory_index.below(ask.memory_mb)
        if states[pos].free_cpus >= ask.cpus and states[pos].gpu_count(kind) < ask.gpus
    )
    for reason, n in ((ask.lack_cpus, short_cpus), (ask.lack_memory, short_memory),
                      (ask.lack_gpus, others - short_cpus - short_memory)):
        if n:
            counts[reason] += n
    return counts
