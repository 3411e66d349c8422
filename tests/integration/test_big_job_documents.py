"""The largest job paiq accepts, through the store against the real MongoDB-wire server: stored packed, its
configs in a document of their own (a small job document the server copies without decoding its bulk),
placed, changed, rewritten and read back exactly; the queue reads its priority class; deleted with its
configs; a document an older paiq wrote plain (or packed whole) is read, placed and its tasks packed."""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator

import bson
import pytest

from shared.admission.validation import Accepted, validate_job_config
from shared.db.store import Store, open_store
from shared.db.submission import encoded_job
from shared.records import CONFIGS_APART, PACKED_CONFIG, PACKED_TASKS, JobRecord, TaskState, initial_tasks
from shared.settings.model import Settings
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROLES, TASKS = 2, 2245  # tests/benchmarks/worst_job.py's allowed job: the largest whose environment fits


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("bigdoc_")) as s:
        yield s


def worst_job(name: str, created: int, priority: str = "prod", *, random_text: bool = False) -> JobRecord:
    """4,490 tasks and 1 MB of ``extras`` of 9,400 empty lists (the most values a body may hold), or of
    random letters (what zlib shrinks least)."""
    rng = random.Random(name)
    pad = ["".join(rng.choices(string.ascii_letters, k=10_000)) if random_text else "p" * 10_000 for _ in range(70)]
    raw = {"jobName": name, "image": "i", "virtualCluster": "default",
           "taskRoles": [{"name": f"r{i}", "taskNumber": TASKS, "cpuNumber": 1, "memoryMB": 128, "command": "c"}
                         for i in range(ROLES)],
           "extras": {"hivedScheduler": {"jobPriorityClass": priority}, "v": [[]] * 9400, "pad": pad}}
    result = validate_job_config(raw, Settings.from_env({}).job_limits)
    assert isinstance(result, Accepted), result
    return JobRecord(id=f"u~{name}~00000000", user="u", name=name, virtual_cluster="default", config=result.config,
                     raw_config=result.raw, created_ms=created, tasks=initial_tasks(result.config))


@pytest.mark.parametrize("random_text", [False, True], ids=["lists", "random-text"])
async def test_the_worst_job_is_stored_small_and_read_back_exactly(store: Store, random_text: bool) -> None:
    job = worst_job("worst", 1, random_text=random_text)
    document = encoded_job(job)
    assert document.configs is not None and len(bson.encode(job.to_document(packed=False))) > 2_000_000
    assert len(document.job.raw) < 20_000, "the job's document: its tasks packed, its configs apart"
    await store.insert_job(job, document)
    assert await store.get_job(job.id) == job
    assert await store.find_job("u", "worst") == job
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and PACKED_TASKS in raw and raw[CONFIGS_APART] is True
    assert not {"tasks", "raw_config", PACKED_CONFIG} & set(raw)
    configs = await store.job_configs.find_one({"_id": job.id})
    assert configs is not None and PACKED_CONFIG in configs
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
    assert await store.delete_job(job.id)
    assert await store.job_configs.find_one({"_id": job.id}) is None, "deleted with the job"
    assert await store.get_job(job.id) is None


async def test_many_big_jobs_are_read_whole_with_their_configs_in_one_query(store: Store) -> None:
    small = worst_job("small", 1).model_copy(update={"raw_config": {"jobName": "small"}})
    jobs = [worst_job(f"big{i}", 2 + i, random_text=i % 2 == 1) for i in range(3)]
    await store.insert_jobs([small.model_copy(update={"config": small.config.model_copy(
        update={"extras": {}})}), *jobs])
    queued = await store.queued_jobs()
    assert [j.id for j in queued] == [small.id, *(j.id for j in jobs)]
    assert [j.raw_config for j in queued[1:]] == [j.raw_config for j in jobs]
    assert await store.job_configs.count_documents({}) == 3, "the small job's configs stay in its document"


async def test_a_document_written_plain_is_read_placed_and_its_tasks_packed(store: Store) -> None:
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
    assert raw is not None and PACKED_CONFIG not in raw and "raw_config" in raw, "a rewrite leaves the configs"
    again = await store.get_job(job.id)
    assert again is not None and again.raw_config == job.raw_config and again.tasks == tasks


async def test_a_document_packed_whole_by_an_older_paiq_is_read_and_rewritten(store: Store) -> None:
    job = worst_job("packed-whole", 1)
    await store.jobs.insert_one(job.to_document())  # configs packed in the job's document (schema 3)
    assert await store.get_job(job.id) == job
    tasks = tuple(t.model_copy(update={"node_id": "n1", "ip": "10.0.0.1"}) for t in job.tasks)
    [placed] = await store.commit_placements([(job, tasks)])
    assert await store.replace_job(placed, placed.version)
    raw = await store.jobs.find_one({"_id": job.id})
    assert raw is not None and PACKED_CONFIG in raw and CONFIGS_APART not in raw
    assert await store.get_job(job.id) == placed.model_copy(update={"version": placed.version + 1})
