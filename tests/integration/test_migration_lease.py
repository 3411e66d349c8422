"""docs, History and scale (Upgrades): "an older database is migrated once, at the first service's start,
under a lease (the other services wait)".

Against the real MongoDB-wire server, with a database of schema version 2 (its deep pages' counts not
made yet): a service starting while another holds the migration lease waits, migrating nothing, until the
version says done; two services starting together migrate it once and both go on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from pymongo import AsyncMongoClient

from shared.db.indexes import SCHEMA_VERSION
from shared.db.store import Store
from shared.records import JobState, TaskState, now_ms
from tests.infra import unique
from tests.unit.factories import make_config, make_job, make_task, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAITING = "another service is migrating the job documents; waiting for it"
ROOT = Path(__file__).resolve().parents[2]
MIGRATING = "counting the stored jobs for deep pages (schema version 3); services wait for it"


@pytest.fixture
async def client(mongo_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    c: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    yield c
    await c.close()


async def old_database(client: AsyncMongoClient[dict[str, Any]]) -> str:
    """A database as an older paiq left it: ended jobs, schema version 2, no deep-page counts."""
    name = unique("migrate_")
    store = Store(client, name)
    await store.ensure_indexes()
    jobs = []
    for i in range(30):
        config = make_config(role_dict("main"), jobName=f"old{i}")
        job = make_job(config, user="mig", state=JobState.SUCCEEDED,
                       tasks=[make_task("main", 0, TaskState.SUCCEEDED, node_id="n1", ip="10.0.0.1")])
        jobs.append(job.model_copy(update={"created_ms": now_ms() - 1000 * (i + 1), "completed_ms": now_ms()}))
    await store.insert_jobs(jobs)
    await store.list_counts.col.delete_many({})
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 2}})
    return name


async def version(store: Store) -> int:
    doc = await store.meta.find_one({"_id": "schema"})
    return int((doc or {}).get("version", 0))


async def until(found: Callable[[], bool], limit_s: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not found():
        assert asyncio.get_running_loop().time() < deadline, f"not within {limit_s} s"
        await asyncio.sleep(0.05)


def said(logs: list[dict[str, Any]], event: str) -> int:
    return sum(1 for line in logs if line.get("event") == event)


async def test_a_service_starting_while_another_migrates_waits_for_it(
        client: AsyncMongoClient[dict[str, Any]]) -> None:
    name = await old_database(client)
    store = Store(client, name)
    assert await store.hold_lease("schema-migration", "the-first-service", 60_000), "another service migrates"
    with structlog.testing.capture_logs() as logs:
        starting = asyncio.create_task(store.ensure_indexes())
        await until(lambda: said(logs, WAITING) == 1 or starting.done())
        assert not starting.done(), "it waits while the lease is held"
        await asyncio.sleep(1.2)  # a poll or two of the schema version while waiting
        assert not starting.done() and await version(store) == 2, "it migrates nothing meanwhile"
        assert await store.list_counts.col.count_documents({}) == 0 and said(logs, MIGRATING) == 0
        # the first service finishes: the version says done and the lease goes
        await store.meta.update_one({"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION}})
        await store.release_lease("schema-migration", "the-first-service")
        await asyncio.wait_for(starting, 10)
    assert said(logs, MIGRATING) == 0, "the waiting service never migrated"


# One service's start, as its own process (the lease's holder is the host and process id).
START = """
import asyncio, sys
from pymongo import AsyncMongoClient
from shared.db.store import Store

async def main() -> None:
    client = AsyncMongoClient(sys.argv[1])
    await Store(client, sys.argv[2]).ensure_indexes()
    await client.close()

asyncio.run(main())
"""


async def start_in_own_process(uri: str, database: str) -> str:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", START, uri, database, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 40)
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


async def test_services_starting_together_migrate_once_and_all_go_on(
        client: AsyncMongoClient[dict[str, Any]], mongo_uri: str) -> None:
    name = await old_database(client)
    outputs = await asyncio.gather(*(start_in_own_process(mongo_uri, name) for _ in range(3)))
    migrated = [MIGRATING in out for out in outputs]
    assert migrated.count(True) == 1, f"one service migrates (the others wait for it, or start after): {outputs}"
    store = Store(client, name)
    assert await version(store) == SCHEMA_VERSION
    assert await store.list_counts.col.count_documents({}) > 0, "the deep pages' counts were made"
    assert await store.leases.count_documents({"_id": "schema-migration"}) == 0, "the lease was given back"
