"""Benchmark: submit -> scheduled, through the real RabbitMQ and a MongoDB-wire server.

    .venv/bin/python tests/benchmarks/submit_to_scheduled.py [--jobs 500 --concurrency 32] [--with-launches]
        [--mongo-uri URI] [--keep] [--smoke] [--protocol v1|v2|both] [--shape separate|all-in-one] [--whole-life]

Starts a private in-memory SecantusDB (or uses --mongo-uri) and the four services as separate
processes over RabbitMQ, as tests/infra.py's ``start_platform("separate", ...)`` does; the launcher's
node declares a large capacity so every job fits at once. Logs in as a fresh user, follows
``GET /api/v1/events`` and submits --jobs one-task jobs (``true`` on local/busybox:bench, the test image
tagged as a lab's jobs tag theirs: a ``latest`` tag adds a registry refresh to each launch by policy,
PAIQ_PULL_LATEST) over HTTP,
--concurrency requests in flight, timing each job from the start of its POST to its ``job.scheduled``
event. Once its node has registered (a warm-up job was scheduled), the launcher is paused (SIGSTOP)
until the end, so no container starts during the measurement: the figure is the control plane's
(submit, bus, scheduler, store), not Docker's; --with-launches lets the containers run.

``--protocol``: v1 JSON jobs (``POST /api/v1/user/{user}/jobs``, the default), protocol v2 YAML jobs of the
same shape (``POST /api/v2/jobs``: one role, one task, ``true``), or ``both``: --jobs of each on the same
platform, in halves ordered v1 v2 v2 v1 (a drift, the database filling up or the machine's other load,
weighs on both alike), and the ratios v2/v1 of throughput and POST p99 (issue 26's target: v2 within 10%
of v1).

Prints a table per protocol (with each process's CPU seconds during the run, which names the bottleneck),
then, as its last line, one JSON object of the figures (with ``both``: ``{"v1": ..., "v2": ..., "ratio":
...}``); exits 1 when some job was not scheduled in --timeout.

``--shape all-in-one``: ``paiq up`` instead, what most users run (one process, its in-process bus, its own
SecantusDB in its data directory, tests/infra.py's ``start_platform("all-in-one", ...)``); its launcher runs in
that process, so containers start meanwhile. ``--whole-life``: each round also waits for every job's
``job.completed`` (containers run), and the CPU the control plane spent (paiq's processes, the database and the
broker) over the round is divided by its jobs: ``cpu_ms_per_job``, what a job's whole life costs the platform
(submit, place, start, exit, complete, usage; on ``paiq up`` its notifier too). Only jobs that SUCCEEDED count
as completed.

``--smoke``: 20 jobs of each protocol, 4 in flight, then 10 v1 jobs' whole lives on ``paiq up`` (its figures
under ``paiq_up_whole_life`` in the JSON; seconds: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aio_pika
import docker

from services.cli.client import PaiqClient, paiq_client
from shared.db.embedded import embedded_mongo
from tests.benchmarks.figures import percentile
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform, unique

IMAGE = "local/busybox:bench"
WARMUP = 3


@dataclass(frozen=True)
class Options:
    jobs: int
    concurrency: int
    amqp_url: str
    mongo_uri: str | None
    with_launches: bool
    timeout_s: float
    keep: bool
    protocols: tuple[str, ...] = ("v1",)
    shape: str = "separate"
    whole_life: bool = False
    smoke: bool = False


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=32, help="POSTs in flight at once")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--with-launches", action="store_true", help="let the launcher start the containers meanwhile")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every job.scheduled")
    p.add_argument("--keep", action="store_true", help="keep the work directory (service logs)")
    p.add_argument("--smoke", action="store_true", help="a small run: 20 jobs of each protocol, 4 in flight")
    p.add_argument("--protocol", choices=["v1", "v2", "both"], default="v1",
                   help="v1 JSON jobs, protocol v2 YAML jobs of the same shape, or both (and their ratio)")
    p.add_argument("--shape", choices=["separate", "all-in-one"], default="separate",
                   help="the four services over RabbitMQ, or paiq up (its own database, containers always run)")
    p.add_argument("--whole-life", action="store_true",
                   help="wait for every job to complete too, and give the control plane's CPU per job")
    a = p.parse_args(argv)
    if a.shape == "all-in-one" and a.mongo_uri and "--mongo-uri" in (argv if argv is not None else sys.argv):
        p.error("--mongo-uri: paiq up (--shape all-in-one) runs its own database")
    if a.smoke:
        a.jobs, a.concurrency, a.protocol = 20, 4, "both"
    protocols = ("v1", "v2") if a.protocol == "both" else (a.protocol,)
    return Options(jobs=a.jobs, concurrency=a.concurrency, amqp_url=a.amqp_url, mongo_uri=a.mongo_uri,
                   with_launches=a.with_launches or a.whole_life or a.shape == "all-in-one", timeout_s=a.timeout,
                   keep=a.keep, protocols=protocols, shape=a.shape, whole_life=a.whole_life, smoke=a.smoke)


def job_config(name: str) -> bytes:
    return json.dumps({"jobName": name, "image": IMAGE, "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 100, "command": "true"}]}).encode()


def job_v2(name: str) -> bytes:
    """The same job as :func:`job_config`, in protocol v2 (YAML as users write it)."""
    return (f"protocolVersion: 2\nname: {name}\ntype: job\nprerequisites:\n  - name: image\n    type: dockerimage\n"
            f"    uri: {IMAGE}\ntaskRoles:\n  main:\n    instances: 1\n    dockerImage: image\n"
            "    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: 0}\n    commands:\n      - 'true'\n").encode()


async def submit_one(client: PaiqClient, user: str, name: str, protocol: str) -> None:
    if protocol == "v2":
        await client.submit_v2(job_v2(name))
    else:
        await client.submit(user, job_config(name))


# --- what each process spent --------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_listening_on(port: int) -> int | None:
    """The process with a TCP socket listening on ``port`` on this host (SecantusDB, RabbitMQ): found
    through the socket's inode, so other brokers and databases on the machine are never mistaken for it."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{f[9]}]")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
    return None


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def processes(platform: Platform, mongo_uri: str | None, amqp_url: str) -> dict[str, int]:
    pids = {}
    for proc in platform.procs:
        args = [str(a) for a in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
        name = next((a.split(".", 1)[1] for a in args if a.startswith("services.")), str(proc.pid))
        pids["paiq up" if name == "cli.main" else name] = proc.pid
    if mongo_uri is None:  # paiq up: its own database is its child
        for proc in platform.procs:
            for child in children(proc.pid):
                with contextlib.suppress(OSError):
                    if b"secantusd" in Path(f"/proc/{child}/cmdline").read_bytes():
                        pids["secantusdb"] = child
        return pids
    for name, url in (("secantusdb", mongo_uri), ("rabbitmq", amqp_url)):
        port = urlsplit(url).port
        pid = pid_listening_on(port or 0)
        if pid is not None:
            pids[name] = pid
    return pids


def scheduler_metrics(platform: Platform) -> tuple[float, int]:
    """The scheduler's ``paiq_scheduler_decision_seconds`` sum and count (it times each pass's queue decision)."""
    base = platform.ops.get("scheduler") or (platform.api if platform.shape == "all-in-one" else None)
    if not base:
        return 0.0, 0
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = re.search(r"^paiq_scheduler_decision_seconds_sum (\S+)$", text, re.M)
    count = re.search(r"^paiq_scheduler_decision_seconds_count (\S+)$", text, re.M)
    return (float(total.group(1)) if total else 0.0), (int(float(count.group(1))) if count else 0)


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Feed:
    """job.scheduled and job.completed events seen on the live feed: job name -> monotonic time."""

    scheduled: dict[str, float] = field(default_factory=dict)
    completed: dict[str, float] = field(default_factory=dict)  # SUCCEEDED ones
    failed: dict[str, float] = field(default_factory=dict)
    expected: set[str] = field(default_factory=set)
    waiting_on: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(self, client: PaiqClient, user: str) -> None:
        async for event in client.events(user=user):
            kind = str(event.get("type"))
            seen = {"job.scheduled": self.scheduled, "job.completed": self.completed}.get(kind)
            if kind == "job.completed" and (event.get("data") or {}).get("state") != "SUCCEEDED":
                seen = self.failed  # a job that failed (a missing image, ...) is not a life measured
            if seen is not None:
                name = str(event.get("subject", "")).split("~")[1]
                seen.setdefault(name, time.monotonic())
                if self.expected and self.expected <= self.waiting_on.keys():
                    self.done.set()

    async def wait_for(self, names: set[str], timeout_s: float, *, completed: bool = False) -> bool:
        self.expected = names
        self.waiting_on = self.completed if completed else self.scheduled
        self.done.clear()
        if names <= self.waiting_on.keys():
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), timeout_s)
        return names <= self.waiting_on.keys()


@dataclass
class Figures:
    protocol: str
    jobs: int
    concurrency: int
    launches: bool
    submitted: int
    scheduled: int
    submit_s: float
    submits_per_s: float
    scheduled_s: float
    scheduled_per_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    post_p50_ms: float
    post_p99_ms: float
    scheduler_passes: int
    scheduler_deciding_s: float
    cpu_s: dict[str, float]
    load_average: float
    shape: str = "separate"
    completed: int = 0  # --whole-life: jobs whose job.completed was seen
    cpu_ms_per_job: float = 0.0  # --whole-life: the control plane's CPU over the rounds, per job



async def submit_all(client: PaiqClient, user: str, names: list[str], concurrency: int,
                     started: dict[str, float], answered: dict[str, float], protocol: str = "v1") -> int:
    gate = asyncio.Semaphore(concurrency)
    ok = 0

    async def one(name: str) -> None:
        nonlocal ok
        async with gate:
            started[name] = time.monotonic()
            await submit_one(client, user, name, protocol)
            answered[name] = time.monotonic()
            ok += 1

    await asyncio.gather(*(one(n) for n in names))
    return ok


async def measure(o: Options, platform: Platform, mongo_uri: str | None) -> list[Figures]:
    async with paiq_client(platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        user = unique("bench")
        await admin.put_user(user, "bench-pass")
        client = anonymous.with_token((await anonymous.login(user, "bench-pass"))["token"])
        feed = Feed()
        follower = asyncio.create_task(feed.follow(client, user))
        launcher = None
        try:
            # Warm up: the feed is connected and the node registered once these are scheduled.
            warm = [f"warm{i}" for i in range(WARMUP)]
            await submit_all(client, user, warm, WARMUP, {}, {})
            if not await feed.wait_for(set(warm), 120):
                raise RuntimeError("the warm-up jobs were not scheduled within 120s:\n" + platform.logs()[-3000:])
            launcher = next((p for p in platform.procs if "services.launcher" in str(p.args)), None)
            if launcher is not None and not o.with_launches:
                launcher.send_signal(signal.SIGSTOP)
            pids = processes(platform, mongo_uri, o.amqp_url)
            if len(o.protocols) == 1:
                return [figures_of(o, [await measure_one(o, o.protocols[0], 0, o.jobs, client, user, feed, platform,
                                                         pids)])]
            # Both: halves in the order v1 v2 v2 v1, so that a drift (the database filling up, the machine's
            # other load) weighs on both alike.
            rounds: dict[str, list[Round]] = {"v1": [], "v2": []}
            for i, protocol in enumerate(("v1", "v2", "v2", "v1")):
                rounds[protocol].append(await measure_one(o, protocol, i, o.jobs // 2, client, user, feed, platform,
                                                          pids))
            return [figures_of(o, rounds["v1"]), figures_of(o, rounds["v2"])]
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower
            if launcher is not None:
                launcher.send_signal(signal.SIGCONT)


@dataclass
class Round:
    """What one round of one protocol's jobs measured."""

    protocol: str
    submitted: int
    submit_s: float
    scheduled_s: float
    latencies: list[float]
    posts: list[float]
    passes: int
    deciding_s: float
    cpu: dict[str, float]
    load: float
    completed: int = 0


async def measure_one(o: Options, protocol: str, index: int, jobs: int, client: PaiqClient, user: str, feed: Feed,
                      platform: Platform, pids: dict[str, int]) -> Round:
    """One round: ``jobs`` of one protocol, submitted and followed to job.scheduled."""
    load = round(os.getloadavg()[0], 2)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    deciding_before, decisions_before = scheduler_metrics(platform)
    names = [f"{protocol}r{index}job{i}" for i in range(jobs)]
    started: dict[str, float] = {}
    answered: dict[str, float] = {}
    t0 = time.monotonic()
    submitted = await submit_all(client, user, names, o.concurrency, started, answered, protocol)
    submit_s = time.monotonic() - t0
    await feed.wait_for(set(names), o.timeout_s)
    end = max((feed.scheduled[n] for n in names if n in feed.scheduled), default=time.monotonic())
    if o.whole_life:
        await feed.wait_for(set(names), o.timeout_s, completed=True)
    cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 2) for name, pid in pids.items()}
    deciding, decisions = scheduler_metrics(platform)
    return Round(protocol=protocol, submitted=submitted, submit_s=submit_s, scheduled_s=max(end - t0, 0.0),
                 latencies=[(feed.scheduled[n] - started[n]) * 1000 for n in names if n in feed.scheduled],
                 posts=[(answered[n] - started[n]) * 1000 for n in names if n in answered],
                 passes=decisions - decisions_before, deciding_s=deciding - deciding_before, cpu=cpu, load=load,
                 completed=len([n for n in names if n in feed.completed]))


def figures_of(o: Options, rounds: list[Round]) -> Figures:
    """One protocol's figures over its rounds (times summed, latencies pooled)."""
    latencies = [x for r in rounds for x in r.latencies]
    posts = [x for r in rounds for x in r.posts]
    submitted, scheduled = sum(r.submitted for r in rounds), len(latencies)
    submit_s, scheduled_s = sum(r.submit_s for r in rounds), sum(r.scheduled_s for r in rounds)
    cpu = {name: round(sum(r.cpu.get(name, 0.0) for r in rounds), 2) for name in rounds[0].cpu}
    return Figures(
        protocol=rounds[0].protocol, jobs=sum(len(r.posts) for r in rounds) if len(rounds) > 1 else o.jobs,
        concurrency=o.concurrency, launches=o.with_launches, submitted=submitted, scheduled=scheduled,
        submit_s=round(submit_s, 3), submits_per_s=round(submitted / submit_s, 1) if submit_s else 0.0,
        scheduled_s=round(scheduled_s, 3), scheduled_per_s=round(scheduled / scheduled_s, 1) if scheduled_s else 0.0,
        latency_p50_ms=round(statistics.median(latencies), 1) if latencies else 0.0,
        latency_p99_ms=round(percentile(latencies, 0.99), 1), latency_max_ms=round(max(latencies, default=0.0), 1),
        post_p50_ms=round(statistics.median(posts), 1) if posts else 0.0, post_p99_ms=round(percentile(posts, 0.99), 1),
        scheduler_passes=sum(r.passes for r in rounds),
        scheduler_deciding_s=round(sum(r.deciding_s for r in rounds), 3),
        cpu_s=cpu, load_average=max(r.load for r in rounds), shape=o.shape,
        completed=sum(r.completed for r in rounds),
        cpu_ms_per_job=round(1000 * sum(cpu.values()) / submitted, 1) if o.whole_life and submitted else 0.0,
    )


async def cleanup_broker(amqp_url: str, env: dict[str, str], node_id: str) -> None:
    """Delete the run's durable queues and exchanges (their prefix is unique to the run)."""
    prefix, exchange = env["PAIQ_QUEUE_PREFIX"], env["PAIQ_EXCHANGE"]
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        for name in (f"{prefix}.scheduler", f"{prefix}.status", f"{prefix}.launcher.{node_id}", f"{prefix}.dead"):
            channel = await connection.channel()
            with contextlib.suppress(aio_pika.exceptions.AMQPError):
                await channel.queue_delete(name)
        for name in (exchange, f"{prefix}.dead"):
            channel = await connection.channel()
            with contextlib.suppress(aio_pika.exceptions.AMQPError):
                await channel.exchange_delete(name)


async def run(o: Options) -> list[Figures]:
    await asyncio.to_thread(lambda: docker.from_env().images.get("local/busybox:latest").tag(IMAGE))
    workdir = Path(tempfile.mkdtemp(prefix="paiq-bench-"))
    async with contextlib.AsyncExitStack() as stack:
        mongo_uri = o.mongo_uri
        if o.shape == "all-in-one":  # paiq up with its own database in its data directory
            mongo_uri = None
        elif mongo_uri is None:
            mongo_uri = await stack.enter_async_context(embedded_mongo(None, cache_size="1G"))
        platform = await asyncio.to_thread(functools.partial(
            start_platform, o.shape, workdir, mongo_uri=mongo_uri, amqp_url=o.amqp_url if mongo_uri else None,
            PAIQ_NODE_CPUS="100000", PAIQ_NODE_MEMORY_MB=str(100000 * 1024), PAIQ_NODE_PORT_RANGE="20000-60000",
            PAIQ_LOG_LEVEL="info", PAIQ_NODE_TIMEOUT_SECONDS="3600",
            # the platform's own periods, not the e2e tests' (which reconcile every 2 s and profile every task
            # every second): what a user's paiq does for each job
            PAIQ_RECONCILE_SECONDS="10", PAIQ_PROFILE_SECONDS="10"))
        try:
            return await measure(o, platform, mongo_uri)
        finally:
            await asyncio.to_thread(stop_platform, platform, docker.from_env())
            if o.shape == "separate":
                await cleanup_broker(o.amqp_url, platform.env, platform.node_id)
            if o.keep:
                print(f"logs kept in {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    raise AssertionError("unreachable")


def table(f: Figures) -> str:
    rows = [
        ("protocol", f"{f.protocol} ({'POST /api/v2/jobs, YAML' if f.protocol == 'v2' else 'POST /api/v1, JSON'})"),
        ("shape", "paiq up (its own database)" if f.shape == "all-in-one" else "separate services over RabbitMQ"),
        ("jobs / concurrency", f"{f.jobs} / {f.concurrency}"),
        ("containers started meanwhile", "yes" if f.launches else "no (launcher paused)"),
        ("submitted / scheduled", f"{f.submitted} / {f.scheduled}"),
        ("all POSTs answered in", f"{f.submit_s:.2f} s ({f.submits_per_s:.1f} jobs/s)"),
        ("all jobs scheduled in", f"{f.scheduled_s:.2f} s"),
        ("submit -> scheduled", f"{f.scheduled_per_s:.1f} jobs/s"),
        ("POST ms p50/p99", f"{f.post_p50_ms:.1f} / {f.post_p99_ms:.1f}"),
        ("submit -> scheduled ms p50/p99/max",
         f"{f.latency_p50_ms:.1f} / {f.latency_p99_ms:.1f} / {f.latency_max_ms:.1f}"),
        ("scheduler passes / s in plan_queue", f"{f.scheduler_passes} / {f.scheduler_deciding_s:.3f} s"),
        *((("completed (whole life)", f"{f.completed}"),
           ("control plane's CPU per job, whole life", f"{f.cpu_ms_per_job:.1f} ms")) if f.cpu_ms_per_job else ()),
        ("load average before the run (1 min)", f"{f.load_average:.2f} on {os.cpu_count()} CPUs"),
        *((f"CPU s: {name}", f"{s:.2f}") for name, s in sorted(f.cpu_s.items(), key=lambda kv: -kv[1])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def ratios(v1: Figures, v2: Figures) -> dict[str, float]:
    """v2's figures over v1's: throughput (above 1 is faster) and latency (below 1 is faster)."""
    def over(a: float, b: float) -> float:
        return round(a / b, 3) if b else 0.0
    return {"submits_per_s": over(v2.submits_per_s, v1.submits_per_s),
            "scheduled_per_s": over(v2.scheduled_per_s, v1.scheduled_per_s),
            "post_p50_ms": over(v2.post_p50_ms, v1.post_p50_ms), "post_p99_ms": over(v2.post_p99_ms, v1.post_p99_ms),
            "latency_p99_ms": over(v2.latency_p99_ms, v1.latency_p99_ms)}


def main(argv: list[str] | None = None) -> int:
    o = parse(argv)
    runs = asyncio.run(run(o))
    extra: dict[str, Any] = {}
    checked = [(o, f) for f in runs]
    if o.smoke:  # paiq up and whole lives too, so that neither rots unseen
        up = dataclasses.replace(o, shape="all-in-one", whole_life=True, with_launches=True, protocols=("v1",),
                                 jobs=10)
        [life] = asyncio.run(run(up))
        runs.append(life)
        checked.append((up, life))
        extra["paiq_up_whole_life"] = asdict(life)
    print("\n\n".join(table(f) for f in runs))
    if len(o.protocols) == 2:
        ratio = ratios(runs[0], runs[1])
        print("\nv2 / v1: " + ", ".join(f"{k} {v:.3f}" for k, v in ratio.items()))
        print(json.dumps({"v1": asdict(runs[0]), "v2": asdict(runs[1]), "ratio": ratio, **extra}))
    else:
        print(json.dumps({**asdict(runs[0]), **extra}))
    return 0 if all(f.scheduled == f.jobs and (not opts.whole_life or f.completed == f.jobs)
                    for opts, f in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
