"""Database outages longer than the node timeout, a database restart under a burst of submissions, and a
network path to the database that hangs (issue 24), on the chaos run's separate processes: two schedulers,
two launchers, a disk-backed SecantusDB, a private RabbitMQ node. Launcher b reaches the database through
a proxy that can stop forwarding, with a short driver deadline of its own.

=========================  ====================================================================================
phase                      what
=========================  ====================================================================================
database down 40 s         jobs running on both nodes: some end during the outage (exit 0 and exit 3), some run
                           through it (``sleep``); the database is killed -9 for 40 s (node timeout: 24 s)
database down 90 s         the same with longer jobs
restart under submissions  20 POSTs at once, the database killed -9 just after they start and back 2 s later
hung path to the database  launcher b's proxy stops forwarding for 12 s (its driver deadline: 5 s; within the
                           node timeout, so its node must not be lost)
=========================  ====================================================================================
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import docker
from pymongo import MongoClient

from tests.chaos.backends import DiskDatabase, PrivateBroker, log_tail
from tests.chaos.observers import Api, HealthProbe, HealthSample
from tests.chaos.proxy import FreezingProxy
from tests.chaos.scenario import (
    Fault,
    build_services,
    log_in,
    nodes_of,
    nodes_registered,
    remove_containers,
    start_platform,
    wait_until,
)
from tests.chaos.supervisor import SelfExit, Supervisor
from tests.chaos.workload import FINAL, IMAGE
from tests.infra import ADMIN_USER

NODE_TIMEOUT_S = 24
LAUNCHER_B_DB_TIMEOUT_S = 5
OUTAGES_S = (40.0, 90.0)
RESTART_DOWN_S = 2.0
RESTART_POSTS = 20
FREEZE_S = 12.0
HEALTHY_AGAIN_S = 10.0  # every service healthy by itself within this after the database's return
FINAL_LIMIT_S = 150.0


@dataclass(frozen=True)
class OutageJob:
    name: str
    command: str
    state: str
    exit_code: int | None


@dataclass
class Outage:
    """One outage: its jobs, when it was, and what the services said after."""

    down_s: float
    jobs: list[OutageJob]
    fault: Fault | None = None
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    healthy_after_s: float | None = None  # from the database's return until every service said 200
    last_unhealthy: list[HealthSample] = field(default_factory=list)


@dataclass
class RestartPost:
    name: str
    status: int | None
    stored: bool = False
    has_key: bool = False
    detail: str = ""


@dataclass
class Freeze:
    fault: Fault | None = None
    said_unhealthy: bool = False
    recovered_after_s: float | None = None  # from the thaw until launcher b said 200
    live_throughout: bool = True
    samples: list[HealthSample] = field(default_factory=list)


@dataclass
class OutageReport:
    workdir: Path
    outages: list[Outage] = field(default_factory=list)
    posts: list[RestartPost] = field(default_factory=list)
    freeze: Freeze = field(default_factory=Freeze)
    lost_nodes: list[str] = field(default_factory=list)
    self_exits: list[SelfExit] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)

    def tail(self, service: str, lines: int = 25) -> str:
        return log_tail(self.logs[service], lines) if service in self.logs else "(no log)"


def outage_jobs(tag: str, down_s: float) -> list[OutageJob]:
    """Jobs that end during the outage (0 and 3) and ones that run through it, in pairs so both nodes hold some."""
    through = int(down_s + 15)  # still running when the database returns (started a few s before it went)
    return [OutageJob(f"{tag}-through-{i}", f"sleep {through}", "SUCCEEDED", None) for i in range(2)] + [
        OutageJob(f"{tag}-ends-ok-{i}", "sleep 12", "SUCCEEDED", None) for i in range(2)] + [
        OutageJob(f"{tag}-ends-3-{i}", "sleep 10; exit 3", "FAILED", 3) for i in range(3)]


def job_config(name: str, command: str) -> dict[str, Any]:
    return {"jobName": name, "image": IMAGE,
            "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": command}]}


async def states(api: Api) -> dict[str, dict[str, Any]]:
    status, body = await api.call("GET", f"/api/v1/jobs?username={quote(ADMIN_USER)}&limit=1000")
    return {str(j["name"]): j for j in body} if status == 200 and isinstance(body, list) else {}


class Harness:
    def __init__(self, sup: Supervisor, db: DiskDatabase, proxy: FreezingProxy, api: Api, probe: HealthProbe,
                 report: OutageReport, session: aiohttp.ClientSession) -> None:
        self.sup, self.db, self.proxy, self.api, self.probe = sup, db, proxy, api, probe
        self.report, self.session = report, session

    async def submit(self, name: str, command: str) -> None:
        status, body = await self.api.call("POST", f"/api/v1/user/{quote(ADMIN_USER)}/jobs", job_config(name, command))
        assert status == 202, f"submitting {name} before any fault: {status} {body}"

    async def all_in(self, names: list[str], wanted: frozenset[str]) -> bool:
        listed = await states(self.api)
        return all(listed.get(n, {}).get("state") in wanted for n in names)

    async def outage(self, down_s: float) -> Outage:
        tag = f"down{int(down_s)}-{uuid.uuid4().hex[:4]}"
        outage = Outage(down_s, outage_jobs(tag, down_s))
        for job in outage.jobs:
            await self.submit(job.name, job.command)
        names = [j.name for j in outage.jobs]
        await wait_until(f"the jobs of {tag} running", lambda: self.all_in(names, frozenset({"RUNNING"})), 90)
        await asyncio.sleep(3)  # every task's container up and reported
        self.probe.fast = True
        begin = self.sup.elapsed()
        await asyncio.to_thread(self.db.kill)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.db.start)
        back = self.sup.elapsed()
        outage.fault = Fault(f"database down {down_s:.0f} s", begin, back)
        outage.healthy_after_s, outage.last_unhealthy = await self.healthy_after(back)
        self.probe.fast = False
        await self.wait_final(names, outage.final)
        return outage

    async def healthy_after(self, since: float, limit_s: float = 60.0) -> tuple[float | None, list[HealthSample]]:
        """Seconds from ``since`` until every service answered /healthz 200 together (None: not in ``limit_s``)."""
        deadline = time.monotonic() + limit_s
        last: list[HealthSample] = []
        while time.monotonic() < deadline:
            last = await self.probe.check_all(self.session)
            if all(s.code == 200 for s in last):
                return self.sup.elapsed() - since, []
            await asyncio.sleep(0.25)
        return None, [s for s in last if s.code != 200]

    async def wait_final(self, names: list[str], into: dict[str, dict[str, Any]]) -> None:
        deadline = time.monotonic() + FINAL_LIMIT_S
        while True:
            listed = await states(self.api)
            into.update({n: listed[n] for n in names if n in listed})
            if all(into.get(n, {}).get("state") in FINAL for n in names) or time.monotonic() > deadline:
                return
            await asyncio.sleep(2)

    async def restart_under_posts(self) -> None:
        """POSTs in flight while the database is killed and started again: each must be 202 (stored) or 503
        (nothing stored)."""
        tag = f"restart-{uuid.uuid4().hex[:4]}"
        names = [f"{tag}-{i:02d}" for i in range(RESTART_POSTS)]

        async def post(name: str) -> RestartPost:
            status, body = await self.api.call("POST", f"/api/v1/user/{quote(ADMIN_USER)}/jobs",
                                               job_config(name, "true"))
            return RestartPost(name, status, detail="" if status == 202 else str(body)[:200])

        posts = [asyncio.create_task(post(n)) for n in names]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(self.db.kill)
        await asyncio.sleep(RESTART_DOWN_S)
        await asyncio.to_thread(self.db.start)
        self.report.posts = list(await asyncio.gather(*posts))
        for p in self.report.posts:
            status, _ = await self.api.call("GET", f"/api/v1/user/{quote(ADMIN_USER)}/jobs/{quote(p.name)}")
            p.stored = status == 200
            if p.stored:
                status, _ = await self.api.call("GET", f"/api/v1/user/{quote(ADMIN_USER)}/jobs/{quote(p.name)}/ssh")
                p.has_key = status == 200

    async def freeze_launcher_b(self, livez_b: str) -> None:
        freeze = self.report.freeze
        self.probe.fast = True
        begin = self.sup.elapsed()
        self.proxy.freeze()
        until = time.monotonic() + FREEZE_S
        while time.monotonic() < until:
            sample = await self.probe.check(self.session, "launcher-b")
            freeze.samples.append(sample)
            freeze.said_unhealthy |= sample.code == 503
            freeze.live_throughout &= await self.live(livez_b)
            await asyncio.sleep(0.5)
        self.proxy.thaw()
        thawed = self.sup.elapsed()
        freeze.fault = Fault("launcher b's path to the database hung", begin, thawed)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            sample = await self.probe.check(self.session, "launcher-b")
            freeze.samples.append(sample)
            if sample.code == 200:
                freeze.recovered_after_s = self.sup.elapsed() - thawed
                break
            await asyncio.sleep(0.25)
        self.probe.fast = False

    async def live(self, url: str) -> bool:
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False


def lost_nodes(db: DiskDatabase, database: str) -> list[str]:
    client: MongoClient[dict[str, Any]] = MongoClient(db.uri, serverSelectionTimeoutMS=5000)
    try:
        return [str(d["_id"]) for d in client[database]["nodes"].find({"lost": True})]
    finally:
        client.close()


async def run_outages(workdir: Path, client: docker.DockerClient) -> tuple[OutageReport, Callable[[], Awaitable[None]]]:
    """Bring everything up, run the phases, measure; returns the report and the teardown."""
    report = OutageReport(workdir=workdir)
    sup = Supervisor(began=time.monotonic())
    db = DiskDatabase(workdir / "db", str(Path(sys.executable).parent / "secantusd-py"))
    broker = PrivateBroker(workdir / "rabbitmq")
    session = aiohttp.ClientSession()
    proxy = FreezingProxy(db.port)
    probe: HealthProbe | None = None

    async def teardown() -> None:
        if probe is not None:
            await probe.stop()
        await sup.stop_all()
        await asyncio.to_thread(remove_containers, client, nodes_of(sup))
        await proxy.stop()
        await session.close()
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(db.stop)

    try:
        await asyncio.to_thread(broker.start)
        await asyncio.to_thread(db.start)
        await proxy.start()
        via_proxy = db.uri.replace(f":{db.port}/", f":{proxy.port}/")
        api_url = build_services(workdir, db, broker, sup, launcher_b={
            "PAIQ_MONGODB_URI": via_proxy, "PAIQ_MONGODB_TIMEOUT_SECONDS": str(LAUNCHER_B_DB_TIMEOUT_S)})
        for service in sup.services.values():
            service.env["PAIQ_NODE_TIMEOUT_SECONDS"] = str(NODE_TIMEOUT_S)
        report.logs = {name: s.log for name, s in sup.services.items()} | {"database": db.log}
        await start_platform(sup, session)
        api = Api(api_url, session, sup.began)
        await log_in(api)
        await wait_until("both nodes registered", lambda: nodes_registered(api, 2), 60)
        probe = HealthProbe({n: s.health_url for n, s in sup.services.items()}, sup.began)
        probe.start()
        sup.start_watching()
        harness = Harness(sup, db, proxy, api, probe, report, session)
        for down_s in OUTAGES_S:
            report.outages.append(await harness.outage(down_s))
        await harness.restart_under_posts()
        await harness.freeze_launcher_b(sup.services["launcher-b"].health_url.replace("/healthz", "/livez"))
        database = sup.services["status"].env["PAIQ_MONGODB_DATABASE"]
        report.lost_nodes = await asyncio.to_thread(lost_nodes, db, database)
        report.self_exits = list(sup.self_exits)
    except BaseException:
        await teardown()
        raise
    return report, teardown
