"""Benchmark of the pure preemption decision: a full cluster of mixed-priority jobs, a ``crit`` gang waits.

    .venv/bin/python tests/benchmarks/preemption.py [--nodes 1000 --gpus 8 --jobs 5000 --runs 200] [--smoke]

For each size (``--sizes``: fractions of ``--nodes``, jobs scaled alike; default 0.25,0.5,1 so 250, 500
and 1,000 nodes) a cluster is filled by the real placement (pack, as the scheduler does) with running
jobs of mixed shapes (1 to 4 tasks of 1, 2, 4 or 8 GPUs, some CPU-only) and priorities (oppo, test,
prod, crit); some run on capacity borrowed from the waiting job's VC. Then ``--runs`` decisions are
timed for the waiting job (``--tasks`` x ``--task-gpus``: 8 x 8 by default, ``crit``), each with a
different seed, over ``--states`` different fillings (topped up with one-GPU jobs until the waiting
job does not fit as the cluster is). Decision time is the wall time of one
:func:`choose_victims` call; building the candidates from job records is timed apart (the scheduler
may keep them between passes). Every answer is checked: its plan fits the snapshot with the victims
gone, and each victim is eligible.

Each decision is timed twice: first with Python's collector as it is (``p99 ms (gc)``: its full passes,
triggered by whatever allocates, walk this process's whole heap of job records, configs and candidates,
tens of milliseconds here), then with the loaded state frozen out of its way (``gc.freeze()``, as a
long-lived service does after loading): the decision's own cost, the figure the target is about. The
CPU time of each decision (``p99 CPU ms``) is given too: the machine may be shared.

Prints a table, then (last line) one JSON object: per size p50/p99/max ms, victims, GPUs freed beyond
need (the victims' GPUs the plan does not take), and the growth exponent of p50 over nodes. Exits 1 when
an audit fails.

``--smoke``: 32 and 64 nodes (160 and 320 running jobs), 8 decisions over 2 fillings a size (seconds: that the
benchmark runs and its audits pass, not its figures; both sizes preempt).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared.jobconfig.model import JobConfig
from shared.jobconfig.priority import PRIORITIES, PriorityClass
from shared.records import GpuInfo, JobRecord, NodeRecord, TaskRecord, TaskState
from shared.scheduling.placement import ClusterSnapshot, NodeUsage, Plan, place
from shared.scheduling.preemption import Candidate, Held, NoPreemption, Preemption, Waiter, choose_victims, eligible
from tests.benchmarks.figures import exponent, percentile

PRIORITY_WEIGHTS = {PriorityClass.OPPO: 15, PriorityClass.TEST: 40, PriorityClass.PROD: 40, PriorityClass.CRIT: 5}
TASK_CHOICES, TASK_WEIGHTS = (1, 2, 4), (85, 10, 5)
GPU_CHOICES, GPU_WEIGHTS = (0, 1, 2, 4, 8), (20, 60, 10, 7, 3)
NOW_MS = 1_800_000_000_000


@dataclass(frozen=True)
class Options:
    nodes: int
    gpus: int
    jobs: int
    runs: int
    sizes: tuple[float, ...]
    states: int
    tasks: int
    task_gpus: int
    borrowed: float
    max_victims: int
    max_simulations: int
    seed: int


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000, help="nodes at the largest size")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--jobs", type=int, default=5000, help="running jobs at the largest size")
    p.add_argument("--runs", type=int, default=200, help="decisions timed per size")
    p.add_argument("--sizes", default="0.25,0.5,1", help="fractions of --nodes and --jobs, comma-separated")
    p.add_argument("--states", type=int, default=4, help="cluster fillings per size (runs split over them)")
    p.add_argument("--tasks", type=int, default=8, help="tasks of the waiting crit job")
    p.add_argument("--task-gpus", type=int, default=8, help="GPUs per task of the waiting job")
    p.add_argument("--borrowed", type=float, default=0.1, help="share of running jobs borrowing from vc a")
    p.add_argument("--max-victims", type=int, default=64)
    p.add_argument("--max-simulations", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a small run: 32 and 64 nodes, 8 decisions each")
    a = p.parse_args(argv)
    if a.smoke:
        a.nodes, a.jobs, a.runs, a.states, a.sizes = 64, 320, 8, 2, "0.5,1"
    return Options(nodes=a.nodes, gpus=a.gpus, jobs=a.jobs, runs=a.runs,
                   sizes=tuple(float(s) for s in a.sizes.split(",") if s.strip()), states=a.states, tasks=a.tasks,
                   task_gpus=a.task_gpus, borrowed=a.borrowed, max_victims=a.max_victims,
                   max_simulations=a.max_simulations, seed=a.seed)


def make_nodes(count: int, gpus: int) -> list[NodeRecord]:
    return [NodeRecord(id=f"node-{i:05d}", ip=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", cpus=8 * gpus,
                       memory_mb=64 * 1024 * gpus, gpus=tuple(GpuInfo(index=g, type="V100") for g in range(gpus)),
                       port_range=(20000, 29999)) for i in range(count)]


def config(name: str, tasks: int, gpus: int, cls: PriorityClass, vc: str) -> JobConfig:
    cpus = 4 * gpus if gpus else 2
    return JobConfig.model_validate({
        "jobName": name, "image": "busybox", "virtualCluster": vc,
        "extras": {"hivedScheduler": {"jobPriorityClass": cls.value}},
        "taskRoles": [{"name": "worker", "taskNumber": tasks, "cpuNumber": cpus, "memoryMB": cpus * 4096,
                       "gpuNumber": gpus, "command": "train"}]})


def fill(nodes: list[NodeRecord], jobs: int, o: Options, rng: random.Random) -> tuple[ClusterSnapshot,
                                                                                         list[Candidate]]:
    """Place running jobs (pack) until ``jobs`` run or 3 x ``jobs`` were tried; the snapshot holds them."""
    snapshot = ClusterSnapshot.build(nodes, [])
    classes, weights = list(PRIORITY_WEIGHTS), list(PRIORITY_WEIGHTS.values())
    records: list[tuple[JobRecord, tuple[str, ...]]] = []
    for n in range(3 * jobs):
        if len(records) >= jobs:
            break
        vc = rng.choice(("a", "b", "c"))
        cfg = config(f"run{n}", rng.choices(TASK_CHOICES, TASK_WEIGHTS)[0], rng.choices(GPU_CHOICES, GPU_WEIGHTS)[0],
                     rng.choices(classes, weights)[0], vc)
        plan = place(snapshot, cfg, seed=n)
        if not isinstance(plan, Plan):
            continue
        snapshot.hold(plan, cfg)
        tasks = tuple(TaskRecord(role=t.role, index=t.index, state=TaskState.RUNNING, node_id=t.node_id, ip=t.ip,
                                 gpus=t.gpus, ports=t.ports) for t in plan.tasks)
        job = JobRecord.model_validate({"_id": f"u{n % 50}~run{n}~x", "user": f"u{n % 50}", "name": f"run{n}",
                                        "virtual_cluster": vc, "config": cfg, "raw_config": {}, "created_ms": 0,
                                        "launched_ms": NOW_MS - rng.randrange(1, 86_400_000), "tasks": tasks})
        records.append((job, ("a",) if rng.random() < o.borrowed else ()))
    return snapshot, [Candidate.of(job, borrowed_from=b) for job, b in records]


def top_up(nodes: list[NodeRecord], snapshot: ClusterSnapshot, running: list[Candidate], waiting: JobConfig,
           rng: random.Random) -> list[Candidate]:
    """One-GPU test and oppo jobs on the nodes left whole until the waiting job no longer fits as it is."""
    n = 0
    while isinstance(place(snapshot, waiting, seed=n), Plan):
        cfg = config(f"top{n}", 1, 1, rng.choice((PriorityClass.TEST, PriorityClass.OPPO)), "a")
        plan = place(snapshot, cfg, strategy="spread", seed=n)
        assert isinstance(plan, Plan)
        snapshot.hold(plan, cfg)
        t = plan.tasks[0]
        running.append(Candidate(job_id=f"u~top{n}~x", vc="a", user="u", priority=PRIORITIES[PriorityClass.TEST],
                                 started_ms=NOW_MS - rng.randrange(1, 86_400_000), holdings=(Held(
                                     node_id=t.node_id, cpus=4, memory_mb=4 * 4096, gpus=t.gpus,
                                     ports=tuple(p for ps in t.ports.values() for p in ps)),)))
        n += 1
    return running


@dataclass
class Size:
    nodes: int
    gpus: int
    running_jobs: int
    gpus_used_pct: float
    candidates_build_ms: float
    decided: int
    preempted: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    p99_ms_gc: float
    p99_cpu_ms: float
    victims_p50: float
    victims_max: int
    simulations_p50: float
    gpus_beyond_need_p50: float
    gpus_beyond_need_max: int
    no_preemption: dict[str, int]
    audit: str



def audit(nodes: list[NodeRecord], waiting: Waiter, running: list[Candidate], answer: Preemption) -> str:
    """Every victim is eligible, and the job fits a cluster rebuilt without the victims."""
    by_id = {c.job_id: c for c in running}
    gone = {v.job_id for v in answer.victims}
    if not all(eligible(waiting, by_id[v]).ok for v in gone):
        return "FAILED: an ineligible victim"
    usage = {n.id: NodeUsage() for n in nodes}
    for c in running:
        for h in c.holdings if c.job_id not in gone else ():
            u = usage[h.node_id]
            u.cpus, u.memory_mb = u.cpus + h.cpus, u.memory_mb + h.memory_mb
            u.gpus.update(h.gpus)
            u.ports.update(h.ports)
    again = place(ClusterSnapshot(tuple(nodes), usage), waiting.config, seed=0)
    return "ok" if isinstance(again, Plan) else f"FAILED: it does not fit without its victims: {again.reason}"


def one_size(o: Options, frac: float) -> Size:
    n_nodes, n_jobs = max(1, round(o.nodes * frac)), max(1, round(o.jobs * frac))
    rng = random.Random(o.seed * 7919 + n_nodes)
    nodes = make_nodes(n_nodes, o.gpus)
    times: list[float] = []
    times_gc: list[float] = []
    cpu_times: list[float] = []
    victims: list[int] = []
    sims: list[float] = []
    beyond: list[int] = []
    builds: list[float] = []
    none: dict[str, int] = {}
    used = running_jobs = 0
    verdict = "ok"
    for state in range(o.states):
        snapshot, built = fill(nodes, n_jobs, o, rng)
        crit = config(f"crit{state}", o.tasks, o.task_gpus, PriorityClass.CRIT, "a")
        built = top_up(nodes, snapshot, built, crit, rng)
        t0 = time.perf_counter()
        running = [Candidate.model_validate(c.model_dump()) for c in built]  # what building them costs
        builds.append((time.perf_counter() - t0) * 1000)
        running_jobs += len(running)
        used += sum(len(s.usage.gpus) for s in snapshot.states)
        waiting = Waiter(job_id=f"boss~crit{state}~x", vc="a", priority=PRIORITIES[PriorityClass.CRIT], config=crit)
        seeds = [o.seed * 1_000_003 + state * 10_007 + run for run in range(max(1, o.runs // o.states))]
        # First with the collector as it is: its full passes walk the whole heap of this process (every job
        # record, config and candidate), whatever triggered them. Then as a long-lived service would run,
        # its loaded state frozen out of the collector's way (gc.freeze): the decision's own cost.
        for seed in seeds:
            start = time.perf_counter_ns()
            choose_victims(snapshot, waiting, running, seed=seed, max_victims=o.max_victims,
                           max_simulations=o.max_simulations)
            times_gc.append((time.perf_counter_ns() - start) / 1e6)
        gc.collect()
        gc.freeze()
        for seed in seeds:
            start, cpu = time.perf_counter_ns(), time.thread_time_ns()
            answer = choose_victims(snapshot, waiting, running, seed=seed, max_victims=o.max_victims,
                                    max_simulations=o.max_simulations)
            times.append((time.perf_counter_ns() - start) / 1e6)
            cpu_times.append((time.thread_time_ns() - cpu) / 1e6)
            sims.append(answer.simulations)
            if isinstance(answer, NoPreemption):
                none[answer.code] = none.get(answer.code, 0) + 1
                continue
            victims.append(len(answer.victims))
            beyond.append(answer.unused_gpus)
            if seed == seeds[0] and verdict == "ok":
                verdict = audit(nodes, waiting, running, answer)
        gc.unfreeze()
    return Size(
        nodes=n_nodes, gpus=n_nodes * o.gpus, running_jobs=running_jobs // o.states,
        gpus_used_pct=round(100 * used / (o.states * n_nodes * o.gpus), 1),
        candidates_build_ms=round(statistics.median(builds), 1), decided=len(times), preempted=len(victims),
        p50_ms=round(statistics.median(times), 3), p99_ms=round(percentile(times, 0.99), 3),
        max_ms=round(max(times), 3),
        p99_ms_gc=round(percentile(times_gc, 0.99), 3), p99_cpu_ms=round(percentile(cpu_times, 0.99), 3),
        victims_p50=statistics.median(victims) if victims else 0, victims_max=max(victims, default=0),
        simulations_p50=statistics.median(sims), gpus_beyond_need_p50=statistics.median(beyond) if beyond else 0,
        gpus_beyond_need_max=max(beyond, default=0), no_preemption=none, audit=verdict)


def growth_exponent(sizes: list[Size]) -> float:
    """The slope of log(p50 ms) over log(nodes): 1 is linear."""
    return exponent([s.nodes for s in sizes], [s.p50_ms for s in sizes])


def table(sizes: list[Size]) -> str:
    head = ["nodes", "jobs", "GPUs used", "p50 ms", "p99 ms", "max ms", "p99 CPU ms", "p99 ms (gc)",
            "victims p50/max", "sims p50",
            "beyond need p50/max", "no preemption", "candidates ms", "audit"]
    rows = [[f"{s.nodes:,}", f"{s.running_jobs:,}", f"{s.gpus_used_pct:.1f}%", f"{s.p50_ms:.2f}", f"{s.p99_ms:.2f}",
             f"{s.max_ms:.2f}", f"{s.p99_cpu_ms:.2f}", f"{s.p99_ms_gc:.2f}",
             f"{s.victims_p50:g}/{s.victims_max}", f"{s.simulations_p50:g}",
             f"{s.gpus_beyond_need_p50:g}/{s.gpus_beyond_need_max}",
             ",".join(f"{k}:{v}" for k, v in sorted(s.no_preemption.items())) or "-", f"{s.candidates_build_ms:.0f}",
             s.audit] for s in sizes]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])


def main(argv: list[str] | None = None) -> int:
    o = parse(argv)
    sizes = []
    for frac in o.sizes:
        sizes.append(one_size(o, frac))
        print(f"  {sizes[-1].nodes} nodes: p99 {sizes[-1].p99_ms:.2f} ms", file=sys.stderr)
    print(f"waiting job: crit, {o.tasks} tasks x {o.task_gpus} GPUs; {o.runs} decisions per size over {o.states} "
          f"fillings; max_victims {o.max_victims}, max_simulations {o.max_simulations}; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(table(sizes))
    largest = max(sizes, key=lambda s: s.nodes)
    print(json.dumps({"p50_ms": largest.p50_ms, "p99_ms": largest.p99_ms, "p99_cpu_ms": largest.p99_cpu_ms,
                      "p99_ms_gc": largest.p99_ms_gc,
                      "nodes": largest.nodes, "running_jobs": largest.running_jobs,
                      "growth_exponent": round(growth_exponent(sizes), 2),
                      "gpus_beyond_need_p50": largest.gpus_beyond_need_p50,
                      "gpus_beyond_need_max": largest.gpus_beyond_need_max,
                      "sizes": [asdict(s) for s in sizes]}))
    return 0 if all(s.audit == "ok" for s in sizes) else 1


if __name__ == "__main__":
    sys.exit(main())
