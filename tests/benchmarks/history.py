"""Benchmark: the API, the scheduler and idle CPU as the history grows to 100,000 jobs.

    .venv/bin/python tests/benchmarks/history.py [--jobs 100000 --sizes 1000,10000 --requests 100
        --passes 20 --idle-seconds 30 --batch 1000 --seed 1] [--keep] [--smoke]

Starts a SecantusDB on disk (in a temporary directory) and ``paiq up`` over it (tests/infra.py's
``start_platform("all-in-one", ...)`` with PAIQ_MONGODB_URI: one process, in-process bus, the default
PAIQ_RECONCILE_SECONDS). First come 100 active jobs: 50 RUNNING on ten fake nodes that the benchmark
registers and keeps alive with heartbeats, 50 queued that never fit. The history is stored through the
project's own store (``Store.insert_jobs``, --batch jobs a call): seeded, realistic finished jobs of 1-8
tasks in one or two roles, 200 users, about 70% SUCCEEDED, 20% FAILED (stderr tails in the failed tasks'
diagnostics), 10% STOPPED, a tenth retried, created over the last 30 days.

It grows the history to each of --sizes and then to --jobs, and at each size measures: p50/p99 of
--requests rounds of each API route (lists newest first with and without a limit; a deep page by cursor,
the cursor of the page half-way down found beforehand with pages of 1,000; offsets 200, 50,000 and 100,000
(past the end at the smaller sizes); one user's jobs; a busy user's failed jobs, by ``username`` and
``state`` and by their own list's ``state``, and their page at offset 400; a job's detail; the virtual
clusters; the usage report by VC, the steady user's and everyone's over 30 days; a POST of a job that never
fits, stopped afterwards; OpenPAI v1.8's v2 list newest first, at offset
50,000 with its total, by ``vc`` and ``state`` with the total from the tallies, by ``username``, ``vc`` and
``state`` together, by two states at once, by a ``keyword`` that matches a tenth of the history and by one
that matches a job's name, and a job's v2 detail; and its other orders, v1.8's (issue 27): a first page of each
of the twenty but the default, ``submissionTime,ASC`` and ``state,DESC`` at offset 50,000, ``username`` of one
state, ``vc`` of one user, and ``jobName`` of the steady user, which is sorted in memory), the scheduler
pass (``schedule_pass`` run --passes times in this process over its own store and an in-memory bus), and
the CPU that the paiq and SecantusDB processes spend over --idle-seconds with nothing to do.

Prints a table (a figure per row, a size per column) and, as its last line, one JSON object of the figures:
``api_p99_ratio_max`` (the worst route's p99 at --jobs over its p99 at the smallest size, over the routes whose
answer is the same at every size: the user lists are a user's with the same five jobs at every size; a busy
user's whole list, whose answer grows with their own jobs up to 1,000, is reported apart as
``api_p99_ratio_growing``; so is the usage report of every user, whose rows are one per user and day),
``usage_report_p99_ratio`` (the usage report's routes: by VC, the steady user's, everyone's) and
``usage_report_ms`` (their p50/p99 at each size), ``order_p99_ratio`` and ``order_ms`` (the same of the
v2 list's other orders), ``idle_cpu_percent`` (paiq + SecantusDB at --jobs, percent
of one core),
``scheduler_pass_ratio`` (pass p50 at --jobs over the smallest size), ``seed_jobs_per_s`` (stored per second
of ``insert_jobs``, per stage), the load average and every size's figures. With 100 requests a route, p99
is the second slowest. ``--smoke``: 1,200 jobs measured at 400 and 1,200, 10 requests a route, 3 passes,
2 idle seconds, seven of the v2 list's orders (about a minute: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiohttp
import docker

from services.scheduler.service import SchedulerDeps, schedule_pass
from shared.bus.memory import MemoryBus
from shared.db.embedded import embedded_mongo, new_login
from shared.db.store import Store, open_store
from shared.jobconfig.model import JobConfig
from shared.lifecycle import exitcodes
from shared.ops.logsetup import configure_logging
from shared.records import (
    AttemptRecord,
    JobRecord,
    JobState,
    NodeRecord,
    RetryCounts,
    TaskRecord,
    TaskState,
    initial_tasks,
    now_ms,
)
from shared.settings.model import Settings
from tests.benchmarks.figures import percentile
from tests.benchmarks.submit_to_scheduled import cpu_seconds, pid_listening_on
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform

USERS = 200
HISTORY_NODES = 300
FAKE_NODES = 10
ACTIVE = 50  # RUNNING jobs on the fake nodes, and as many queued jobs that never fit
NEVER_FITS = 1024  # CPUs of one task: more than any node has, and the most a config may ask
HEARTBEAT_S = 10.0  # as a launcher does (PAIQ_NODE_TIMEOUT_SECONDS / 4)
DAY_MS = 86_400_000
IMAGE = "registry.example.com/team/train:v3"
STEADY, STEADY_JOBS = "steady", 5
# No limit, and a user whose own jobs grow with the history: the answer itself grows (up to 1,000 jobs).
GROWING = {"GET /user/<busy>/jobs", "GET /usage (every user, 30 days)"}
USAGE_ROUTES = ("GET /usage?by=vc (30 days)", "GET /usage?user=<steady> (30 days)", "GET /usage (every user, 30 days)")
FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)
ORDERS = tuple(f"{name},{way}" for name in ("jobName", "submissionTime", "username", "vc", "retries", "totalTaskNumber",
                                            "totalGpuNumber", "state", "completionTime", "jobPriority")
               for way in ("ASC", "DESC") if (name, way) != ("submissionTime", "DESC"))
# The v2 list's other orders (issue 27): a first page of each unfiltered (jobName: refused past 5,000 jobs, so
# measured on the steady user's list), two deep pages, two filtered ones.
ORDER_PATHS = {
    **{f"GET /v2/jobs?order={o}&limit=20": f"/api/v2/jobs?order={o}&limit=20" for o in ORDERS if "jobName" not in o},
    "GET /v2/jobs?order=jobName,ASC&username=<steady>": f"/api/v2/jobs?order=jobName,ASC&username={STEADY}",
    "GET /v2/jobs?order=submissionTime,ASC&limit=20&offset=50000":
        "/api/v2/jobs?order=submissionTime,ASC&limit=20&offset=50000",
    "GET /v2/jobs?order=state,DESC&limit=20&offset=50000&withTotalCount=true":
        "/api/v2/jobs?order=state,DESC&limit=20&offset=50000&withTotalCount=true",
    "GET /v2/jobs?order=username,ASC&state=FAILED&limit=20": "/api/v2/jobs?order=username,ASC&state=FAILED&limit=20",
    "GET /v2/jobs?order=vc,DESC&username=<steady>&limit=20": f"/api/v2/jobs?order=vc,DESC&username={STEADY}&limit=20",
}
SMOKE_ORDERS = ("order=submissionTime,ASC&limit=20", "order=state,DESC&limit=20", "order=username,ASC&limit=20",
                "order=retries,DESC&limit=20", "order=completionTime,DESC&limit=20", "jobName", "offset=50000")
TRACEBACK = ('Traceback (most recent call last):\n  File "/workspace/train.py", line {line}, in <module>\n'
             '    main()\n  File "/workspace/train.py", line 212, in main\n    loss = step(model, batch)\n'
             '  File "/workspace/model.py", line 88, in step\n    out = model(batch.to(device))\n'
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
             "capacity; 75.40 GiB already allocated; 1.21 GiB free)\n")


@dataclass(frozen=True)
class Options:
    jobs: int
    sizes: tuple[int, ...]
    requests: int
    passes: int
    idle_s: float
    batch: int
    seed: int
    keep: bool
    every_order: bool = True  # --smoke: one order of each way (shared.db.listorder) and the deep pages


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000, help="finished jobs stored at the last measurement")
    p.add_argument("--sizes", default="1000,10000", help="earlier measurements, at these many stored jobs")
    p.add_argument("--requests", type=int, default=100, help="timed requests of each route, per size")
    p.add_argument("--passes", type=int, default=20, help="timed scheduler passes, per size")
    p.add_argument("--idle-seconds", type=float, default=30.0, help="idle time over which CPU is measured")
    p.add_argument("--batch", type=int, default=1000, help="jobs per insert_jobs call")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the work directory (database, logs)")
    p.add_argument("--smoke", action="store_true", help="a small run: 1,200 jobs, 10 requests a route")
    a = p.parse_args(argv)
    if a.smoke:
        a.jobs, a.sizes, a.requests, a.passes, a.idle_seconds = 1200, "400", 10, 3, 2.0
    sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip() and 0 < int(s) < a.jobs} | {a.jobs})
    return Options(jobs=a.jobs, sizes=tuple(sizes), requests=a.requests, passes=a.passes, idle_s=a.idle_seconds,
                   batch=a.batch, seed=a.seed, keep=a.keep, every_order=not a.smoke)



def _roles(rng: random.Random) -> list[dict[str, Any]]:
    tasks, gpus = rng.randint(1, 8), rng.choice((0, 0, 1, 2, 4, 8))
    worker = {"name": "worker", "taskNumber": tasks, "cpuNumber": 4, "memoryMB": 16384, "gpuNumber": gpus,
              "command": "python train.py --data /data/imagenet --epochs 20"}
    if tasks == 1 or rng.random() < 0.7:
        return [worker]
    ps = {"name": "ps", "taskNumber": 1, "cpuNumber": 2, "memoryMB": 4096, "command": "python ps.py"}
    return [ps, {**worker, "taskNumber": tasks - 1}]


def _outcome(state: JobState, user: str, last: TaskRecord) -> dict[str, Any]:
    if state is JobState.SUCCEEDED:
        return {"exit_code": 0, "exit_phrase": "Succeeded", "exit_type": "USER_SUCCESS",
                "exit_reason": "The command exited 0."}
    if state is JobState.STOPPED:
        return {"exit_code": exitcodes.STOPPED_BY_USER, "exit_phrase": "StoppedByUser", "exit_type": "USER_STOP",
                "exit_reason": f"stopped by {user}", "stop_requested_by": user}
    return {"exit_code": last.exit_code, "exit_phrase": "UserCommandFailed", "exit_type": "USER_FAILURE",
            "exit_reason": f"task {last.role}[{last.index}] failed", "exit_diagnostics": last.diagnostics,
            "trigger_role": last.role, "trigger_index": last.index}


def _final_tasks(rng: random.Random, config: JobConfig, state: JobState, started: int,
                 completed: int) -> tuple[TaskRecord, ...]:
    first, tasks = rng.randrange(HISTORY_NODES), initial_tasks(config)
    out = []
    for slot, t in enumerate(tasks):
        node = (first + slot) % HISTORY_NODES
        code, final, diagnostics = 0, TaskState.SUCCEEDED, ""
        if state is JobState.STOPPED or (state is JobState.FAILED and slot < len(tasks) - 1):
            code, final = 137, TaskState.STOPPED
        elif state is JobState.FAILED:  # the last task failed, and the others were stopped
            code, final = rng.choice((1, 2, 134, 139)), TaskState.FAILED
            diagnostics = TRACEBACK.format(line=rng.randrange(1, 900)) * rng.randint(1, 4)
        out.append(t.model_copy(update={
            "state": final, "node_id": f"hist-node-{node:03d}", "ip": f"10.1.{node // 250}.{node % 250 + 1}",
            "gpus": tuple(range(config.role(t.role).gpu_number)), "container_id": f"{rng.getrandbits(256):064x}",
            "exit_code": code, "diagnostics": diagnostics, "started_ms": started, "completed_ms": completed}))
    return tuple(out)


def history_job(rng: random.Random, seq: int, now: int) -> JobRecord:
    """A finished job as the platform leaves it: seeded, so every run stores the same history."""
    user, name = f"user{rng.randrange(USERS):03d}", f"hist{seq:07d}"
    retries = rng.randint(1, 3) if rng.random() < 0.1 else 0
    raw = {"jobName": name, "image": IMAGE, "retryCount": max(retries, rng.choice((0, 0, 1, 3))),
           "taskRoles": _roles(rng), "jobEnvs": {"LEARNING_RATE": "0.001", "BATCH_SIZE": 256}}
    config = JobConfig.model_validate(raw)
    state = rng.choices(FINAL, weights=(70, 20, 10))[0]
    created = now - rng.randrange(30 * DAY_MS)
    launched = min(now, created + rng.randrange(1_000, 600_000))
    completed = min(now, launched + rng.randrange(60_000, 12 * 3_600_000))
    tasks = _final_tasks(rng, config, state, launched, completed)
    return JobRecord(
        id=f"{user}~{name}~{rng.getrandbits(32):08x}", user=user, name=name, virtual_cluster="default",
        config=config, raw_config=raw, state=state, sub_state="completed", created_ms=created, queued_ms=created,
        launched_ms=launched, completed_ms=completed, attempt=retries, retries=retries,
        retry_counts=RetryCounts(user=retries), tasks=tasks, **_outcome(state, user, tasks[-1]),
        archived=tuple(AttemptRecord(attempt=a, tasks=tasks, launched_ms=launched, completed_ms=launched, exit_code=1,
                                     exit_reason="command exited with code 1") for a in range(retries)))


def fake_nodes() -> list[NodeRecord]:
    return [NodeRecord(id=f"bench-node-{k}", ip=f"10.2.0.{k + 1}", cpus=64, memory_mb=262_144,
                       port_range=(20000, 29999), heartbeat_ms=now_ms()) for k in range(FAKE_NODES)]


def active_job(seq: int, now: int) -> JobRecord:
    """RUNNING (two tasks on the fake nodes) below ACTIVE, else queued and never fitting."""
    running = seq < ACTIVE
    user, name = f"user{seq % USERS:03d}", f"active{seq:03d}"
    raw = {"jobName": name, "image": IMAGE, "taskRoles": [{
        "name": "main", "taskNumber": 2 if running else 1, "cpuNumber": 4 if running else NEVER_FITS,
        "memoryMB": 8192, "command": "sleep infinity"}]}
    config, created = JobConfig.model_validate(raw), now - (seq + 1) * 60_000
    tasks = initial_tasks(config)
    if running:
        tasks = tuple(t.model_copy(update={
            "state": TaskState.RUNNING, "node_id": f"bench-node-{(2 * seq + t.index) % FAKE_NODES}",
            "ip": f"10.2.0.{(2 * seq + t.index) % FAKE_NODES + 1}", "container_id": f"{seq:064x}",
            "started_ms": created + 5_000}) for t in tasks)
    return JobRecord(
        id=f"{user}~{name}~bench", user=user, name=name, virtual_cluster="default", config=config, raw_config=raw,
        state=JobState.RUNNING if running else JobState.WAITING, sub_state="running" if running else "queued",
        created_ms=created, queued_ms=created, launched_ms=created + 5_000 if running else None, tasks=tasks)


async def keep_alive(store: Store, nodes: list[NodeRecord]) -> None:
    while True:
        for node in nodes:
            await store.heartbeat(node.id)
        await asyncio.sleep(HEARTBEAT_S)


@dataclass
class Seeder:
    store: Store
    rng: random.Random
    batch: int
    stored: int = 0
    user: str = ""  # the first stored job's user: their history grows with everyone's
    names: list[str] = field(default_factory=list)  # that user's job names
    steady_names: list[str] = field(default_factory=list)  # STEADY's jobs: the same few at every size

    async def grow_to(self, size: int) -> tuple[float, float, float]:
        """Store finished jobs up to ``size``: jobs per second of ``insert_jobs`` over the stage and over its
        last ten batches (the rate at this size), and the stage's seconds in all (building jobs too)."""
        started, now, batches = time.perf_counter(), now_ms(), []
        if not self.steady_names:  # a user whose own history stays the same while everyone's grows
            steady = [history_job(self.rng, -1 - i, now) for i in range(STEADY_JOBS)]
            steady = [j.model_copy(update={"user": STEADY, "id": f"{STEADY}~{j.name}~{i:08x}"})
                      for i, j in enumerate(steady)]
            await self.store.insert_jobs(steady)
            self.steady_names = [j.name for j in steady]
        while self.stored < size:
            jobs = [history_job(self.rng, self.stored + i, now) for i in range(min(self.batch, size - self.stored))]
            self.user = self.user or jobs[0].user
            self.names += [j.name for j in jobs if j.user == self.user]
            t0 = time.perf_counter()
            await self.store.insert_jobs(jobs)
            batches.append((len(jobs), time.perf_counter() - t0))
            self.stored += len(jobs)
        return rate(batches), rate(batches[-10:]), round(time.perf_counter() - started, 2)


def rate(batches: list[tuple[int, float]]) -> float:
    seconds = sum(s for _, s in batches)
    return round(sum(n for n, _ in batches) / seconds, 1) if seconds else 0.0


@dataclass
class Api:
    session: aiohttp.ClientSession
    base: str
    token: str = ""

    async def call(self, method: str, path: str, body: Any = None) -> tuple[float, str | None, Any]:
        """One request: (milliseconds to the whole answer, its X-Next-Cursor, its decoded body)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        t0 = time.perf_counter()
        async with self.session.request(method, self.base + path, json=body, headers=headers) as resp:
            data = await resp.read()
            elapsed = (time.perf_counter() - t0) * 1000
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {data[:500]!r}")
            return elapsed, resp.headers.get("X-Next-Cursor"), json.loads(data) if data else None


@dataclass(frozen=True)
class Route:
    method: str
    path: Callable[[int], str]  # of the round
    body: Callable[[int], Any] | None = None


def fixed(path: str) -> Route:
    """A GET of the same path every round."""
    return Route("GET", lambda i: path)


def posted_name(size: int, i: int) -> str:
    return f"bench-{size}-{i}"


def routes(size: int, busy: str, names: list[str], deep: str | None, every_order: bool = True) -> dict[str, Route]:
    u = f"/api/v1/user/{STEADY}/jobs"
    out = {
        "GET /jobs": Route("GET", lambda i: "/api/v1/jobs"),
        "GET /jobs?limit=20": Route("GET", lambda i: "/api/v1/jobs?limit=20"),
        "GET /jobs?limit=20&offset=200": Route("GET", lambda i: "/api/v1/jobs?limit=20&offset=200"),
        "GET /jobs?limit=20&offset=50000": Route("GET", lambda i: "/api/v1/jobs?limit=20&offset=50000"),
        "GET /jobs?limit=20&offset=100000": Route("GET", lambda i: "/api/v1/jobs?limit=20&offset=100000"),
        "GET /jobs?limit=20&cursor=<half-way>": Route("GET", lambda i: f"/api/v1/jobs?limit=20&cursor={deep}"),
        "GET /user/<u>/jobs": Route("GET", lambda i: u),
        "GET /user/<busy>/jobs": Route("GET", lambda i: f"/api/v1/user/{busy}/jobs"),
        "GET /user/<busy>/jobs?limit=20": Route("GET", lambda i: f"/api/v1/user/{busy}/jobs?limit=20"),
        "GET /user/<busy>/jobs?limit=20&offset=400": Route(
            "GET", lambda i: f"/api/v1/user/{busy}/jobs?limit=20&offset=400"),
        "GET /jobs?username=<busy>&state=FAILED&limit=20": Route(
            "GET", lambda i: f"/api/v1/jobs?username={busy}&state=FAILED&limit=20"),
        "GET /user/<busy>/jobs?state=FAILED&limit=20": Route(
            "GET", lambda i: f"/api/v1/user/{busy}/jobs?state=FAILED&limit=20"),
        "GET /user/<busy>/jobs/<name>": Route(
            "GET", lambda i: f"/api/v1/user/{busy}/jobs/{quote(names[i * 7919 % len(names)])}"),
        # OpenPAI v1.8's v2 list (issue 27): its filters, totals and a job's v2 detail
        "GET /v2/jobs?limit=20": Route("GET", lambda i: "/api/v2/jobs?limit=20"),
        "GET /v2/jobs?limit=20&offset=50000&withTotalCount=true": Route(
            "GET", lambda i: "/api/v2/jobs?limit=20&offset=50000&withTotalCount=true"),
        "GET /v2/jobs?vc=default&state=FAILED&limit=20&withTotalCount=true": Route(
            "GET", lambda i: "/api/v2/jobs?vc=default&state=FAILED&limit=20&withTotalCount=true"),
        "GET /v2/jobs?username=<busy>&vc=default&state=FAILED&limit=20": Route(
            "GET", lambda i: f"/api/v2/jobs?username={busy}&vc=default&state=FAILED&limit=20"),
        "GET /v2/jobs?state=FAILED,STOPPED&limit=20&withTotalCount=true": Route(
            "GET", lambda i: "/api/v2/jobs?state=FAILED,STOPPED&limit=20&withTotalCount=true"),
        "GET /v2/jobs?keyword=hist000&limit=20": Route("GET", lambda i: "/api/v2/jobs?keyword=hist000&limit=20"),
        "GET /v2/jobs?keyword=<name>&limit=20": Route(
            "GET", lambda i: f"/api/v2/jobs?keyword={quote(names[i * 7919 % len(names)])}&limit=20"),
        "GET /v2/jobs/<busy>~<name>": Route(
            "GET", lambda i: f"/api/v2/jobs/{busy}~{quote(names[i * 7919 % len(names)])}"),
        **{name: fixed(path) for name, path in ORDER_PATHS.items()
           if every_order or any(part in name for part in SMOKE_ORDERS)},
        "GET /virtual-clusters": Route("GET", lambda i: "/api/v1/virtual-clusters"),
        # the usage report (issue 29), from the daily rollups: per VC (30 rows at every size), the steady user's
        # (their same five jobs), and everyone's (a row per user and day: grows until each of the 200 users
        # has a job every day, so it is reported with the growing ones)
        USAGE_ROUTES[0]: Route("GET", lambda i: "/api/v1/usage?by=vc"),
        USAGE_ROUTES[1]: Route("GET", lambda i: f"/api/v1/usage?user={STEADY}"),
        USAGE_ROUTES[2]: Route("GET", lambda i: "/api/v1/usage"),
        "POST /user/<admin>/jobs": Route("POST", lambda i: f"/api/v1/user/{ADMIN_USER}/jobs", lambda i: {
            "jobName": posted_name(size, i), "image": IMAGE,
            "taskRoles": [{"name": "main", "cpuNumber": NEVER_FITS, "command": "sleep 1"}]}),
    }
    if deep is None:  # too few jobs for a second page
        del out["GET /jobs?limit=20&cursor=<half-way>"]
    return out


async def deep_cursor(api: Api, size: int) -> str | None:
    """The cursor of the page that starts about half-way down the list (untimed)."""
    step, walked, cursor = max(1, min(1000, size // 2)), 0, None
    while walked < size // 2:
        _, following, page = await api.call("GET", f"/api/v1/jobs?limit={step}"
                                            + (f"&cursor={cursor}" if cursor else ""))
        walked += len(page)
        if following is None:
            break
        cursor = following
    return cursor


async def time_routes(api: Api, table: dict[str, Route], rounds: int) -> dict[str, list[float]]:
    """Round 0 warms up; then ``rounds`` rounds, each route once a round, in turn."""
    times: dict[str, list[float]] = {name: [] for name in table}
    for i in range(rounds + 1):
        for name, route in table.items():
            ms, _, _ = await api.call(route.method, route.path(i), route.body(i) if route.body else None)
            if i:
                times[name].append(ms)
    return times


async def stop_posted(api: Api, size: int, rounds: int) -> None:
    for i in range(rounds + 1):
        await api.call("PUT", f"/api/v1/user/{ADMIN_USER}/jobs/{posted_name(size, i)}/executionType",
                       {"value": "STOP"})


@dataclass
class Stage:
    size: int
    seed_jobs_per_s: float
    seed_last_jobs_per_s: float  # over the stage's last ten batches
    seed_s: float
    load_average: tuple[float, ...]  # 1, 5, 15 minutes
    api_ms: dict[str, tuple[float, float]]  # route -> (p50, p99)
    pass_p50_ms: float
    pass_p99_ms: float
    idle_cpu_percent: dict[str, float]


async def time_passes(deps: SchedulerDeps, passes: int) -> list[float]:
    out = []
    for _ in range(passes + 1):  # the first warms up
        t0 = time.perf_counter()
        await schedule_pass(deps)
        out.append((time.perf_counter() - t0) * 1000)
    return out[1:]


async def idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    await asyncio.sleep(3)  # the stops of the POSTed jobs settle
    print(f"idle: measuring the CPU of {pids} for {seconds:.0f} s", file=sys.stderr, flush=True)
    before, t0 = {name: cpu_seconds(pid) for name, pid in pids.items()}, time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - t0
    return {name: round(100 * (cpu_seconds(pid) - before[name]) / wall, 2) for name, pid in pids.items()}


async def stage(o: Options, size: int, seeder: Seeder, api: Api, deps: SchedulerDeps,
                pids: dict[str, int]) -> Stage:
    seed_rate, last_rate, seed_s = await seeder.grow_to(size)
    print(f"{size} jobs stored ({seed_rate:.0f} jobs/s); measuring", file=sys.stderr, flush=True)
    load = tuple(round(x, 2) for x in os.getloadavg())
    passes = await time_passes(deps, o.passes)
    table = routes(size, seeder.user, seeder.names, await deep_cursor(api, size), o.every_order)
    times = await time_routes(api, table, o.requests)
    await stop_posted(api, size, o.requests)
    return Stage(size=size, seed_jobs_per_s=seed_rate, seed_last_jobs_per_s=last_rate, seed_s=seed_s, load_average=load,
                 api_ms={name: (round(percentile(ms, 0.5), 2), round(percentile(ms, 0.99), 2))
                         for name, ms in times.items()},
                 pass_p50_ms=round(percentile(passes, 0.5), 2), pass_p99_ms=round(percentile(passes, 0.99), 2),
                 idle_cpu_percent=await idle_cpu(pids, o.idle_s))


async def bench(o: Options, platform: Platform, uri: str) -> list[Stage]:
    settings = Settings.from_env(platform.env)
    db_pid = pid_listening_on(urlsplit(uri).port or 0)
    if db_pid is None:
        raise RuntimeError(f"no process listens on {uri}")
    pids = {"paiq": platform.procs[0].pid, "secantusdb": db_pid}
    async with open_store(uri, settings.database) as store, aiohttp.ClientSession() as session:
        nodes = fake_nodes()
        for node in nodes:
            await store.upsert_node(node)
        await store.insert_jobs([active_job(i, now_ms()) for i in range(2 * ACTIVE)])
        beating = asyncio.create_task(keep_alive(store, nodes))
        try:
            api = Api(session, platform.api)
            _, _, login = await api.call("POST", "/api/v1/token", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
            api.token = str(login["token"])
            deps = SchedulerDeps(settings=settings, store=store, bus=MemoryBus())
            seeder = Seeder(store, random.Random(o.seed), o.batch)
            return [await stage(o, size, seeder, api, deps, pids) for size in o.sizes]
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating


async def run(o: Options) -> list[Stage]:
    workdir = Path(tempfile.mkdtemp(prefix="paiq-history-"))
    try:
        async with embedded_mongo(workdir / "db", login=new_login(), log_file=workdir / "db.log") as uri:
            platform = await asyncio.to_thread(
                start_platform, "all-in-one", workdir / "paiq", PAIQ_MONGODB_URI=uri, PAIQ_RECONCILE_SECONDS="10",
                PAIQ_LOG_LEVEL="info")
            try:
                return await bench(o, platform, uri)
            finally:
                await asyncio.to_thread(stop_platform, platform, docker.from_env())
    finally:
        if o.keep:
            print(f"database and logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def summary(o: Options, stages: list[Stage]) -> dict[str, Any]:
    first, last = stages[0], stages[-1]
    ratios = {name: round(p99 / first.api_ms[name][1], 2) for name, (_, p99) in last.api_ms.items()
              if first.api_ms.get(name, (0.0, 0.0))[1] > 0}
    same = {name: r for name, r in ratios.items() if name not in GROWING}
    worst = max(same, key=same.__getitem__) if same else ""
    return {
        "jobs": o.jobs, "sizes": list(o.sizes), "active_jobs": 2 * ACTIVE, "requests": o.requests,
        "api_p99_ratio_max": ratios.get(worst, 0.0), "api_p99_ratio_route": worst,
        "api_p99_ratio_growing": {name: ratios.get(name, 0.0) for name in GROWING}, "api_p99_ratios": ratios,
        "usage_report_p99_ratio": {name: ratios.get(name, 0.0) for name in USAGE_ROUTES},
        "usage_report_ms": {str(s.size): {name: s.api_ms[name] for name in USAGE_ROUTES} for s in stages},
        "order_p99_ratio": {name: ratios[name] for name in ORDER_PATHS if name in ratios},
        "order_ms": {str(s.size): {name: s.api_ms[name] for name in ORDER_PATHS if name in s.api_ms} for s in stages},
        "idle_cpu_percent": round(sum(last.idle_cpu_percent.values()), 2),
        "scheduler_pass_ratio": round(last.pass_p50_ms / first.pass_p50_ms, 2) if first.pass_p50_ms else 0.0,
        "seed_jobs_per_s": {str(s.size): s.seed_jobs_per_s for s in stages},
        "seed_last_batches_jobs_per_s": {str(s.size): s.seed_last_jobs_per_s for s in stages},
        "load_average": {str(s.size): s.load_average[0] for s in stages}, "cpus": os.cpu_count(),
        "stages": [asdict(s) for s in stages],
    }


def table(stages: list[Stage]) -> str:
    rows: list[tuple[str, list[str]]] = [
        ("stored finished jobs", [f"{s.size:,}" for s in stages]),
        ("seeding: jobs/s of insert_jobs", [f"{s.seed_jobs_per_s:,.0f}" for s in stages]),
        ("seeding: jobs/s, last 10 batches", [f"{s.seed_last_jobs_per_s:,.0f}" for s in stages]),
        ("seeding: s in all (building too)", [f"{s.seed_s:.1f}" for s in stages]),
        *((f"{name}  p50/p99 ms", [f"{s.api_ms[name][0]:.1f} / {s.api_ms[name][1]:.1f}" if name in s.api_ms
                                   else "-" for s in stages]) for name in stages[-1].api_ms),
        ("scheduler pass p50/p99 ms", [f"{s.pass_p50_ms:.1f} / {s.pass_p99_ms:.1f}" for s in stages]),
        *((f"idle CPU % of a core: {name}", [f"{s.idle_cpu_percent[name]:.1f}" for s in stages])
          for name in stages[-1].idle_cpu_percent),
        ("load average (1/5/15 min)", ["/".join(f"{x:.1f}" for x in s.load_average) for s in stages]),
    ]
    width = max(len(k) for k, _ in rows)
    cols = [max(len(v[i]) for _, v in rows) for i in range(len(stages))]
    return "\n".join(f"{k:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(v, cols, strict=True))
                     for k, v in rows)


def main(argv: list[str] | None = None) -> None:
    o = parse(argv)
    configure_logging("warning", service="history-bench")  # this process's scheduler passes say little
    stages = asyncio.run(run(o))
    print(table(stages))
    print(json.dumps(summary(o, stages)))


if __name__ == "__main__":
    main()
