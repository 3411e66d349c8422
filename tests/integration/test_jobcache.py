"""The scheduler's decoded jobs between passes (shared/db/jobcache.py), against the real MongoDB-wire server:
a read of jobs that did not change reads none whole and returns the same records; a job written since (its
version moved) is read whole again and returned as written; one that no longer matches is dropped."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.db.jobcache import JobCache
from shared.db.store import Store, open_store
from shared.records import JobState, TaskState
from tests.infra import unique
from tests.unit.factories import make_config, make_job, make_task

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("jobcache_")) as s:
        await s.ensure_indexes()
        yield s


async def test_a_pass_reads_whole_only_the_jobs_that_changed(store: Store) -> None:
    jobs = [make_job(make_config(jobName=unique("hold")), user="u", tasks=[make_task(node_id="n1", ip="10.0.0.1")])
            for _ in range(5)]
    await store.insert_jobs(jobs)
    cache = JobCache()
    first = await store.jobs_holding_resources(cache)
    assert sorted(j.id for j in first) == sorted(j.id for j in jobs) and cache.read_whole == 5
    again = await store.jobs_holding_resources(cache)
    assert cache.read_whole == 5, "jobs read whole though none changed"
    assert {j.id: j for j in again} == {j.id: j for j in first}

    changed = next(j for j in first if j.id == jobs[1].id)
    renamed = changed.model_copy(update={"reason": "written since"})
    assert await store.replace_job(renamed, changed.version)
    ended = next(j for j in first if j.id == jobs[3].id)
    done = ended.model_copy(update={"state": JobState.SUCCEEDED, "tasks": (
        make_task(state=TaskState.SUCCEEDED, node_id="n1", ip="10.0.0.1", exit_code=0),)})
    assert await store.replace_job(done, ended.version)
    after = {j.id: j for j in await store.jobs_holding_resources(cache)}
    assert cache.read_whole == 6, "only the job whose version moved is read whole again (the ended one is gone)"
    assert set(after) == {j.id for j in jobs} - {jobs[3].id}
    assert after[jobs[1].id].reason == "written since" and after[jobs[1].id].version == changed.version + 1
    assert after == {j.id: j for j in await store.jobs_holding_resources()}, "the same as a read without it"


async def test_a_job_deleted_between_the_two_reads_is_left_out_not_its_old_record(store: Store) -> None:
    """A job written (its version moved) and then deleted between the read of the versions and the read of the
    jobs whole: the pass does not get the record it held from before."""
    job = make_job(make_config(jobName=unique("gone")), user="u", tasks=[make_task(node_id="n1", ip="10.0.0.1")])
    await store.insert_job(job)
    cache = JobCache()
    [held] = await store.jobs_holding_resources(cache)
    assert await store.replace_job(held.model_copy(update={"reason": "moved on"}), held.version)
    get_jobs = store.get_jobs

    async def deleted_meanwhile(job_ids: list[str]) -> dict[str, object]:
        await store.jobs.delete_one({"_id": job.id})
        return await get_jobs(job_ids)  # type: ignore[return-value]

    store.get_jobs = deleted_meanwhile  # type: ignore[method-assign,assignment]
    assert await store.jobs_holding_resources(cache) == []
