"""Benchmark: what running tasks that print nothing cost ``paiq up`` and its database while nothing else happens.

    .venv/bin/python tests/benchmarks/idle_running.py [--tasks 10,25,50] [--seconds 30] [--settle 15] [--keep]
        [--smoke]

Starts ``paiq up`` (tests/infra.py's ``start_platform("all-in-one", ...)``: its own database, the product's
periods: reconcile and task profiles every 10 s) on this machine's Docker engine, its node declared large
enough for every task. At each size it submits one-task jobs running ``sleep`` (on local/busybox:bench, the
test image tagged as a lab's jobs tag theirs) until that many run, lets the start's tail pass (``--settle``
seconds: the first profile rounds, the logs' first writes), then measures the CPU time of paiq up and of its
database over ``--seconds``: a lab's box with that many training jobs that print nothing for a while.

Prints a table (each process's share of a core, and the CPU milliseconds a second each running task costs),
the fitted exponent of the whole's growth with the tasks (1: each task costs the same; below: a fixed cost
dominates), and, as its last line, one JSON object of the figures. ``--smoke``: 2 and 4 tasks, 3 seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import docker

from services.cli.client import PaiqClient, paiq_client
from tests.benchmarks.figures import exponent
from tests.benchmarks.submit_to_scheduled import IMAGE, cpu_seconds, processes
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform, unique


@dataclass(frozen=True)
class Options:
    tasks: tuple[int, ...]
    seconds: float
    settle: float
    keep: bool
    smoke: bool


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="10,25,50", help="running tasks at each size, ascending")
    p.add_argument("--seconds", type=float, default=30.0, help="the idle window measured at each size")
    p.add_argument("--settle", type=float, default=15.0, help="seconds let pass after the last start")
    p.add_argument("--keep", action="store_true", help="keep the platform's work directory (its logs)")
    p.add_argument("--smoke", action="store_true", help="2 and 4 tasks, 3 s each: that the benchmark runs")
    a = p.parse_args(argv)
    if a.smoke:
        return Options(tasks=(2, 4), seconds=3.0, settle=2.0, keep=a.keep, smoke=True)
    tasks = tuple(sorted({int(t) for t in a.tasks.split(",")}))
    if not tasks or tasks[0] < 1:
        p.error("--tasks: positive counts, comma-separated")
    return Options(tasks=tasks, seconds=a.seconds, settle=a.settle, keep=a.keep, smoke=False)


def job_config(name: str) -> bytes:
    return json.dumps({"jobName": name, "image": IMAGE, "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 100, "command": "sleep 100000"}]}).encode()


@dataclass
class Size:
    tasks: int
    seconds: float
    cpu_s: dict[str, float]
    percent: dict[str, float]
    percent_total: float
    ms_per_task_second: float
    load_average: float


async def running(client: PaiqClient, user: str) -> int:
    return len(await client.jobs(user, state="RUNNING"))


async def run_to(client: PaiqClient, user: str, target: int, submitted: int, limit_s: float = 300) -> int:
    """Submit until ``target`` jobs were submitted in all, then wait until that many run."""
    for i in range(submitted, target):
        await client.submit(user, job_config(f"idle{i}"))
    deadline = time.monotonic() + limit_s
    while (now_running := await running(client, user)) < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{now_running} of {target} tasks running after {limit_s:.0f} s")
        await asyncio.sleep(1)
    return target


async def measure(o: Options, platform: Platform) -> list[Size]:
    sizes: list[Size] = []
    async with paiq_client(platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        user = unique("idle")
        await admin.put_user(user, "bench-pass")
        client = anonymous.with_token((await anonymous.login(user, "bench-pass"))["token"])
        submitted = 0
        for target in o.tasks:
            submitted = await run_to(client, user, target, submitted)
            await asyncio.sleep(o.settle)
            pids = processes(platform, None, "")
            load = os.getloadavg()[0]
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            await asyncio.sleep(o.seconds)
            took = time.monotonic() - started
            cpu = {name: round(cpu_seconds(pid) - before[name], 3) for name, pid in pids.items()}
            total = sum(cpu.values())
            sizes.append(Size(tasks=target, seconds=round(took, 2), cpu_s=cpu,
                              percent={name: round(100 * s / took, 2) for name, s in cpu.items()},
                              percent_total=round(100 * total / took, 2),
                              ms_per_task_second=round(1000 * total / took / target, 3), load_average=load))
    return sizes


async def run(o: Options) -> list[Size]:
    await asyncio.to_thread(lambda: docker.from_env().images.get("local/busybox:latest").tag(IMAGE))
    workdir = Path(tempfile.mkdtemp(prefix="paiq-bench-idle-"))
    platform = await asyncio.to_thread(functools.partial(
        start_platform, "all-in-one", workdir, PAIQ_NODE_CPUS="100000", PAIQ_NODE_MEMORY_MB=str(100000 * 1024),
        PAIQ_NODE_PORT_RANGE="20000-60000", PAIQ_LOG_LEVEL="info", PAIQ_NODE_TIMEOUT_SECONDS="3600",
        PAIQ_RECONCILE_SECONDS="10", PAIQ_PROFILE_SECONDS="10"))  # the product's periods, not the e2e tests'
    try:
        return await measure(o, platform)
    finally:
        await asyncio.to_thread(stop_platform, platform, docker.from_env())
        if o.keep:
            print(f"logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def table(sizes: list[Size]) -> str:
    names = sorted({n for s in sizes for n in s.cpu_s})
    head = f"{'running tasks':>14} {'window s':>9} " + " ".join(f"{n + ' %':>14}" for n in names)
    head += f" {'all %':>8} {'ms/s a task':>12} {'load':>6}"
    rows = [head]
    for s in sizes:
        rows.append(f"{s.tasks:>14} {s.seconds:>9.1f} " + " ".join(f"{s.percent.get(n, 0.0):>14.2f}" for n in names)
                    + f" {s.percent_total:>8.2f} {s.ms_per_task_second:>12.3f} {s.load_average:>6.2f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    o = parse(argv)
    sizes = asyncio.run(run(o))
    growth = exponent([s.tasks for s in sizes], [max(s.percent_total, 1e-6) for s in sizes])
    print(table(sizes))
    print(f"growth of the whole with the running tasks: exponent {growth:.2f}")
    print(json.dumps({"sizes": [asdict(s) for s in sizes], "exponent": round(growth, 3),
                      "percent_at_largest": sizes[-1].percent_total}))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
