"""docs, Scheduling: "each pass gives up to PAIQ_PREEMPTIONS_PER_PASS (4; 0 turns preemption off) of the
jobs still waiting ... a chance to make room", and the borrowing and preemption metrics the scheduler
exports: ``paiq_vc_borrowed{vc,resource}``, ``paiq_vc_lent{vc,resource}``,
``paiq_preemptions_total{vc,by_vc}`` and ``paiq_scheduler_preemption_seconds``.

Through the scheduler's real passes against the MongoDB-wire server, on one node of 4 GPUs: VC a and VC
b each have half of it, b may borrow the other half; b's job of 4 GPUs borrows a's 2, then a's own job
of 2 GPUs wants them back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from services.scheduler.service import SchedulerDeps
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.events import JobPreempted, JobScheduled
from shared.records import JobRecord, JobState, now_ms
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from tests.infra import unique
from tests.integration.preemption_jobs import job, of, run
from tests.journalview import passed
from tests.unit.factories import make_node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HALF = Quota(cpus=50, memory=50, gpus=50)
README_PREEMPTIONS_PER_PASS = 4


class Cluster:
    def __init__(self, store: Store, a: str, b: str) -> None:
        self.store, self.a, self.b = store, a, b


@pytest.fixture
async def cluster(mongo_uri: str) -> AsyncIterator[Cluster]:
    a, b = unique("lender"), unique("borrower")  # names of this test alone: the metrics are the process's
    async with open_store(mongo_uri, unique("preemptset_")) as s:
        await s.upsert_node(make_node("n1", cpus=8, memory_mb=32768, gpus=["V100"] * 4))
        await s.put_vc(VirtualCluster(name=a, quota=HALF))
        await s.put_vc(VirtualCluster(name=b, quota=HALF, borrowing=HALF))
        yield Cluster(s, a, b)


def settings(**env: str) -> Settings:
    return Settings.from_env({"PAIQ_RECONCILE_SECONDS": "3600", "PAIQ_QUEUE_PREFIX": unique("q"), **env})



def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def borrowing_then_owner_waiting(c: Cluster, deps: SchedulerDeps) -> tuple[JobRecord, JobRecord]:
    """b's 4-GPU job runs (2 of them a's), then a's own 2-GPU job is queued; the pass that sees it is next."""
    borrower = job(unique("big"), c.b, 4, "prod", at=now_ms() - 60_000)
    await c.store.insert_job(borrower)
    assert [e.subject for e in of(await passed(deps), JobScheduled)] == [borrower.id]
    await run(c.store, borrower.id)
    owner = job(unique("own"), c.a, 2, "test", at=now_ms())
    await c.store.insert_job(owner)
    return borrower, owner


def test_the_shipped_bound_is_4_a_pass() -> None:
    assert Settings.from_env({}).preemptions_per_pass == README_PREEMPTIONS_PER_PASS


async def test_borrowing_and_preemption_are_exported(cluster: Cluster) -> None:
    c = cluster
    deps = SchedulerDeps(settings=settings(), store=c.store, bus=MemoryBus())
    rounds_before = sample("paiq_scheduler_preemption_seconds_count")
    _, owner = await borrowing_then_owner_waiting(c, deps)
    [preempted] = of(await passed(deps), JobPreempted)
    assert isinstance(preempted, JobPreempted) and preempted.data.by_job_id == owner.id
    assert sample("paiq_vc_borrowed", vc=c.b, resource="gpus") == 2, "b runs 2 GPUs beyond its quota"
    assert sample("paiq_vc_lent", vc=c.a, resource="gpus") == 2, "on a's idle 2"
    assert sample("paiq_vc_borrowed", vc=c.a, resource="gpus") == 0
    assert sample("paiq_vc_lent", vc=c.b, resource="gpus") == 0
    assert sample("paiq_preemptions_total", vc=c.b, by_vc=c.a) == 1, "b's job preempted for a's"
    assert sample("paiq_scheduler_preemption_seconds_count") > rounds_before, "the round was timed"


async def test_0_turns_preemption_off(cluster: Cluster) -> None:
    c = cluster
    deps = SchedulerDeps(settings=settings(PAIQ_PREEMPTIONS_PER_PASS="0"), store=c.store, bus=MemoryBus())
    rounds_before = sample("paiq_scheduler_preemption_seconds_count")
    borrower, owner = await borrowing_then_owner_waiting(c, deps)
    for _ in range(2):
        events = await passed(deps)
        assert not of(events, JobPreempted) and not of(events, JobScheduled), events
    victim, waiting = await c.store.get_job(borrower.id), await c.store.get_job(owner.id)
    assert victim is not None and victim.preempted is None and victim.state == JobState.RUNNING
    assert waiting is not None and waiting.state == JobState.WAITING and "preempting" not in waiting.reason
    assert waiting.reason, "it waits saying why"
    assert sample("paiq_preemptions_total", vc=c.b, by_vc=c.a) == 0
    assert sample("paiq_scheduler_preemption_seconds_count") == rounds_before, "no round ran"
    assert sample("paiq_vc_borrowed", vc=c.b, resource="gpus") == 2, "borrowing is exported all the same"
