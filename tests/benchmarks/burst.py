"""Benchmark: bursts of submissions, and single jobs, behind a standing queue that never fits.

    .venv/bin/python tests/benchmarks/burst.py [--standing 5000 --bursts 250,500,1000,2000 --singles 30
        --concurrency 32 --reconcile-seconds 10] [--mongo-uri URI] [--profile FILE] [--keep] [--smoke]

Starts a private in-memory SecantusDB (or uses --mongo-uri) and the four services as separate processes
over the real RabbitMQ (tests/infra.py's ``start_platform("separate", ...)``), the launcher's node declared
large enough for every fitting job (100,000 CPUs, 8 TiB). It stores --standing queued jobs straight
through ``Store.insert_jobs`` (WAITING/queued JobRecords of another user): one task each asking 1,024 CPUs
and 16 TiB, more than any node, so none can ever fit. A warm-up POST then makes the scheduler decide them
all once (their ``job.waiting`` events are counted until every one has arrived); the launcher is paused
(SIGSTOP, killed at the end) once that warm-up job was scheduled, so nothing starts.

A queue of the benchmark's own, bound on the run's exchange to ``job.scheduled`` and ``job.waiting``, sees
each decision. First --singles fitting one-task jobs are POSTed one at a time (a random pause of up to
0.5 s before each), each timed from its POST to its ``job.scheduled``; then, for each of --bursts, that many
are POSTed with --concurrency requests in flight and the burst is timed from its first POST to its last
job's ``job.scheduled``. Placed jobs stay placed (nothing runs them). PAIQ_RECONCILE_SECONDS is the
product's default (10), so the timer passes are as in a real cluster.

Prints a table (each phase's CPU seconds per process, scheduler passes and their mean time) and, as its
last line, one JSON object: ``burst_exponent`` (least-squares slope of log seconds over log burst size; 1
is linear), ``single_p50_s``, ``single_p99_s``, ``burst_seconds`` and the CPU seconds of each process.
With --profile FILE the scheduler is recorded with py-spy (raw, collapsed stacks) over singles and bursts.

``--smoke``: 50 standing jobs, 3 singles, bursts of 10 and 20 (8 in flight), PAIQ_RECONCILE_SECONDS 1
(seconds: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aio_pika

from services.cli.client import PaiqClient, paiq_client
from shared.db.store import open_store
from shared.jobconfig.model import JobConfig
from shared.records import JobRecord, initial_tasks, now_ms
from shared.settings.model import Settings
from tests.benchmarks.bigjob import login, profiling
from tests.benchmarks.figures import exponent, percentile
from tests.benchmarks.platform_run import separate_platform
from tests.benchmarks.submit_to_scheduled import cpu_seconds, job_config, processes
from tests.infra import Platform

STANDING_USER = "standing"
NODE_MEMORY_MB = 8 * 1024 * 1024  # 8 TiB: every burst fits, no standing job does
NEVER_MB = 16 * 1024 * 1024  # 16 TiB, the most a config may ask
WARMUP = 3


@dataclass(frozen=True)
class Options:
    standing: int
    bursts: tuple[int, ...]
    singles: int
    concurrency: int
    reconcile_s: int
    amqp_url: str
    mongo_uri: str | None
    timeout_s: float
    profile: str | None
    keep: bool


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--standing", type=int, default=5000, help="queued jobs that never fit")
    p.add_argument("--bursts", default="250,500,1000,2000", help="jobs per burst, comma-separated")
    p.add_argument("--singles", type=int, default=30, help="single jobs submitted one at a time")
    p.add_argument("--concurrency", type=int, default=32, help="POSTs in flight during a burst")
    p.add_argument("--reconcile-seconds", type=int, default=10, help="PAIQ_RECONCILE_SECONDS of the services")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a burst's job.scheduled")
    p.add_argument("--profile", metavar="FILE", help="record the scheduler with py-spy (raw) meanwhile")
    p.add_argument("--keep", action="store_true", help="keep the work directory (service logs)")
    p.add_argument("--smoke", action="store_true", help="a small run: 50 standing jobs, bursts of 10 and 20")
    a = p.parse_args(argv)
    if a.smoke:
        a.standing, a.bursts, a.singles, a.concurrency, a.reconcile_seconds = 50, "10,20", 3, 8, 1
    return Options(standing=a.standing, bursts=tuple(int(s) for s in a.bursts.split(",") if s.strip()),
                   singles=a.singles, concurrency=a.concurrency, reconcile_s=a.reconcile_seconds,
                   amqp_url=a.amqp_url, mongo_uri=a.mongo_uri, timeout_s=a.timeout, profile=a.profile, keep=a.keep)


def standing_job(i: int, now: int) -> JobRecord:
    name = f"standing{i:05d}"
    raw: dict[str, Any] = {"jobName": name, "image": "local/busybox:latest", "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1024, "memoryMB": NEVER_MB, "command": "sleep 1"}]}
    config = JobConfig.model_validate(raw)
    created = now - 60_000 + i  # oldest first, ahead of everything submitted later
    return JobRecord(id=f"{STANDING_USER}~{name}~{i:08x}", user=STANDING_USER, name=name, virtual_cluster="default",
                     config=config, raw_config=raw, created_ms=created, queued_ms=created, tasks=initial_tasks(config))


# --- what the broker carried ---------------------------------------------------------------------


@dataclass
class Watch:
    """``job.scheduled`` (by ``user~name``, monotonic time) and ``job.waiting`` (distinct jobs) seen."""

    scheduled: dict[str, float] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        arrived = time.monotonic()
        event = json.loads(message.body)
        key = str(event.get("subject", "")).rsplit("~", 1)[0]
        if event.get("type") == "job.scheduled":
            self.scheduled.setdefault(key, arrived)
        else:
            self.waiting.add(key)
        self.changed.set()

    async def until(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what} not seen within {timeout_s:.0f}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))

    async def all_scheduled(self, keys: list[str], timeout_s: float) -> float:
        await self.until(lambda: all(k in self.scheduled for k in keys), timeout_s, f"{len(keys)} job.scheduled")
        return max(self.scheduled[k] for k in keys)


@contextlib.asynccontextmanager
async def watching(amqp_url: str, exchange: str) -> AsyncIterator[Watch]:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        ex = await channel.get_exchange(exchange)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for key in ("job.scheduled", "job.waiting"):
            await queue.bind(ex, key)
        watch = Watch()
        await queue.consume(watch.on_message, no_ack=True)
        yield watch


# --- the run ------------------------------------------------------------------------------------


def pass_metrics(platform: Platform) -> tuple[float, int]:
    """The scheduler's ``paiq_scheduler_pass_seconds`` sum and count (whole passes: reads, decision, writes)."""
    with urllib.request.urlopen(platform.ops["scheduler"] + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = re.search(r"^paiq_scheduler_pass_seconds_sum (\S+)$", text, re.M)
    count = re.search(r"^paiq_scheduler_pass_seconds_count (\S+)$", text, re.M)
    return (float(total.group(1)) if total else 0.0), (int(float(count.group(1))) if count else 0)


@dataclass
class Phase:
    name: str
    jobs: int
    seconds: float  # singles: the sum of their latencies; a burst: first POST -> last job.scheduled
    post_s: float  # until the last POST was answered
    passes: int
    pass_mean_ms: float
    cpu_s: dict[str, float]


@dataclass
class Meter:
    platform: Platform
    pids: dict[str, int]

    def start(self) -> tuple[dict[str, float], tuple[float, int]]:
        return {n: cpu_seconds(p) for n, p in self.pids.items()}, pass_metrics(self.platform)

    def phase(self, name: str, jobs: int, seconds: float, post_s: float,
              before: tuple[dict[str, float], tuple[float, int]]) -> Phase:
        cpu, (pass_s, passes) = before
        now_s, now_n = pass_metrics(self.platform)
        n = now_n - passes
        return Phase(name=name, jobs=jobs, seconds=round(seconds, 3), post_s=round(post_s, 3), passes=n,
                     pass_mean_ms=round(1000 * (now_s - pass_s) / n, 1) if n else 0.0,
                     cpu_s={k: round(cpu_seconds(p) - cpu[k], 2) for k, p in self.pids.items()})


async def post_all(client: PaiqClient, user: str, names: list[str], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        async with gate:
            await client.submit(user, job_config(name))

    await asyncio.gather(*(one(n) for n in names))


async def settle(o: Options, platform: Platform, mongo_uri: str, client: PaiqClient, user: str,
                 watch: Watch) -> float:
    """Store the standing queue, have it decided once (warm-up POSTs), pause the launcher: seconds to decide."""
    settings = Settings.from_env(platform.env)
    async with open_store(mongo_uri, settings.database) as store:
        now = now_ms()
        for start in range(0, o.standing, 1000):
            await store.insert_jobs([standing_job(i, now) for i in range(start, min(o.standing, start + 1000))])
    t0 = time.monotonic()
    warm = [f"warm{i}" for i in range(WARMUP)]
    await post_all(client, user, warm, WARMUP)
    await watch.all_scheduled([f"{user}~{n}" for n in warm], 300)
    launcher = next(p for p in platform.procs if "services.launcher" in str(p.args))
    launcher.send_signal(signal.SIGSTOP)  # its node registered (the warm-up was placed); nothing starts now
    await watch.until(lambda: sum(k.startswith(STANDING_USER + "~") for k in watch.waiting) >= o.standing, 300,
                      f"{o.standing} job.waiting")
    decided = time.monotonic() - t0
    await asyncio.sleep(2 * o.reconcile_s)  # the passes that follow the first settle too
    return decided


async def measure(o: Options, platform: Platform, mongo_uri: str) -> tuple[float, list[float], list[Phase]]:
    rng = random.Random(1)
    async with paiq_client(platform.api) as anonymous, watching(o.amqp_url, platform.env["PAIQ_EXCHANGE"]) as watch:
        client, user = await login(platform, anonymous)
        decided = await settle(o, platform, mongo_uri, client, user, watch)
        print(f"{o.standing} standing jobs decided in {decided:.1f} s", file=sys.stderr, flush=True)
        pids = {n: p for n, p in processes(platform, mongo_uri, o.amqp_url).items() if n != "launcher"}
        meter, phases, singles = Meter(platform, pids), [], []
        with profiling(o.profile, pids["scheduler"]):
            before = meter.start()
            for i in range(o.singles):
                await asyncio.sleep(rng.uniform(0, 0.5))
                t0 = time.monotonic()
                await client.submit(user, job_config(f"single{i}"))
                posted = time.monotonic() - t0
                singles.append(await watch.all_scheduled([f"{user}~single{i}"], o.timeout_s) - t0)
                print(f"  single {i}: POST {posted * 1000:.0f} ms, scheduled {singles[-1]:.3f} s", file=sys.stderr)
            phases.append(meter.phase("singles", o.singles, sum(singles), 0.0, before))
            for size in o.bursts:
                await asyncio.sleep(min(3, o.reconcile_s))  # the passes after the previous phase end
                names = [f"b{size}-{i}" for i in range(size)]
                before = meter.start()
                t0 = time.monotonic()
                await post_all(client, user, names, o.concurrency)
                post_s = time.monotonic() - t0
                end = await watch.all_scheduled([f"{user}~{n}" for n in names], o.timeout_s)
                phases.append(meter.phase(f"burst {size}", size, end - t0, post_s, before))
                print(f"  burst {size}: {end - t0:.2f} s", file=sys.stderr, flush=True)
        return decided, singles, phases


async def run(o: Options) -> tuple[float, list[float], list[Phase]]:
    env = {"PAIQ_NODE_CPUS": "100000", "PAIQ_NODE_MEMORY_MB": str(NODE_MEMORY_MB),
           "PAIQ_NODE_PORT_RANGE": "20000-60000", "PAIQ_LOG_LEVEL": "info", "PAIQ_NODE_TIMEOUT_SECONDS": "3600",
           "PAIQ_RECONCILE_SECONDS": str(o.reconcile_s)}
    async with separate_platform("burst", o.mongo_uri, o.amqp_url, keep=o.keep, **env) as (platform, uri):
        return await measure(o, platform, uri)


def table(o: Options, decided: float, singles: list[float], phases: list[Phase]) -> str:
    names = sorted({n for p in phases for n in p.cpu_s}, key=lambda n: -sum(p.cpu_s.get(n, 0) for p in phases))
    head = ["phase", "jobs", "seconds", "jobs/s", "POSTs s", "passes", "pass ms", *(f"CPU s {n}" for n in names)]
    rows = [[p.name, f"{p.jobs:,}", f"{p.seconds:.2f}", f"{p.jobs / p.seconds:.0f}" if p.seconds else "-",
             f"{p.post_s:.2f}" if p.post_s else "-", str(p.passes), f"{p.pass_mean_ms:.0f}",
             *(f"{p.cpu_s.get(n, 0):.2f}" for n in names)] for p in phases]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines += [f"standing queue: {o.standing:,} jobs that never fit, decided once in {decided:.1f} s",
              f"single job POST -> job.scheduled: p50 {percentile(singles, 0.5):.3f} s, "
              f"p99 {percentile(singles, 0.99):.3f} s, "
              f"max {max(singles, default=0):.3f} s (target p99 < 1 s)",
              f"load average after the run (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    o = parse(argv)
    decided, singles, phases = asyncio.run(run(o))
    bursts = [p for p in phases if p.name.startswith("burst")]
    print(table(o, decided, singles, phases))
    total = {n: round(sum(p.cpu_s.get(n, 0) for p in phases), 2) for n in phases[0].cpu_s}
    print(json.dumps({
        "burst_exponent": round(exponent([p.jobs for p in bursts], [p.seconds for p in bursts]), 3),
        "single_p50_s": round(percentile(singles, 0.5), 3), "single_p99_s": round(percentile(singles, 0.99), 3),
        "single_max_s": round(max(singles, default=0.0), 3),
        "burst_seconds": {str(p.jobs): p.seconds for p in bursts},
        "scheduler_cpu_s": total.get("scheduler", 0.0), "secantusdb_cpu_s": total.get("secantusdb", 0.0),
        "cpu_s": total, "standing": o.standing, "standing_decided_s": round(decided, 2),
        "reconcile_seconds": o.reconcile_s, "concurrency": o.concurrency, "singles": [round(s, 3) for s in singles],
        "phases": [p.__dict__ for p in phases], "load_average": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
