"""The largest job paiq accepts, through the store against the real MongoDB-wire server: stored packed (a
small document the server copies without decoding its bulk), placed, changed and read back exactly; the
queue reads its priority class; a document an older paiq wrote plain is read, placed and turns packed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import bson
import pytest

from shared.db.store import Store, encoded_job, open_store
from shared.jobconfig.validation import Accepted, validate_job_config
from shared.records import PACKED_CONFIG, PACKED_TASKS, JobRecord, TaskState, initial_tasks
from shared.settings.model import Settings
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROLES, TASKS = 2, 2245  # tests/benchmarks/worst_job.py's allowed job: the largest whose environment fits


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("bigdoc_")) as s:
        yield s


def worst_job(name: str, created: int, priority: str = "prod") -> JobRecord:
    """4,490 tasks and 1 MB of ``extras`` of 9,400 empty lists: the most values a body may hold."""
    raw = {"jobName": name, "image": "i", "virtualCluster": "default",
           "taskRoles": [{"name": f"r{i}", "taskNumber": TASKS, "cpuNumber": 1, "memoryMB": 128, "command": "c"}
                         for i in range(ROLES)],
           "extras": {"hivedScheduler": {"jobPriorityClass": priority}, "v": [[]] * 9400,
                      "pad": ["p" * 10_000] * 70}}
    result = validate_job_config(raw, Settings.from_env({}).job_limits)
    assert isinstance(result, Accepted), result
    return JobRecord(id=f"u~{name}~00000000", user="u", name=name, virtual_cluster="default", config=result.config,
                     raw_config=result.raw, created_ms=created, tasks=initial_tasks(result.config))


async def test_the_worst_job_is_stored_small_and_read_back_exactly(store: Store) -> None:
    job = worst_job("worst", 1)
    document = encoded_job(job)
    assert len(document.raw) < 100_000 and len(bson.encode(job.to_document(packed=False))) > 2_000_000
    await store.insert_job(job, document)
    assert await store.get_job(job.id) == job
    assert await store.find_job("u", "worst") == job
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and {PACKED_CONFIG, PACKED_TASKS} <= set(raw) and "tasks" not in raw
    assert [(e.job_id, e.priority) for e in await store.queue_order()] == [(job.id, 100)], "prod, from the stub"
    [summary] = (await store.list_jobs()).jobs
    assert (summary.task_count, summary.role_count) == (ROLES * TASKS, ROLES)


async def test_the_worst_job_is_placed_changed_and_found_on_its_nodes(store: Store) -> None:
    job = worst_job("placed", 1)
    await store.insert_job(job, encoded_job(job))
    tasks = tuple(t.model_copy(update={"node_id": f"n{t.index % 50}", "ip": "10.0.0.3", "ports": {"ssh": (20000,)}})
                  for t in job.tasks)
    [placed] = await store.commit_placements([(job, tasks)])
    assert placed.tasks == tasks and placed.config == job.config and placed.raw_config == job.raw_config
    assert [j.id for j in await store.jobs_on_node("n7")] == [job.id]
    running = placed.model_copy(update={"tasks": tuple(t.model_copy(update={"state": TaskState.RUNNING})
                                                       for t in placed.tasks)})
    assert await store.replace_job(running, placed.version)
    assert await store.get_job(job.id) == running.model_copy(update={"version": placed.version + 1})
    ended = [t.model_copy(update={"state": TaskState.SUCCEEDED, "exit_code": 0}).model_dump(mode="json")
             for t in running.tasks]
    changed = await store.update_job(job.id, {}, {"tasks": ended})
    assert changed is not None and {t.state for t in changed.tasks} == {TaskState.SUCCEEDED}
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and "tasks" not in raw and raw["holds"] is True, "holds is the writer's to change"
    with pytest.raises(ValueError, match="configs never change"):
        await store.update_job(job.id, {}, {"raw_config": {}})


async def test_a_document_written_plain_is_read_placed_and_then_packed(store: Store) -> None:
    job = worst_job("older", 1, priority="test")
    await store.jobs.insert_one(job.to_document(packed=False))  # as paiq wrote every job before packing
    assert await store.get_job(job.id) == job
    assert [e.priority for e in await store.queue_order()] == [10]
    tasks = tuple(t.model_copy(update={"node_id": "n1", "ip": "10.0.0.1"}) for t in job.tasks)
    [placed] = await store.commit_placements([(job, tasks)])
    assert placed.tasks == tasks
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and PACKED_TASKS in raw and "tasks" not in raw
    assert PACKED_CONFIG not in raw and "raw_config" in raw, "the configs stay as they were written"
    assert await store.replace_job(placed, placed.version)
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and PACKED_CONFIG in raw and "raw_config" not in raw, "rewritten whole: packed"
    again = await store.get_job(job.id)
    assert again is not None and again.raw_config == job.raw_config and again.tasks == tasks
