"""The status service keeps each job as it last wrote it, against the real MongoDB-wire server: a running job's
next events are folded without reading it again; a kept record another writer made stale costs a read, never a
lost or misapplied event; and a task's exit and the retry it makes due are one write."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.status.service import KNOWN_JOBS, _keep, on_task_exited
from shared.db.store import Store, open_store
from shared.events import TaskExited, TaskExitedData
from shared.records import JobRecord, JobState, SubState, TaskRecord, TaskState, now_ms
from tests.infra import unique
from tests.integration.statusdeps import status_deps
from tests.unit.factories import make_config, make_job, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("kept_")) as s:
        yield s


def running(tasks: int = 2, **config: object) -> JobRecord:
    cfg = make_config(role_dict("main", taskNumber=tasks), jobName=unique("j"), **config)
    records = [TaskRecord(role="main", index=i, state=TaskState.RUNNING, node_id="n1", ip="10.0.0.1",
                          container_id=f"c{i}", started_ms=now_ms()) for i in range(tasks)]
    job = make_job(cfg, user="alice", tasks=records, state=JobState.RUNNING)
    return job.model_copy(update={"id": f"alice~{cfg.job_name}", "launched_ms": now_ms(),
                                  "sub_state": SubState.RUNNING})


def exited(job: JobRecord, index: int, code: int = 0) -> TaskExited:
    return TaskExited(subject=job.id, data=TaskExitedData(job_id=job.id, attempt=job.attempt, role="main",
                                                          index=index, node_id="n1", exit_code=code,
                                                          container_id=f"c{index}"))


def count_reads(store: Store) -> list[str]:
    """The real store, its reads of a job by id recorded."""
    reads: list[str] = []
    real: Callable[[str], Awaitable[JobRecord | None]] = store.get_job

    async def counted(job_id: str) -> JobRecord | None:
        reads.append(job_id)
        return await real(job_id)

    store.get_job = counted  # type: ignore[method-assign]
    return reads


async def test_a_running_jobs_next_events_are_folded_without_reading_it(store: Store) -> None:
    job = running(tasks=3)
    await store.insert_job(job)
    d = status_deps(store)
    reads = count_reads(store)
    await on_task_exited(exited(job, 0), d)
    await on_task_exited(exited(job, 1), d)
    await on_task_exited(exited(job, 2), d)
    assert reads == [job.id], "read for its first event only"
    done = await store.get_job(job.id)
    assert done is not None and done.state == JobState.SUCCEEDED and done.sub_state == SubState.COMPLETED
    assert [t.state for t in done.tasks] == [TaskState.SUCCEEDED] * 3
    assert job.id not in d.known, "a job done is not kept"


async def test_a_kept_record_made_stale_by_another_writer_costs_one_read(store: Store) -> None:
    job = running(tasks=2)
    await store.insert_job(job)
    d = status_deps(store)
    await on_task_exited(exited(job, 0), d)
    assert d.known[job.id].version == (await store.get_job(job.id) or job).version, "kept as stored"
    await store.update_job(job.id, {}, {"reason": "changed by another writer"})  # moves its version
    reads = count_reads(store)
    await on_task_exited(exited(job, 1), d)
    assert reads == [job.id], "the write over the kept version missed: read again, then written"
    done = await store.get_job(job.id)
    assert done is not None and done.state == JobState.SUCCEEDED
    assert [t.exit_code for t in done.tasks] == [0, 0]


async def test_an_event_the_kept_record_calls_for_nothing_is_judged_on_the_job_as_stored(store: Store) -> None:
    """A kept record that is wrong (here planted: task 1 shown ended) cannot make the service drop an event."""
    job = running(tasks=2)
    await store.insert_job(job)
    d = status_deps(store)
    await on_task_exited(exited(job, 0), d)
    kept = d.known[job.id]
    d.known[job.id] = kept.model_copy(update={"tasks": tuple(
        t.model_copy(update={"state": TaskState.SUCCEEDED, "exit_code": 0}) for t in kept.tasks)})
    reads = count_reads(store)
    await on_task_exited(exited(job, 1, code=3), d)
    assert reads == [job.id]
    done = await store.get_job(job.id)
    assert done is not None and done.state == JobState.FAILED and done.tasks[1].exit_code == 3


async def test_a_job_ended_before_its_last_task_is_kept_counted_and_counted_once(store: Store) -> None:
    """Task 0 fails the job while task 1 still runs (the job ended, its tasks stopping): kept as counted, so
    the write of task 1's exit does not count it again or read its usage for nothing."""
    job = running(tasks=2)
    await store.insert_job(job)
    d = status_deps(store)
    await on_task_exited(exited(job, 0, code=3), d)
    ended = await store.get_job(job.id)
    assert ended is not None and ended.state == JobState.FAILED and ended.sub_state != SubState.COMPLETED, ended
    assert ended.counted and d.known[job.id].counted and d.known[job.id].version == ended.version
    await on_task_exited(exited(job, 1, code=143), d)
    done = await store.get_job(job.id)
    assert done is not None and done.sub_state == SubState.COMPLETED and done.counted
    assert (await store.tallies.by_vc())["default"]["FAILED"] == 1
    assert await store.count_jobs(user="alice") == 1


async def test_an_exit_that_makes_a_retry_due_is_one_write_with_its_events_in_order(store: Store) -> None:
    job = running(tasks=1, retryCount=1)
    await store.insert_job(job)
    d = status_deps(store, PAIQ_RETRY_BACKOFF_MS="0")
    before = await store.get_job(job.id)
    assert before is not None
    await on_task_exited(exited(job, 0, code=1), d)
    again = await store.get_job(job.id)
    assert again is not None and again.state == JobState.WAITING and again.attempt == 1, again
    assert again.version == before.version + 1, "the exit and the requeue in one write"
    assert [a.attempt for a in await store.attempts_of(job.id)] == [0]
    in_order = store.journal.entries.find({"job": job.id}).sort([("v", 1), ("n", 1)])
    entries = [(e["v"], e["type"]) async for e in in_order]
    ours = [(v, t) for v, t in entries if t in ("job.retrying", "job.requeued")]
    assert ours == [(again.version, "job.retrying"), (again.version, "job.requeued")], entries


def test_the_kept_jobs_are_bounded_the_oldest_let_go_first() -> None:
    kept = status_deps(None)  # type: ignore[arg-type]  # bookkeeping only: the store is never asked
    jobs = [running(tasks=1) for _ in range(KNOWN_JOBS + 5)]
    for j in jobs:
        _keep(kept, j)
    assert len(kept.known) == KNOWN_JOBS
    assert list(kept.known) == [j.id for j in jobs[5:]]
    _keep(kept, jobs[-1].model_copy(update={"state": JobState.SUCCEEDED, "sub_state": SubState.COMPLETED}))
    assert jobs[-1].id not in kept.known, "a job done is let go"
