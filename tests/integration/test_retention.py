"""docs, History and scale: "Retention (PAIQ_JOB_RETENTION_DAYS, off by default): the status service
deletes jobs ended longer ago, with their attempts, logs and runs, 100 at a time with pauses between, at
most 2,000 a minute; a job whose containers still stop is kept until they are gone."

The pacing is asserted with the docs' numbers (100 a batch, 2,000 a minute: a pass of at most 2,000
every 60 s or more), the cascade against the real MongoDB-wire server, and the loop's wiring through the
status service's own start. (Batches, the recent jobs kept and the one still stopping: test_store_queries.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, cast

import pytest

import services.status.service as status_service
from services.status.service import StatusDeps, remove_expired, retry_policy, start_status
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.records import JobState, TaskState, now_ms
from shared.settings.model import Settings
from tests.infra import unique
from tests.integration.recordingvitals import RecordingVitals
from tests.unit.factories import make_config, make_job, make_task, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DAY_MS = 86_400_000
README_BATCH = 100
README_PER_MINUTE = 2_000


def settings(**env: str) -> Settings:
    return Settings.from_env({"PAIQ_QUEUE_PREFIX": unique("ret"), **env})


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("retention_")) as s:
        yield s


# --- pacing -----------------------------------------------------------------------------------------------

class ExpiredOnly:
    """A store holding ``count`` expired jobs: what retention asks of it, recorded."""

    def __init__(self, count: int) -> None:
        self.left = [f"u~old{i}~{i:08x}" for i in range(count)]
        self.asked: list[int] = []
        self.deleted = 0

    async def expired_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        self.asked.append(limit)
        return self.left[:limit]

    async def delete_job(self, job_id: str) -> bool:
        self.left.remove(job_id)
        self.deleted += 1
        return True


async def test_retention_deletes_100_at_a_time_with_pauses_and_at_most_2000_a_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(status_service.asyncio, "sleep", pause)
    fake = ExpiredOnly(2 * README_PER_MINUTE + 50)
    deps = StatusDeps(settings=settings(PAIQ_JOB_RETENTION_DAYS="7"), store=cast(Store, fake), bus=MemoryBus(),
                      policy=retry_policy(settings()))
    assert await remove_expired(deps) == README_PER_MINUTE, "one pass deletes at most 2,000"
    assert fake.asked == [README_BATCH] * (README_PER_MINUTE // README_BATCH), "100 at a time"
    assert len(pauses) >= len(fake.asked) - 1 and all(p > 0 for p in pauses), "a pause between batches"
    pauses.clear()
    fake.asked.clear()
    assert await remove_expired(deps) == README_PER_MINUTE
    assert await remove_expired(deps) == 50, "the rest at the next pass"
    assert fake.asked[-1] == README_BATCH and not fake.left



@pytest.mark.parametrize("reconcile", ["1", "10"])
async def test_the_retention_pass_runs_at_most_once_a_minute_and_only_when_set(store: Store, reconcile: str) -> None:
    loops: dict[str, dict[str, float | None]] = {}
    for days in ("0", "7"):
        s = settings(PAIQ_JOB_RETENTION_DAYS=days, PAIQ_RECONCILE_SECONDS=reconcile)
        vitals = RecordingVitals()
        async with AsyncExitStack() as stack:
            await start_status(stack, StatusDeps(settings=s, store=store, bus=MemoryBus(), policy=retry_policy(s),
                                                 vitals=vitals))
        loops[days] = vitals.loops
    assert not [name for name in loops["0"] if "retention" in name], f"off by default: {loops['0']}"
    [(name, period)] = [(n, p) for n, p in loops["7"].items() if "retention" in n]
    assert period is not None and period >= 60, f"{name} every {period} s: more than 2,000 a minute"


# --- the cascade ------------------------------------------------------------------------------------------

def ended(name: str, completed_ms: int) -> Any:
    config = make_config(role_dict("main", taskNumber=2), jobName=name)
    tasks = [make_task("main", i, TaskState.SUCCEEDED, node_id="n1", ip="10.0.0.1") for i in range(2)]
    job = make_job(config, user="ret", tasks=tasks, state=JobState.SUCCEEDED)
    return job.model_copy(update={"completed_ms": completed_ms, "attempt": 1})


async def put_everything_of(store: Store, job_id: str) -> None:
    """What a job leaves besides its document: an earlier attempt, its key pair, each task's run, log
    chunks and profile (as the services write them: keyed by the job's id)."""
    db = store.jobs.database
    await db["job_attempts"].insert_one({"_id": f"{job_id}/0", "job_id": job_id, "attempt": 0, "exit_code": 3})
    await db["job_keys"].insert_one({"_id": job_id, "private": "x", "public": "y"})
    for attempt in (0, 1):
        for index in (0, 1):
            run = f"{job_id}/{attempt}/main/{index}"
            await db["task_runs"].insert_one({"_id": run, "job_id": job_id, "attempt": attempt})
            await db["task_log_chunks"].insert_one({"run": run, "seq": 0, "lines": []})
            await db["task_profiles"].insert_one({"_id": run, "job_id": job_id, "attempt": attempt})


async def left_of(store: Store, job_id: str) -> dict[str, int]:
    db = store.jobs.database
    runs = [f"{job_id}/{a}/main/{i}" for a in (0, 1) for i in (0, 1)]
    counts = {name: await db[name].count_documents({"job_id": job_id})
              for name in ("job_attempts", "task_runs", "task_profiles")}
    counts["jobs"] = await db["jobs"].count_documents({"_id": job_id})
    counts["job_keys"] = await db["job_keys"].count_documents({"_id": job_id})
    counts["task_log_chunks"] = await db["task_log_chunks"].count_documents({"run": {"$in": runs}})
    return counts


async def test_retention_removes_a_job_with_its_attempts_keys_logs_runs_and_profiles(store: Store) -> None:
    now = now_ms()
    old, recent = ended("old", now - 10 * DAY_MS), ended("recent", now - DAY_MS)
    await store.insert_jobs([old, recent])
    for job in (old, recent):
        await put_everything_of(store, job.id)
    everything = {"jobs": 1, "job_attempts": 1, "job_keys": 1, "task_runs": 4, "task_log_chunks": 4,
                  "task_profiles": 4}
    assert await left_of(store, old.id) == everything, "the test's documents are where the services look"
    s = settings(PAIQ_JOB_RETENTION_DAYS="7")
    assert await remove_expired(StatusDeps(settings=s, store=store, bus=MemoryBus(), policy=retry_policy(s))) == 1
    assert await left_of(store, old.id) == dict.fromkeys(everything, 0), "nothing of the old job is left"
    assert await left_of(store, recent.id) == everything, "a job within its retention keeps everything"
