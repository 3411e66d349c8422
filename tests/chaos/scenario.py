"""The chaos run: paiq as separate processes (two launchers, two schedulers) on a disk-backed database and a
private broker, ~100 jobs submitted while every component is killed or cut off once, then everything the
assertions need, measured before anything is cleaned up.

Fault schedule (seconds after the first submission; jobs are submitted one a second for ~100 s):

====  ===================================================  ==========
t     fault                                                down for
====  ===================================================  ==========
8     kill -9 submit                                       4 s
20    kill -9 status                                       4 s
32    kill -9 the scheduler that leads                     4 s
44    kill -9 launcher of node a                           4 s
56    kill -9 the database (secantusd-py, on disk)         15 s
85    RabbitMQ stop_app / start_app                        10 s
====  ===================================================  ==========

The database stays down 15 s, within the 30 s a request waits for it (PyMongo's server selection): a
request made meanwhile is answered once it is back, never refused, and a write whose connection died with
the server is tried again (shared.db.retry, Store.submit_job). Longer outages: tests/chaos/outages.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import docker
import docker.errors

from shared.db.embedded import free_port
from shared.jobconfig.sealing import new_key
from tests.chaos.backends import DiskDatabase, PrivateBroker, log_tail
from tests.chaos.observers import Api, ContainerWatch, HealthProbe, HealthSample, TaskKey, reported_role
from tests.chaos.supervisor import SelfExit, ServiceProcess, Supervisor
from tests.chaos.workload import FINAL, Submission, final_states, plan_job, submit
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, platform_env

JOBS = 100
SUBMIT_EVERY_S = 1.0
SUBMIT_LIMIT_S = 90.0
FINAL_LIMIT_S = 240.0  # after the last fault ends
SERVICE_DOWN_S = 4.0
DATABASE_DOWN_S = 15.0
BROKER_DOWN_S = 10.0
OUTAGE_GRACE_S = 10.0  # after a database or broker restart: clients reconnect
SETTLE_LIMIT_S = 30.0  # each of: containers stopped, queues drained, services healthy
LEADS = "this scheduler leads now"
STANDS_BY = "standing by: another scheduler holds the lease"


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: what, when it began and when the harness undid it (seconds since start)."""

    name: str
    start_s: float
    end_s: float


@dataclass
class ChaosReport:
    """Everything the assertions look at; taken while the platform still runs."""

    workdir: Path
    submissions: list[Submission] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    final_wait_s: float = 0.0
    not_final_in_time: list[str] = field(default_factory=list)
    started_twice: dict[TaskKey, set[str]] = field(default_factory=dict)
    container_watch_error: str = ""
    jobs_with_containers: set[str] = field(default_factory=set)
    left_running: list[str] = field(default_factory=list)
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)
    queues_error: str = ""
    queue_prefix: str = ""
    end_health: dict[str, HealthSample] = field(default_factory=dict)
    health: HealthProbe | None = None
    self_exits: list[SelfExit] = field(default_factory=list)
    api: Api | None = None
    logs: dict[str, Path] = field(default_factory=dict)
    scheduler_killed: str = ""

    def fault(self, name: str) -> Fault:
        return next(f for f in self.faults if f.name == name)

    def tail(self, service: str, lines: int = 25) -> str:
        return log_tail(self.logs[service], lines) if service in self.logs else "(no log)"


# --- bringing the platform up ------------------------------------------------------------------------


def build_services(workdir: Path, db: DiskDatabase, broker: PrivateBroker, sup: Supervisor,
                   launcher_b: dict[str, str] | None = None) -> str:
    """Six processes: status, two schedulers, two launchers (nodes a and b), submit. Returns the API URL.
    ``launcher_b``: variables of launcher b's own (e.g. its database URI through a proxy)."""
    prefix = f"paiqchaos-{uuid.uuid4().hex[:6]}"
    node_a = f"chaos-{uuid.uuid4().hex[:6]}-a"
    base = platform_env(workdir, node_a, PAIQ_MONGODB_URI=db.uri, PAIQ_AMQP_URL=broker.url,
                        PAIQ_MONGODB_DATABASE=prefix.replace("-", "_"), PAIQ_EXCHANGE=f"{prefix}.events",
                        PAIQ_QUEUE_PREFIX=prefix, PAIQ_LEASE_SECONDS="5", PAIQ_NODE_TIMEOUT_SECONDS="30",
                        PAIQ_SECRETS_KEY=new_key())  # seals the jobs' SSH keys (submit) and opens them (launchers)
    api = f"http://127.0.0.1:{base['PAIQ_API_PORT']}"
    low = int(base["PAIQ_NODE_PORT_RANGE"].split("-")[0])  # platform_env's hundred ports: half to each node
    base["PAIQ_NODE_PORT_RANGE"] = f"{low}-{low + 49}"

    def add(name: str, module: str, ops_var: str | None, **extra: str) -> None:
        port = free_port()
        env = {**base, **({ops_var: str(port)} if ops_var else {}), **extra}
        url = f"http://127.0.0.1:{port}/healthz" if ops_var else f"{api}/healthz"
        sup.add(ServiceProcess(name, module, env, workdir / f"{name}.log", url))

    add("status", "services.status", "PAIQ_STATUS_OPS_PORT")
    add("scheduler-1", "services.scheduler", "PAIQ_SCHEDULER_OPS_PORT")
    add("scheduler-2", "services.scheduler", "PAIQ_SCHEDULER_OPS_PORT")
    add("launcher-a", "services.launcher", "PAIQ_LAUNCHER_OPS_PORT")
    add("launcher-b", "services.launcher", "PAIQ_LAUNCHER_OPS_PORT", PAIQ_NODE_ID=node_a[:-1] + "b",
        PAIQ_NODE_PORT_RANGE=f"{low + 50}-{low + 99}", **(launcher_b or {}))
    add("submit", "services.submit", None)
    return api


def nodes_of(sup: Supervisor) -> set[str]:
    return {s.env["PAIQ_NODE_ID"] for s in sup.services.values() if s.module == "services.launcher"}


async def wait_until(what: str, check: Callable[[], Awaitable[bool]], limit_s: float, every_s: float = 0.5) -> None:
    """Poll ``check`` until it is true; TimeoutError naming ``what`` after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {limit_s}s")
        await asyncio.sleep(every_s)


async def healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def current_life(service: ServiceProcess) -> str:
    """The service's log since its latest start."""
    text = service.log.read_text(errors="replace")
    return text.rsplit("=== chaos harness: start", 1)[-1]


async def scheduler_role(session: aiohttp.ClientSession, service: ServiceProcess) -> str:
    """``leader``/``standby`` from /healthz's ``role`` when it says so, else from the log since the last start."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with session.get(service.health_url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            role = reported_role(await resp.json(content_type=None))
            if role in ("leader", "standby"):
                return str(role)
    life = current_life(service)
    return "leader" if LEADS in life else "standby" if STANDS_BY in life else "unknown"


async def start_platform(sup: Supervisor, session: aiohttp.ClientSession) -> None:
    """Start in dependency order; scheduler-1 leads before scheduler-2 starts, so the roles are known."""
    order = ["status", "scheduler-1", "scheduler-2", "launcher-a", "launcher-b", "submit"]
    for name in order:
        service = sup.services[name]
        service.start()
        await wait_until(f"{name} answering /healthz 200", partial(healthy, session, service.health_url), 60)
        if name == "scheduler-1":
            await wait_until("scheduler-1 leading", partial(_leads, session, service), 30)


async def _leads(session: aiohttp.ClientSession, service: ServiceProcess) -> bool:
    return await scheduler_role(session, service) == "leader"


async def log_in(api: Api) -> None:
    status, body = await api.call("POST", "/api/v1/token", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert status == 200, f"admin login failed: {status} {body}"
    api.token = str(body["token"])


async def nodes_registered(api: Api, count: int) -> bool:
    status, body = await api.call("GET", "/api/v1/virtual-clusters")
    if status != 200 or not isinstance(body, dict):
        return False
    return bool(sum(vc["capacity"]["cpus"] for vc in body.values()) >= 32 * count - 1)  # quotas round down


# --- the faults ----------------------------------------------------------------------------------------


class Chaos:
    """Runs the fault schedule against a running platform and records when each fault began and ended."""

    def __init__(self, sup: Supervisor, db: DiskDatabase, broker: PrivateBroker, probe: HealthProbe,
                 report: ChaosReport, session: aiohttp.ClientSession) -> None:
        self.sup, self.db, self.broker, self.probe, self.report = sup, db, broker, probe, report
        self.session = session

    async def at(self, t: float) -> None:
        await asyncio.sleep(max(0.0, t - self.sup.elapsed()))

    async def kill_service(self, t: float, name: str) -> None:
        await self.at(t)
        service = self.sup.services[name]
        begin = self.sup.elapsed()
        service.kill9()
        await asyncio.sleep(SERVICE_DOWN_S)
        service.start()
        self.report.faults.append(Fault(f"kill {name}", begin, self.sup.elapsed()))
        await self.until_started(service.health_url)

    async def until_started(self, health_url: str, limit_s: float = 30) -> None:
        """Until the restarted service has started (its /healthz 200), for at most ``limit_s``: the next fault
        then meets a running service, not one half-way through its start (a service that cannot reach its
        database at start exits, as documented; on a loaded machine a start outlasted the 8 s before the
        database's kill)."""
        deadline = self.sup.elapsed() + limit_s
        while self.sup.elapsed() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.session.get(health_url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.5)

    async def kill_leader(self, t: float) -> None:
        await self.at(t)
        roles = {n: await scheduler_role(self.session, self.sup.services[n]) for n in ("scheduler-1", "scheduler-2")}
        leaders = [n for n, r in roles.items() if r == "leader"]
        self.report.scheduler_killed = leaders[0] if len(leaders) == 1 else f"scheduler-1 (roles seen: {roles})"
        await self.kill_service(t, leaders[0] if len(leaders) == 1 else "scheduler-1")

    async def database_outage(self, t: float) -> None:
        await self.at(t)
        self.probe.fast = True
        begin = self.sup.elapsed()
        await asyncio.to_thread(self.db.kill)
        await asyncio.sleep(DATABASE_DOWN_S)
        await asyncio.to_thread(self.db.start)
        self.report.faults.append(Fault("database down", begin, self.sup.elapsed()))
        await asyncio.sleep(OUTAGE_GRACE_S)
        self.probe.fast = False

    async def broker_outage(self, t: float) -> None:
        await self.at(t)
        self.probe.fast = True
        begin = self.sup.elapsed()
        await asyncio.to_thread(self.broker.stop_app)
        await asyncio.sleep(BROKER_DOWN_S)
        await asyncio.to_thread(self.broker.start_app)
        self.report.faults.append(Fault("broker down", begin, self.sup.elapsed()))
        await asyncio.sleep(OUTAGE_GRACE_S)
        self.probe.fast = False

    async def run(self, start: float) -> None:
        """The schedule of the module docstring, ``start`` seconds into the harness's clock."""
        await self.kill_service(start + 8, "submit")
        await self.kill_service(start + 20, "status")
        await self.kill_leader(start + 32)
        await self.kill_service(start + 44, "launcher-a")
        await self.database_outage(start + 56)
        await self.broker_outage(start + 85)


# --- the workload and the end state ----------------------------------------------------------------------


async def submit_all(api: Api, run_id: str) -> list[Submission]:
    """One job a second, each submission retrying on its own so that an outage holds up none of the others."""
    tasks: list[asyncio.Task[Submission]] = []
    for i in range(JOBS):
        tasks.append(asyncio.create_task(submit(api, ADMIN_USER, plan_job(i, run_id), SUBMIT_LIMIT_S)))
        await asyncio.sleep(SUBMIT_EVERY_S)
    return list(await asyncio.gather(*tasks))


async def wait_all_final(api: Api, report: ChaosReport, limit_s: float) -> None:
    """Poll the job list until every accepted job is final or ``limit_s`` passes; keep the last states."""
    names = {s.plan.name for s in report.submissions if s.accepted}
    began = time.monotonic()
    while True:
        listed = await final_states(api, ADMIN_USER)
        if listed is not None:
            report.final = listed
            open_jobs = sorted(n for n in names if listed.get(n, {}).get("state") not in FINAL)
            if not open_jobs:
                break
            if time.monotonic() - began > limit_s:
                report.not_final_in_time = open_jobs
                break
        await asyncio.sleep(2)
    report.final_wait_s = time.monotonic() - began


def running_task_containers(client: docker.DockerClient, nodes: set[str]) -> list[str]:
    found = []
    for node in sorted(nodes):
        for c in client.containers.list(filters={"label": f"paiq.node={node}"}):
            found.append(f"{c.name} (node {node}, job {c.labels.get('paiq.job')}, status {c.status})")
    return found


def note_remaining_containers(client: docker.DockerClient, watch: ContainerWatch, nodes: set[str]) -> None:
    """Count the containers still on the engine too (ended, not yet removed), in case an event was missed."""
    for node in nodes:
        for c in client.containers.list(all=True, filters={"label": f"paiq.node={node}"}):
            if c.attrs.get("State", {}).get("StartedAt", "").startswith("0001"):
                continue  # created, never started
            watch.note(str(c.id), dict(c.labels))


async def settle_containers(client: docker.DockerClient, report: ChaosReport, nodes: set[str]) -> None:
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while True:
        report.left_running = await asyncio.to_thread(running_task_containers, client, nodes)
        if not report.left_running or time.monotonic() > deadline:
            return
        await asyncio.sleep(1)


async def settle_queues(broker: PrivateBroker, report: ChaosReport) -> None:
    """Wait (bounded) until no service queue has a ready message; keep the last listing."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while True:
        try:
            report.queues = await asyncio.to_thread(broker.queues)
            report.queues_error = ""
        except Exception as e:
            report.queues_error = repr(e)
        if not report.queues_error and all(ready == 0 for _, ready in report.queues.values()):
            return
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(2)


async def settle_health(probe: HealthProbe, report: ChaosReport) -> None:
    """Wait (bounded) until every service answers 200 and one scheduler says it leads; keep the last answers."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    async with aiohttp.ClientSession() as session:
        while True:
            samples = await probe.check_all(session)
            report.end_health = {s.service: s for s in samples}
            roles = [reported_role(s.body) for s in samples if s.service.startswith("scheduler")]
            settled = roles.count("leader") == 1 or not any(roles)  # no roles at all: nothing to wait for
            if (all(s.code == 200 for s in samples) and settled) or time.monotonic() > deadline:
                return
            await asyncio.sleep(1)


async def run_chaos(workdir: Path, client: docker.DockerClient) -> tuple[ChaosReport, Callable[[], Awaitable[None]]]:
    """Bring everything up, run the schedule, measure; returns the report and the teardown."""
    report = ChaosReport(workdir=workdir)
    sup = Supervisor(began=time.monotonic())
    db = DiskDatabase(workdir / "db", str(Path(sys.executable).parent / "secantusd-py"))
    broker = PrivateBroker(workdir / "rabbitmq")
    session = aiohttp.ClientSession()
    watch: ContainerWatch | None = None
    probe: HealthProbe | None = None

    async def teardown() -> None:
        if probe is not None:
            await probe.stop()
        await sup.stop_all()
        if watch is not None:
            await asyncio.to_thread(watch.stop)
        await asyncio.to_thread(remove_containers, client, nodes_of(sup))
        await session.close()
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(db.stop)

    try:
        await asyncio.to_thread(broker.start)
        await asyncio.to_thread(db.start)
        api_url = build_services(workdir, db, broker, sup)
        report.queue_prefix = sup.services["status"].env["PAIQ_QUEUE_PREFIX"]
        report.logs = {name: s.log for name, s in sup.services.items()} | {"database": db.log,
                                                                           "broker": broker.log}
        await start_platform(sup, session)
        api = Api(api_url, session, sup.began)
        report.api = api
        await log_in(api)
        await wait_until("both nodes registered", lambda: nodes_registered(api, 2), 60)
        watch = ContainerWatch(nodes_of(sup))
        watch.start()
        probe = HealthProbe({n: s.health_url for n, s in sup.services.items()}, sup.began)
        report.health = probe
        probe.start()
        sup.start_watching()
        await run_schedule(sup, db, broker, probe, report, session, api)
        await measure_end(sup, broker, probe, report, client, watch)
    except BaseException:
        await teardown()
        raise
    return report, teardown


async def run_schedule(sup: Supervisor, db: DiskDatabase, broker: PrivateBroker, probe: HealthProbe,
                       report: ChaosReport, session: aiohttp.ClientSession, api: Api) -> None:
    chaos = Chaos(sup, db, broker, probe, report, session)
    start = sup.elapsed()
    submissions, _ = await asyncio.gather(submit_all(api, uuid.uuid4().hex[:6]), chaos.run(start))
    report.submissions = submissions
    await wait_all_final(api, report, FINAL_LIMIT_S - (sup.elapsed() - report.faults[-1].end_s))


async def measure_end(sup: Supervisor, broker: PrivateBroker, probe: HealthProbe, report: ChaosReport,
                      client: docker.DockerClient, watch: ContainerWatch) -> None:
    nodes = nodes_of(sup)
    await settle_containers(client, report, nodes)
    await settle_queues(broker, report)
    await settle_health(probe, report)
    await asyncio.to_thread(note_remaining_containers, client, watch, nodes)
    report.started_twice = watch.twice()
    report.jobs_with_containers = watch.jobs_seen()
    report.container_watch_error = watch.error
    report.self_exits = list(sup.self_exits)
    await asyncio.to_thread(write_summary, report)


def write_summary(report: ChaosReport) -> None:
    """``chaos-summary.json`` beside the logs: the timeline an operator reads first when a property broke."""
    health = report.health.samples if report.health is not None else []
    answers = report.api.answers if report.api is not None else []
    summary = {
        "faults": [vars(f) for f in report.faults],
        "scheduler_killed": report.scheduler_killed,
        "health_during_faults": {
            f.name: {svc: [h.short() for h in health if h.service == svc and f.start_s <= h.at_s <= f.end_s]
                     for svc in sorted({h.service for h in health})}
            for f in report.faults},
        "jobs": [{"name": s.plan.name, "kind": s.plan.kind, "expected": s.plan.state, "tries": s.tries,
                  "accepted": s.accepted, "refused": s.refused,
                  "final": {k: report.final.get(s.plan.name, {}).get(k) for k in ("state", "appExitCode", "retries")}}
                 for s in report.submissions],
        "final_wait_s": round(report.final_wait_s, 1),
        "not_final_in_time": report.not_final_in_time,
        "started_twice": [f"{k}: {sorted(v)}" for k, v in report.started_twice.items()],
        "left_running": report.left_running,
        "queues": report.queues,
        "end_health": {k: {"code": v.code, "body": v.body, "error": v.error} for k, v in report.end_health.items()},
        "self_exits": [f"{e.service} code {e.returncode} at t={e.at_s:.1f}s" for e in report.self_exits],
        "api_failures": [vars(a) for a in answers if a.status is None or a.status >= 500],
        "api_slowest": [vars(a) for a in sorted(answers, key=lambda a: -a.took_s)[:10]],
    }
    (report.workdir / "chaos-summary.json").write_text(json.dumps(summary, indent=1, default=str))


def remove_containers(client: docker.DockerClient, nodes: set[str]) -> None:
    for node in nodes:
        for c in client.containers.list(all=True, filters={"label": f"paiq.node={node}"}):
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
