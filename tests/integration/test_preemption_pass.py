"""Borrowing and preemption through the scheduler's passes and the status service's handlers, against the
real MongoDB-wire server: a borrower is preempted within the pass that sees its lender's job, its attempt
ends as a platform retry, it is queued again with its age and waits saying why."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.scheduler.service import SchedulerDeps
from services.status.service import StatusDeps, on_preempted, on_task_exited, reconcile, retry_policy
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.events import JobPreempted, JobScheduled, StopTasks, TaskExited, TaskExitedData
from shared.lifecycle.exitcodes import PREEMPTED
from shared.records import SubState, now_ms
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from tests.infra import unique
from tests.integration.preemption_jobs import job, of, run
from tests.journalview import passed
from tests.unit.factories import make_node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HALF = Quota(cpus=50, memory=50, gpus=50)


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("preempt_")) as s:
        await s.upsert_node(make_node("n1", cpus=8, memory_mb=32768, gpus=["V100"] * 4))
        await s.put_vc(VirtualCluster(name="a", quota=HALF))
        await s.put_vc(VirtualCluster(name="b", quota=HALF, borrowing=HALF))
        yield s


def settings() -> Settings:
    return Settings.from_env({"PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q")})



async def test_a_borrower_is_preempted_within_one_pass_and_waits_then_resumes(store: Store) -> None:
    bus = MemoryBus()
    deps = SchedulerDeps(settings=settings(), store=store, bus=bus)
    status = StatusDeps(settings=deps.settings, store=store, bus=bus, policy=retry_policy(deps.settings))
    t0 = now_ms() - 60_000
    borrower = job("borrower", "b", 4, "prod", at=t0)  # b's quota is 2 GPUs: 2 more borrowed from a
    await store.insert_job(borrower)
    first = await passed(deps)
    assert [e.subject for e in of(first, JobScheduled)] == [borrower.id], "b borrows a's idle GPUs"
    await run(store, borrower.id)

    owner = job("owner", "a", 2, "test", at=now_ms())  # within a's quota, lower priority than the borrower
    await store.insert_job(owner)
    second = await passed(deps)
    [preempted] = of(second, JobPreempted)
    assert isinstance(preempted, JobPreempted)
    assert (preempted.data.job_id, preempted.data.by_job_id, preempted.data.reason) == (
        borrower.id, owner.id, "borrowed capacity of vc a")
    assert not of(second, JobScheduled), "the owner starts once the borrower's containers are gone"
    waiting = await store.get_job(owner.id)
    assert waiting is not None and waiting.reason.startswith(f"preempting 1 job: {borrower.id} (borrowed capacity")

    ended = await on_preempted(preempted, status)
    [stop] = of(ended, StopTasks)
    assert isinstance(stop, StopTasks) and stop.data.node_id == "n1" and not stop.data.by_user
    victim = await store.get_job(borrower.id)
    assert victim is not None and victim.sub_state == SubState.RETRY_PENDING and victim.exit_code == PREEMPTED
    assert victim.retry_counts.platform == 1 and victim.retry_counts.user == 0
    assert victim.exit_reason == f"preempted by job {owner.id} (test, vc a): borrowed capacity of vc a"

    third = await passed(deps)  # the borrower's container is still stopping
    assert not of(third, JobPreempted) and not of(third, JobScheduled)
    waiting = await store.get_job(owner.id)
    assert waiting is not None and waiting.reason == "preemption of 1 job of vc b in progress"

    await on_task_exited(TaskExited(subject=borrower.id, data=TaskExitedData(
        job_id=borrower.id, attempt=0, role="main", index=0, node_id="n1", exit_code=143, reason="SIGTERM")), status)
    await reconcile(status)  # the retry is due at once: requeued
    requeued = await store.get_job(borrower.id)
    assert requeued is not None and requeued.attempt == 1 and requeued.sub_state == SubState.QUEUED
    assert requeued.queued_ms == t0, "queued again with its original age"
    assert requeued.preempted is None and requeued.preempted_by == (owner.id,)

    fourth = await passed(deps)
    assert [e.subject for e in of(fourth, JobScheduled)] == [owner.id]
    assert not of(fourth, JobPreempted), "the borrower never preempts its preemptor back"
    again = await store.get_job(borrower.id)
    assert again is not None and again.reason == (
        "virtual cluster b would borrow 2 GPUs beyond its quota but the other virtual clusters leave 0 idle")

    await run(store, owner.id)
    await on_task_exited(TaskExited(subject=owner.id, data=TaskExitedData(
        job_id=owner.id, attempt=0, role="main", index=0, node_id="n1", exit_code=0, reason="")), status)
    fifth = await passed(deps)
    assert [e.subject for e in of(fifth, JobScheduled)] == [borrower.id], "it resumes when capacity frees"


async def test_an_opportunistic_job_runs_beyond_every_quota_and_goes_first(store: Store) -> None:
    bus = MemoryBus()
    deps = SchedulerDeps(settings=settings(), store=store, bus=bus)
    test = job("own-test", "a", 1, "test", at=now_ms() - 3000)
    oppo = job("scavenger", "a", 3, "oppo", at=now_ms() - 2000)  # a's quota is 2 GPUs: oppo counts in none
    for j in (test, oppo):
        await store.insert_job(j)
    started = await passed(deps)
    assert sorted(e.subject for e in of(started, JobScheduled)) == sorted([test.id, oppo.id])
    for j in (test, oppo):
        await run(store, j.id)
    prod = job("own-prod", "a", 1, "prod", at=now_ms())
    await store.insert_job(prod)
    decided = await passed(deps)
    assert [(e.data.job_id, e.data.reason) for e in of(decided, JobPreempted) if isinstance(e, JobPreempted)] == [
        (oppo.id, "priority oppo < prod (opportunistic)")], "the oppo job goes, the test job stays"
