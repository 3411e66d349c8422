"""The store against the real MongoDB-wire server: uniqueness, conditional updates, queries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.admission.validation import Accepted, validate_job_config
from shared.db.store import Store, open_store
from shared.errors import JobExistsError
from shared.records import JobRecord, JobState, PreemptedBy, SubState, initial_tasks, job_id_of
from shared.scheduling.queueing import QueueEntry, Share
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("store_")) as s:
        yield s


def make_job(user: str, name: str, created: int, tasks: int = 2) -> JobRecord:
    result = validate_job_config({"jobName": name, "image": "i",
                                  "taskRoles": [{"name": "r", "taskNumber": tasks, "command": "c"}]})
    assert isinstance(result, Accepted)
    return JobRecord(id=job_id_of(user, name), user=user, name=name, virtual_cluster="default",
                     config=result.config, raw_config=result.raw, created_ms=created,
                     tasks=initial_tasks(result.config))


async def test_a_job_name_is_unique_per_user(store: Store) -> None:
    await store.insert_job(make_job("alice", "j", 1))
    await store.insert_job(make_job("bob", "j", 2))
    with pytest.raises(JobExistsError):
        await store.insert_job(make_job("alice", "j", 3))
    assert [j.user for j in (await store.list_jobs()).jobs] == ["bob", "alice"]
    assert [j.id for j in (await store.list_jobs(user="alice")).jobs] == ["alice~j"]


async def test_round_trip_keeps_the_config(store: Store) -> None:
    job = make_job("alice", "round", 5)
    await store.insert_job(job)
    again = await store.get_job(job.id)
    assert again == job


async def test_a_job_stopped_meanwhile_is_not_placed_by_a_batch(store: Store) -> None:
    kept, stopped = make_job("a", "kept", 1), make_job("a", "stopped", 2)
    for job in (kept, stopped):
        await store.insert_job(job)
    await store.update_job(stopped.id, {}, {"state": JobState.STOPPED.value, "sub_state": "completed"})
    placed = await store.commit_placements([(kept, kept.tasks), (stopped, stopped.tasks)])
    assert [j.id for j in placed] == [kept.id]
    after = await store.get_job(stopped.id)
    assert after is not None and after.state == JobState.STOPPED


async def test_waiting_reasons_are_written_in_one_batch(store: Store) -> None:
    jobs = [make_job("a", f"w{i}", i) for i in range(3)]
    for job in jobs:
        await store.insert_job(job)
    await store.set_waiting_reasons([(job, f"reason {i}", False) for i, job in enumerate(jobs)])
    again = [await store.get_job(j.id) for j in jobs]
    assert [j.reason for j in again if j] == ["reason 0", "reason 1", "reason 2"]
    assert sorted(await store.queue_order()) == [QueueEntry(j.id, j.virtual_cluster, j.created_ms, j.user, 10)
                                                 for j in jobs], "test: priority 10 (no class given)"


async def test_the_queue_order_reads_each_jobs_priority_class_and_the_shares_round_trip(store: Store) -> None:
    job = make_job("a", "urgent", 5)
    job = job.model_copy(update={"config": job.config.model_copy(update={
        "extras": {"hivedScheduler": {"jobPriorityClass": "prod"}}})})
    await store.insert_job(job)
    assert [e.priority for e in await store.queue_order() if e.job_id == job.id] == [100]
    assert await store.queue_shares() == {}
    shares = {"default": {"a": Share(0.25, 0.5), "b.c": Share(1.0, 0.0)}, "team": {"a": Share(0.0, 0.0)}}
    await store.set_queue_shares(shares)
    assert await store.queue_shares() == shares


async def test_queued_and_placed_jobs(store: Store) -> None:
    older, newer = make_job("a", "older", 10), make_job("a", "newer", 20)
    await store.insert_job(newer)
    await store.insert_job(older)
    assert [j.name for j in await store.queued_jobs()] == ["older", "newer"]
    [placed] = await store.commit_placements([(older, older.tasks)])
    assert placed.id == older.id and placed.sub_state == "starting" and placed.version == older.version + 1
    assert await store.commit_placements([(older, older.tasks)]) == [], "a job is placed once"
    assert [j.name for j in await store.queued_jobs()] == ["newer"]
    assert [j.name for j in await store.placed_jobs()] == ["older"]
    await store.update_job(older.id, {"state": JobState.WAITING.value}, {"state": JobState.SUCCEEDED.value})
    assert await store.placed_jobs() == []


async def test_a_preemption_is_marked_only_on_the_attempt_it_was_decided_for(store: Store) -> None:
    running = [make_job("v", name, i).model_copy(update={"state": JobState.RUNNING, "sub_state": SubState.RUNNING})
               for i, name in enumerate(("victim", "moved-on", "stopping", "marked"))]
    for job in running:
        await store.insert_job(job)
    await store.update_job(running[1].id, {}, {"attempt": 1})  # its attempt ended and a new one was queued
    await store.update_job(running[2].id, {}, {"stop_requested_by": "v"})  # its user is stopping it
    other = PreemptedBy(attempt=0, by="w~other", by_vc="a", by_priority="prod", why="earlier", at_ms=1)
    await store.update_job(running[3].id, {}, {"preempted": other.model_dump(mode="json")})

    def mark(job: JobRecord) -> tuple[JobRecord, PreemptedBy, tuple[str, ...]]:
        return job, PreemptedBy(attempt=0, by="w~boss", by_vc="a", by_priority="prod",
                                why="borrowed capacity of vc a", at_ms=5), ("w~boss",)

    marked = await store.mark_preempted([mark(j) for j in running])
    assert [j.name for j in marked] == ["victim"]
    victim = await store.get_job(running[0].id)
    assert victim is not None and victim.preempted is not None and victim.preempted.by == "w~boss"
    assert victim.preempted_by == ("w~boss",) and victim.version == running[0].version + 1
    assert sorted(j.name for j in await store.jobs_to_preempt()) == ["marked", "victim"]
    again = await store.mark_preempted([mark(running[0])])
    assert again == [], "one decision per attempt: a second one leaves the first in place"
