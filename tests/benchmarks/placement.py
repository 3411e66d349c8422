"""Benchmark of the pure placement: a seeded cluster and queue, every job tried once in queue order.

    .venv/bin/python tests/benchmarks/placement.py [--nodes 1000 --gpus-per-node 8 --jobs 10000 --seed 1] [--smoke]

Placed jobs are held in the snapshot; a job that does not fit is skipped, as the scheduler's pass does.
Prints a table, then (last line) one JSON object of the figures. Decision time is the wall time of one
``place()`` call; the pass time adds the holds, and tasks/s is tasks placed over the pass time, both
over wall time and over the process's CPU time (the machine may be shared: the CPU figure is the one
that does not depend on what else runs). The plans of the pass are audited at the end (exit status 1 if
they fail).

``--smoke``: 40 nodes and 200 jobs (a second: that the benchmark runs and its audit passes, not its figures;
some jobs are placed and the rest do not fit).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared.jobconfig.model import JobConfig
from shared.records import GpuInfo, NodeRecord
from shared.scheduling.placement import ClusterSnapshot, Plan, Strategy, place
from tests.benchmarks.figures import percentile

# GPUs per task of a role, and how often: most tasks take one GPU, some a whole node, some none.
GPU_CHOICES = (0, 1, 2, 4, 8)
GPU_WEIGHTS = (20, 40, 15, 15, 10)


@dataclass(frozen=True)
class Options:
    nodes: int
    gpus_per_node: int
    gpu_types: tuple[str, ...]
    mixed_nodes: float
    cpus_per_node: int
    memory_mb_per_node: int
    jobs: int
    max_tasks: int
    typed_jobs: float
    fixed_port_jobs: float
    strategy: Strategy | None
    seed: int


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu-types", default="V100,P100,A100,K80", help="comma-separated GPU types")
    p.add_argument("--mixed-nodes", type=float, default=0.1, help="share of nodes with two GPU types")
    p.add_argument("--cpus-per-node", type=int, default=64)
    p.add_argument("--memory-mb-per-node", type=int, default=512 * 1024)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--max-tasks", type=int, default=16, help="tasks per job: uniform in 1..max")
    p.add_argument("--typed-jobs", type=float, default=0.5, help="share of GPU jobs that name a gpuType")
    p.add_argument("--fixed-port-jobs", type=float, default=0.1, help="share of jobs asking a fixed port")
    p.add_argument("--strategy", choices=["pack", "spread"], default=None, help="default: pack GPU jobs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a small run: 40 nodes, 200 jobs")
    a = p.parse_args(argv)
    if a.smoke:
        a.nodes, a.jobs = 40, 200
    return Options(nodes=a.nodes, gpus_per_node=a.gpus_per_node, gpu_types=tuple(a.gpu_types.split(",")),
                   mixed_nodes=a.mixed_nodes, cpus_per_node=a.cpus_per_node, memory_mb_per_node=a.memory_mb_per_node,
                   jobs=a.jobs, max_tasks=a.max_tasks, typed_jobs=a.typed_jobs, fixed_port_jobs=a.fixed_port_jobs,
                   strategy=a.strategy, seed=a.seed)


def make_nodes(o: Options, rng: random.Random) -> list[NodeRecord]:
    nodes = []
    for i in range(o.nodes):
        kinds = [rng.choice(o.gpu_types)]
        if rng.random() < o.mixed_nodes:
            kinds.append(rng.choice(o.gpu_types))
        gpus = tuple(GpuInfo(index=g, type=kinds[g * len(kinds) // o.gpus_per_node]) for g in range(o.gpus_per_node))
        nodes.append(NodeRecord(id=f"node-{i:05d}", ip=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                                cpus=o.cpus_per_node, memory_mb=o.memory_mb_per_node, gpus=gpus,
                                port_range=(20000, 29999)))
    return nodes


def make_job(o: Options, rng: random.Random, n: int) -> JobConfig:
    """1..max_tasks tasks, in one role or split into a CPU-only ps role and a worker role."""
    tasks = rng.randint(1, o.max_tasks)
    gpus = rng.choices(GPU_CHOICES, GPU_WEIGHTS)[0]
    ports: list[dict[str, Any]] = [{"label": "ssh", "beginAt": 0, "portNumber": 1}]
    if rng.random() < o.fixed_port_jobs:
        ports.append({"label": "http", "beginAt": 40000 + rng.randrange(8), "portNumber": 1})
    roles = []
    if tasks > 2 and rng.random() < 0.3:
        ps = rng.randint(1, tasks // 2)
        roles.append({"name": "ps", "taskNumber": ps, "cpuNumber": 2, "memoryMB": 8192, "command": "ps",
                      "portList": ports})
        tasks -= ps
    cpus = max(1, 4 * gpus) if gpus else rng.randint(1, 4)
    roles.append({"name": "worker", "taskNumber": tasks, "cpuNumber": cpus, "memoryMB": cpus * 4096,
                  "gpuNumber": gpus, "command": "train", "portList": ports})
    gpu_type = rng.choice(o.gpu_types) if gpus and rng.random() < o.typed_jobs else ""
    return JobConfig.model_validate({"jobName": f"job{n}", "image": "busybox", "gpuType": gpu_type,
                                     "taskRoles": roles})


@dataclass
class Figures:
    nodes: int
    gpus: int
    jobs: int
    tasks_queued: int
    build_s: float
    pass_s: float
    pass_cpu_s: float
    jobs_placed: int
    jobs_unplaceable: int
    tasks_placed: int
    tasks_per_s: float
    tasks_per_cpu_s: float
    placed_p50_ms: float
    placed_p99_ms: float
    placed_max_ms: float
    unplaceable_p50_ms: float
    unplaceable_p99_ms: float
    unplaceable_max_ms: float
    seed: int
    strategy: str
    audit: str
    load_average: float



def run(o: Options) -> Figures:
    rng = random.Random(o.seed)
    nodes = make_nodes(o, rng)
    queue = [make_job(o, rng, n) for n in range(o.jobs)]
    t0 = time.perf_counter()
    snapshot = ClusterSnapshot.build(nodes, [])
    build_s = time.perf_counter() - t0
    placed_ms: list[float] = []
    unplaceable_ms: list[float] = []
    tasks_placed = 0
    plans: list[tuple[Plan, JobConfig]] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    for n, config in enumerate(queue):
        start = time.perf_counter_ns()
        result = place(snapshot, config, seed=o.seed * 1_000_003 + n, strategy=o.strategy)
        took_ms = (time.perf_counter_ns() - start) / 1e6
        if isinstance(result, Plan):
            snapshot.hold(result, config)
            plans.append((result, config))
            placed_ms.append(took_ms)
            tasks_placed += len(result.tasks)
        else:
            unplaceable_ms.append(took_ms)
    pass_s, pass_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    return Figures(
        nodes=o.nodes, gpus=o.nodes * o.gpus_per_node, jobs=o.jobs, tasks_queued=sum(c.total_tasks for c in queue),
        build_s=round(build_s, 4), pass_s=round(pass_s, 3), pass_cpu_s=round(pass_cpu_s, 3), jobs_placed=len(placed_ms),
        jobs_unplaceable=len(unplaceable_ms), tasks_placed=tasks_placed,
        tasks_per_s=round(tasks_placed / pass_s) if pass_s else 0.0,
        tasks_per_cpu_s=round(tasks_placed / pass_cpu_s) if pass_cpu_s else 0.0,
        placed_p50_ms=round(statistics.median(placed_ms), 3) if placed_ms else 0.0,
        placed_p99_ms=round(percentile(placed_ms, 0.99), 3), placed_max_ms=round(max(placed_ms, default=0.0), 3),
        unplaceable_p50_ms=round(statistics.median(unplaceable_ms), 3) if unplaceable_ms else 0.0,
        unplaceable_p99_ms=round(percentile(unplaceable_ms, 0.99), 3),
        unplaceable_max_ms=round(max(unplaceable_ms, default=0.0), 3),
        seed=o.seed, strategy=o.strategy or "default (pack GPU jobs, spread CPU-only jobs)",
        audit=audit(nodes, plans), load_average=round(os.getloadavg()[0], 2),
    )


def audit(nodes: list[NodeRecord], plans: list[tuple[Plan, JobConfig]]) -> str:
    """Tally the plans alone: no node over its CPUs or memory, no GPU or port given twice, GPUs of the type."""
    by_id = {n.id: n for n in nodes}
    cpus: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    gpus: set[tuple[str, int]] = set()
    ports: set[tuple[str, int]] = set()
    for plan, config in plans:
        for t in plan.tasks:
            role, node = config.role(t.role), by_id[t.node_id]
            cpus[t.node_id] += role.cpu_number
            memory[t.node_id] += role.memory_mb
            kinds = {g.index: g.type for g in node.gpus}
            for g in t.gpus:
                if (t.node_id, g) in gpus or g not in kinds or (config.gpu_type and kinds[g] != config.gpu_type):
                    return f"FAILED: GPU {g} of {t.node_id}"
                gpus.add((t.node_id, g))
            for p in (p for ps in t.ports.values() for p in ps):
                if (t.node_id, p) in ports:
                    return f"FAILED: port {p} of {t.node_id} given twice"
                ports.add((t.node_id, p))
    over = [i for i in cpus if cpus[i] > by_id[i].cpus or memory[i] > by_id[i].memory_mb]
    return f"FAILED: over capacity on {over[:3]}" if over else "ok"


def table(f: Figures) -> str:
    rows = [
        ("cluster", f"{f.nodes} nodes, {f.gpus} GPUs"),
        ("queue", f"{f.jobs} jobs, {f.tasks_queued} tasks"),
        ("strategy / seed", f"{f.strategy} / {f.seed}"),
        ("snapshot build", f"{f.build_s * 1000:.1f} ms"),
        ("pass (place + hold)", f"{f.pass_s:.3f} s wall, {f.pass_cpu_s:.3f} s CPU"),
        ("jobs placed / unplaceable", f"{f.jobs_placed} / {f.jobs_unplaceable}"),
        ("tasks placed", f"{f.tasks_placed}"),
        ("tasks placed per second", f"{f.tasks_per_s:.0f} (wall), {f.tasks_per_cpu_s:.0f} (per CPU second)"),
        ("decision ms, placed p50/p99/max", f"{f.placed_p50_ms:.3f} / {f.placed_p99_ms:.3f} / {f.placed_max_ms:.3f}"),
        ("decision ms, unplaceable p50/p99/max",
         f"{f.unplaceable_p50_ms:.3f} / {f.unplaceable_p99_ms:.3f} / {f.unplaceable_max_ms:.3f}"),
        ("audit of the plans", f.audit),
        ("load average (1 min)", f"{f.load_average:.2f} on {os.cpu_count()} CPUs"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    figures = run(parse(argv))
    print(table(figures))
    print(json.dumps(asdict(figures)))
    return 0 if figures.audit == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
