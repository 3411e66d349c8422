"""The status service's periodic pass against the real MongoDB-wire server: running jobs with nothing to decide are
read once (the listing), not again one by one; a job whose outcome is decided is concluded by it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.status.service import StatusDeps, reconcile, retry_policy
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.records import JobRecord, JobState, TaskState, now_ms
from shared.settings.model import Settings
from tests.infra import unique
from tests.integration.preemption_jobs import job, run
from tests.unit.factories import make_node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("reconcile_")) as s:
        await s.upsert_node(make_node("n1", cpus=64, memory_mb=262144, gpus=["V100"] * 8))
        yield s


async def test_a_pass_reads_running_jobs_once_and_concludes_only_the_decided_one(store: Store) -> None:
    t0 = now_ms() - 60_000
    running = [job(f"busy{i}", "default", 0, "prod", at=t0 + i) for i in range(20)]
    done = job("done", "default", 0, "prod", at=t0 + 100)
    for j in (*running, done):
        await store.insert_job(j)
        await run(store, j.id)
    # done's task exited 0 (its exit taken in) but the job was not concluded: a crash between two writes
    record = await store.get_job(done.id)
    assert record is not None
    finished = tuple(t.model_copy(update={"state": TaskState.SUCCEEDED, "exit_code": 0, "completed_ms": now_ms()})
                     for t in record.tasks)
    await store.update_job(done.id, {}, {"tasks": [t.model_dump(mode="json") for t in finished]})

    reads: list[str] = []
    real_get_job: Callable[[str], Awaitable[JobRecord | None]] = store.get_job

    async def counted(job_id: str) -> JobRecord | None:
        reads.append(job_id)
        return await real_get_job(job_id)

    store.get_job = counted  # type: ignore[method-assign]  # the real store, its reads by id counted
    settings = Settings.from_env({"PAIQ_QUEUE_PREFIX": unique("q")})
    deps = StatusDeps(settings=settings, store=store, bus=MemoryBus(), policy=retry_policy(settings))
    await reconcile(deps)
    assert reads == [done.id], "only the job with something to decide is read again (under its lock)"
    concluded = await real_get_job(done.id)
    assert concluded is not None and concluded.state == JobState.SUCCEEDED
    for j in running:
        still = await real_get_job(j.id)
        assert still is not None and still.state == JobState.RUNNING
