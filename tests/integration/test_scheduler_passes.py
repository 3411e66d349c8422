"""The scheduler's passes against the real MongoDB-wire server: bursts coalesce, a lost node's exits are
reported until taken in, and a moving queue rewrites nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from services.scheduler.service import SchedulerDeps, detect_lost_nodes, start_scheduler
from services.status.service import StatusDeps, on_task_exited, retry_policy
from shared.bus.memory import MemoryBus
from shared.db.store import Fence, Store, open_store
from shared.errors import LeaseLostError
from shared.events import JobSubmitted, JobSubmittedData, TaskExited
from shared.ops.metrics import SCHEDULER_PASS
from shared.records import (
    JobRecord,
    JobState,
    NodeRecord,
    SubState,
    TaskRecord,
    TaskState,
    holds_resources,
    initial_tasks,
    now_ms,
)
from shared.scheduling.nodeliveness import DatabaseWatch
from shared.settings.model import Settings
from tests.infra import unique
from tests.journalview import passed
from tests.unit.factories import make_config, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("sched_")) as s:
        yield s


def settings() -> Settings:
    # No timer pass during a test: every pass is one the test caused.
    return Settings.from_env({"PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q")})


def job(name: str, *, cpus: int = 1) -> JobRecord:
    config = make_config(role_dict("main", cpuNumber=cpus), jobName=name)
    return JobRecord(id=f"u~{name}~00000000", user="u", name=name, virtual_cluster="default", config=config,
                     raw_config={}, created_ms=now_ms(), tasks=initial_tasks(config))


def node(node_id: str, *, cpus: int = 64, heard_ms: int | None = None) -> NodeRecord:
    return NodeRecord(_id=node_id, ip="10.0.0.9", cpus=cpus, memory_mb=1 << 20, port_range=(20000, 29999),
                      heartbeat_ms=now_ms() if heard_ms is None else heard_ms)


def passes() -> float:
    return next(s.value for m in SCHEDULER_PASS.collect() for s in m.samples if s.name.endswith("_count"))


async def idle(deps: SchedulerDeps, limit_s: float = 30) -> None:
    """Until no pass runs and none is wanted."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while deps.wanted.is_set() or deps.lock.locked():
        assert asyncio.get_running_loop().time() < deadline, "the scheduler never went idle"
        await asyncio.sleep(0.05)


async def test_a_burst_of_submissions_costs_a_pass_or_two_not_one_each(store: Store) -> None:
    bus = MemoryBus()
    deps = SchedulerDeps(settings=settings(), store=store, bus=bus)
    await store.upsert_node(node("n1"))
    async with AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        start = passes()
        await start_scheduler(stack, deps)
        for _ in range(100):
            if passes() > start:
                break
            await asyncio.sleep(0.05)
        await idle(deps)  # the first pass (on taking the lead) is over, and no other is wanted
        before = passes()
        jobs = [job(f"burst{i}") for i in range(40)]
        for j in jobs:
            await store.insert_job(j)
        await bus.publish([JobSubmitted(subject=j.id, data=JobSubmittedData(job_id=j.id, user=j.user,
                                                                             virtual_cluster=j.virtual_cluster))
                           for j in jobs])
        # Bounded by time, not by a count of polls: once in a full run every database call of the process
        # waited 20 s on the loaded machine (the lease's renewals too, so that the scheduler stood down and led
        # again before it placed the burst).
        deadline = asyncio.get_running_loop().time() + 60
        while asyncio.get_running_loop().time() < deadline:
            if not await store.queued_jobs():
                break
            await asyncio.sleep(0.05)
        assert await store.queued_jobs() == [], "every job of the burst was placed"
        await idle(deps)
        assert passes() - before <= 3, f"{passes() - before:.0f} passes for a burst of 40 submissions"


async def test_moving_up_the_queue_rewrites_nothing(store: Store) -> None:
    deps = SchedulerDeps(settings=settings(), store=store, bus=MemoryBus())
    await store.upsert_node(node("n1", cpus=4))
    head, second, third = job("head", cpus=4), job("second", cpus=4), job("third", cpus=4)
    for j in (head, second, third):
        await store.insert_job(j)
    await passed(deps)  # head starts; second and third wait for CPUs
    waiting = {j.name: j for j in await store.queued_jobs()}
    assert set(waiting) == {"second", "third"}
    assert waiting["third"].reason == waiting["second"].reason and "lacks 4 free CPUs" in waiting["third"].reason
    versions = {name: j.version for name, j in waiting.items()}
    placed = await store.get_job(head.id)
    assert placed is not None
    ended = [t.model_copy(update={"state": TaskState.SUCCEEDED}) for t in placed.tasks]
    done = placed.model_copy(update={"state": JobState.SUCCEEDED, "sub_state": SubState.COMPLETED,
                                       "tasks": tuple(ended)})
    assert await store.replace_job(done, placed.version)
    events = await passed(deps)  # second starts: third moves up to position 1
    assert [e.data.job_id for e in events if e.type == "job.scheduled"] == [second.id]
    [still] = await store.queued_jobs()
    assert still.name == "third" and still.version == versions["third"], "its document was not written"
    assert await passed(deps) == [], "a pass that changes nothing writes and says nothing"


def seen_for(seconds: float) -> DatabaseWatch:
    """A scheduler that has reached the database without a break for ``seconds``."""
    return DatabaseWatch(reachable_since_ms=now_ms() - int(seconds * 1000), last_ok_ms=now_ms())


async def test_a_lost_nodes_exits_are_reported_until_taken_in(store: Store) -> None:
    bus = MemoryBus()
    deps = SchedulerDeps(settings=settings(), store=store, bus=bus, db_watch=seen_for(3600))
    await store.upsert_node(node("gone", heard_ms=now_ms() - 3_600_000))
    running = job("on-gone")
    await store.insert_job(running)
    [placed] = await store.commit_placements([(running, tuple(
        t.model_copy(update={"node_id": "gone", "ip": "10.0.0.9"}) for t in running.tasks))])
    first = await detect_lost_nodes(deps)  # say its publish failed: nothing reached the status service
    assert [(e.type, e.data.exit_code) for e in first if isinstance(e, TaskExited)] == [("task.exited", -1001)]
    again = await detect_lost_nodes(deps)
    assert [json.loads(e.model_dump_json())["data"] for e in again] == [
        json.loads(e.model_dump_json())["data"] for e in first], "the same exits, again, until taken in"
    status = StatusDeps(settings=deps.settings, store=store, bus=bus, policy=retry_policy(deps.settings))
    [exited] = again
    assert isinstance(exited, TaskExited)
    await on_task_exited(exited, status)
    after = await store.get_job(placed.id)
    assert after is not None and not any(holds_resources(t) for t in after.tasks)
    assert await detect_lost_nodes(deps) == [], "taken in: nothing more to report"
    await bus.close()


async def test_silence_while_the_scheduler_could_not_reach_the_database_loses_no_node(store: Store) -> None:
    """The outage of issue 24: both launchers' heartbeats are older than the timeout because nobody could
    write. A scheduler whose own database rounds just resumed (or that just started) declares nothing lost;
    once it has reached the database for a whole timeout, a node still silent is lost, unless most nodes
    are silent together."""
    deps = SchedulerDeps(settings=settings(), store=store, bus=MemoryBus())
    await store.upsert_node(node("quiet-a", heard_ms=now_ms() - 50_000))
    await store.upsert_node(node("quiet-b", heard_ms=now_ms() - 50_000))
    running = job("through-the-outage")
    await store.insert_job(running)
    await store.commit_placements([(running, tuple(
        t.model_copy(update={"node_id": "quiet-a", "ip": "10.0.0.9"}) for t in running.tasks))])
    assert await detect_lost_nodes(deps) == [], "the database came back just now: no node judged"
    assert deps.db_watch.reachable_since_ms is not None
    assert not any(n.lost for n in await store.list_nodes())
    deps.db_watch = seen_for(41)
    assert await detect_lost_nodes(deps) == [], "2 of 2 silent together: the control plane, not the nodes"
    assert deps.held_back is not None and "silent together" in deps.held_back
    await store.heartbeat("quiet-b")  # b's launcher writes again; a stays silent: a is one dead machine
    [exited] = await detect_lost_nodes(deps)
    assert isinstance(exited, TaskExited) and exited.data.exit_code == -1001
    assert [n.id for n in await store.list_nodes() if n.lost] == ["quiet-a"]
    assert deps.held_back is None


async def test_a_scheduler_that_lost_its_lease_cannot_commit_a_placement(store: Store) -> None:
    await store.upsert_node(node("n1", cpus=4))
    assert await store.supports_transactions(), "the MongoDB-wire server runs as a replica set"
    assert await store.hold_lease("scheduler", "old", 15_000)
    first, second = job("first", cpus=4), job("second", cpus=4)
    for j in (first, second):
        await store.insert_job(j)

    def on_n1(j: JobRecord) -> tuple[JobRecord, tuple[TaskRecord, ...]]:
        return j, tuple(t.model_copy(update={"node_id": "n1", "ip": "10.0.0.9"}) for t in j.tasks)

    # The old leader decided "first" goes on n1's 4 CPUs, then stalled past its lease before committing;
    # the new leader took over and gave n1 to "second".
    await store.leases.update_one({"_id": "scheduler"}, {"$set": {"expires_ms": 0}})
    assert await store.hold_lease("scheduler", "new", 15_000)
    assert [j.name for j in await store.commit_placements([on_n1(second)], Fence("scheduler", "new"))] == ["second"]
    with pytest.raises(LeaseLostError):
        await store.commit_placements([on_n1(first)], Fence("scheduler", "old"))
    stored = await store.get_job(first.id)
    assert stored is not None and stored.sub_state == "queued", "nothing of the stale decision was written"
    assert [j.name for j in await store.jobs_holding_resources()] == ["second"], "n1 is booked once"


async def test_a_job_that_can_never_fit_is_parked_until_the_cluster_changes(store: Store) -> None:
    deps = SchedulerDeps(settings=settings(), store=store, bus=MemoryBus())
    await store.upsert_node(node("n1", cpus=4))
    hopeless, fits = job("hopeless", cpus=8), job("fits", cpus=1)
    for j in (hopeless, fits):
        await store.insert_job(j)
    events = await passed(deps)
    assert [e.data.job_id for e in events if e.type == "job.scheduled"] == [fits.id]
    parked = await store.get_job(hopeless.id)
    assert parked is not None and parked.parked and parked.reason.startswith("it cannot start even on an idle")
    assert await store.queued_jobs() == [], "a pass does not even read it"
    assert [entry.job_id for entry in await store.queue_order()] == [hopeless.id], "it keeps its place"
    assert await store.queue_lengths() == {"default": 1}
    assert await passed(deps) == [], "nothing to say, nothing written"
    await store.upsert_node(node("n2", cpus=16))  # the cluster changes: it is looked at again
    events = await passed(deps)
    assert [e.data.job_id for e in events if e.type == "job.scheduled"] == [hopeless.id]


async def test_a_scheduler_that_loses_its_lease_stands_by_and_leads_again_without_stopping(store: Store) -> None:
    """Losing the lease stops the scheduler's work (consuming, passes), not its process: it stands by,
    says so in its health, and leads again once the lease is free."""
    bus = MemoryBus()
    fast = Settings.from_env({"PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q"),
                              "PAIQ_LEASE_SECONDS": "3"})
    deps = SchedulerDeps(settings=fast, store=store, bus=bus)

    async def role_becomes(role: str, limit: float = 10) -> None:
        for _ in range(int(limit / 0.05)):
            if deps.vitals.roles.get("scheduler") == role:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the scheduler is {deps.vitals.roles}, not {role}")

    await store.upsert_node(node("n1"))
    async with AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        await start_scheduler(stack, deps)
        await role_becomes("leader")
        assert (await deps.vitals.report()).status == "ok"
        # Another instance takes the lease (as after this one was cut off longer than the lease), for 8 s: long
        # enough that this one's next renewal (a second apart, later on a loaded machine) finds it still held. With
        # 3 s, a full run on four workers renewed after it had run out, took it back, and never stood by.
        await store.leases.update_one({"_id": "scheduler"},
                                      {"$set": {"holder": "other", "expires_ms": now_ms() + 8000}})
        await role_becomes("standby")
        report = await deps.vitals.report()
        assert report.status == "ok" and report.roles == {"scheduler": "standby"}
        # The role says standby at once; the leader's loops stop once their rounds in flight end (bounded by
        # the vitals' round grace): a full suite on two cores once read the report in between.
        for _ in range(100):
            if "scheduler-passes" not in (report := await deps.vitals.report()).loops:
                break
            await asyncio.sleep(0.05)
        assert "scheduler-passes" not in report.loops, "a standby runs no passes"
        waiting = job("while-standing-by")
        await store.insert_job(waiting)
        await bus.publish([JobSubmitted(subject=waiting.id, data=JobSubmittedData(
            job_id=waiting.id, user=waiting.user, virtual_cluster=waiting.virtual_cluster))])
        await asyncio.sleep(0.5)
        assert [j.id for j in await store.queued_jobs()] == [waiting.id], "a standby placed a job"
        # The other instance's lease runs out: this one leads again, and takes in what it missed.
        await role_becomes("leader", limit=20)
        for _ in range(100):
            if not await store.queued_jobs():
                break
            await asyncio.sleep(0.05)
        assert await store.queued_jobs() == [], "the job submitted while it stood by was placed once it led"


async def test_a_leader_whose_lease_renewal_hangs_stands_down_within_the_lease(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in the chaos run: a renewal that never returned left a scheduler saying "leader" beside the one
    that took the expired lease. A leader that has not renewed within the lease's time stops deciding."""
    lease_s = 4
    deps = SchedulerDeps(settings=Settings.from_env({"PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q"),
                                                     "PAIQ_LEASE_SECONDS": str(lease_s)}),
                         store=store, bus=MemoryBus())
    await store.leases.delete_many({})
    real = store.hold_lease
    hang = asyncio.Event()

    async def hold_lease(name: str, holder: str, ttl_ms: int) -> bool:
        if hang.is_set():
            await asyncio.Event().wait()  # a call that never returns
        return await real(name, holder, ttl_ms)

    monkeypatch.setattr(store, "hold_lease", hold_lease)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(deps.bus.close)
        await start_scheduler(stack, deps)
        for _ in range(100):
            if deps.vitals.roles["scheduler"] == "leader":
                break
            await asyncio.sleep(0.05)
        assert deps.vitals.roles["scheduler"] == "leader"
        hang.set()
        began = asyncio.get_running_loop().time()
        while deps.vitals.roles["scheduler"] == "leader":
            assert asyncio.get_running_loop().time() - began < lease_s + 3, "still leading past its lease"
            await asyncio.sleep(0.1)
        assert deps.vitals.roles["scheduler"] == "standby"
        hang.clear()


async def test_after_a_database_outage_only_one_scheduler_leads(mongo_uri: str) -> None:
    """Seen in the chaos run: both schedulers' lease calls waited out a database restart; the old leader's
    renewal, sent before the outage, landed first and wrote an expiry already past, the standby then took
    the lease, and both said leader. A lease counts from when its call was sent: the old leader stands
    down, and after the outage exactly one scheduler leads."""
    from tests.chaos.proxy import FreezingProxy

    lease_s = 3
    port = int(mongo_uri.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    database = unique("lease_")
    proxies = [FreezingProxy(port), FreezingProxy(port)]
    deps: list[SchedulerDeps] = []
    async with AsyncExitStack() as stack:
        for proxy in proxies:
            await proxy.start()
            stack.push_async_callback(proxy.stop)
            uri = mongo_uri.replace(f":{port}/", f":{proxy.port}/")
            store = await stack.enter_async_context(open_store(uri, database, timeout_seconds=60))
            d = SchedulerDeps(settings=Settings.from_env({
                "PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q"),
                "PAIQ_LEASE_SECONDS": str(lease_s)}), store=store, bus=MemoryBus())
            stack.push_async_callback(d.bus.close)
            await start_scheduler(stack, d)
            deps.append(d)
            for _ in range(200):  # the first leads before the second starts
                if len(deps) > 1 or d.vitals.roles.get("scheduler") == "leader":
                    break
                await asyncio.sleep(0.05)

        def roles() -> list[str]:
            return [d.vitals.roles["scheduler"] for d in deps]

        for _ in range(100):
            if roles() == ["leader", "standby"]:
                break
            await asyncio.sleep(0.05)
        assert roles() == ["leader", "standby"]
        for proxy in proxies:  # the database away for both, longer than the lease
            proxy.freeze()
        await asyncio.sleep(lease_s * 3)
        proxies[0].thaw()  # the old leader's calls land first
        await asyncio.sleep(0.5)
        proxies[1].thaw()
        both_since: float | None = None
        loop = asyncio.get_running_loop()
        until = loop.time() + lease_s * 3
        while loop.time() < until:
            if roles() == ["leader", "leader"]:
                both_since = both_since or loop.time()
                assert loop.time() - both_since < lease_s, "two schedulers said leader for a whole lease"
            else:
                both_since = None
            await asyncio.sleep(0.05)
        assert sorted(roles()) == ["leader", "standby"], roles()
