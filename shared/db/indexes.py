"""The database's shape: every index the services' queries use, and the migration of older data.

Each index names the queries it serves; a query that no index serves is a bug (tests/integration/
test_store_queries.py asks the server's ``explain`` for every query the services run). ``meta.schema``
records the version of the documents' shape; a database of an older version is migrated once, by the
first service to start, under a lease, while the others wait.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import structlog
from pymongo import ASCENDING, DESCENDING, UpdateOne

from shared.db.usage import MARK
from shared.errors import StoreError
from shared.keywords import name_keys
from shared.records import ACTIVE_JOB_STATES, AttemptRecord, JobRecord

if TYPE_CHECKING:
    from shared.db.jobreads import JobReads

log = structlog.get_logger("paiq.store")

SCHEMA_VERSION = 6
MIGRATION_LEASE_MS = 60_000
BACKFILL_CHUNK = 500  # ended jobs read whole and added in one transaction by the usage backfill (version 6)
OBSOLETE_INDEXES = ("created_ms_-1", "user_1_created_ms_-1", "state_1_sub_state_1_created_ms_1")
Doc = dict[str, Any]


async def ensure_schema(store: JobReads) -> None:
    fresh = "jobs" not in await store.jobs.database.list_collection_names()
    await _create_indexes(store)
    await _migrate(store, fresh)


async def _create_indexes(store: JobReads) -> None:
    jobs = store.jobs
    # find_job, and a name is unique per user
    await jobs.create_index([("user", ASCENDING), ("name", ASCENDING)], unique=True)
    # the lists, newest first: all jobs, one user's, one state's (and the active states' passes)
    await jobs.create_index([("created_ms", DESCENDING), ("_id", ASCENDING)])
    await jobs.create_index([("user", ASCENDING), ("created_ms", DESCENDING), ("_id", ASCENDING)])
    await jobs.create_index([("state", ASCENDING), ("created_ms", DESCENDING), ("_id", ASCENDING)])
    # one user's jobs in one state (?username=U&state=S, /user/U/jobs?state=S): without it the server reads
    # all of the user's jobs in each window and keeps those in the state, a cost that grows with their history
    await jobs.create_index([("user", ASCENDING), ("state", ASCENDING), ("created_ms", DESCENDING),
                             ("_id", ASCENDING)], name="user_state_created")
    # GET /api/v2/jobs's vc filter, alone and with username and state: each combination one equality prefix
    for fields in (("virtual_cluster",), ("virtual_cluster", "user"), ("virtual_cluster", "state"),
                   ("virtual_cluster", "user", "state")):
        await jobs.create_index([*((f, ASCENDING) for f in fields), ("created_ms", DESCENDING), ("_id", ASCENDING)],
                                name="_".join(("vc", *fields[1:], "created")))
    # its keyword: the prefixes of a name and of its words (multikey; shared.keywords)
    await jobs.create_index([("name_keys", ASCENDING), ("created_ms", DESCENDING), ("_id", ASCENDING)],
                            name="name_keys_created")
    # its tagsContain (shared.db.tags)
    await jobs.create_index([("tags", ASCENDING), ("created_ms", DESCENDING), ("_id", ASCENDING)],
                            name="tags_created")
    # its orders by a field of few values (shared.db.listorder): each value's jobs newest first
    for field in ("retries", "task_count", "gpu_count", "job_priority"):
        await jobs.create_index([(field, ASCENDING), ("created_ms", DESCENDING), ("_id", ASCENDING)],
                                name=f"{field}_created")
    # the scheduler's pass: the queue without the jobs parked as never fitting (all equality, so the
    # server reads only those documents)
    await jobs.create_index([("state", ASCENDING), ("sub_state", ASCENDING), ("parked", ASCENDING)], name="queue")
    # what holds resources (the scheduler's pass, VC usage) and what is on a node (reconcile, node lost):
    # partial, so an ended job is not even in them
    await jobs.create_index([("holds", ASCENDING)], name="holding", partialFilterExpression={"holds": True})
    await jobs.create_index([("hold_nodes", ASCENDING)], name="holding_by_node",
                            partialFilterExpression={"holds": True})
    # jobs not yet in the tallies: the active ones, and an ended one for the moment its count is written
    await jobs.create_index([("counted", ASCENDING)], name="uncounted", partialFilterExpression={"counted": False})
    # retention: ended jobs by completion time (and GET /api/v2/jobs?order=completionTime's windows)
    await jobs.create_index([("completed_ms", ASCENDING)])
    await store.attempts.create_index([("job_id", ASCENDING), ("attempt", ASCENDING)])
    # store.job_configs (big jobs' configs, shared.records.JobRecord.documents) is read by _id alone
    await store.profiles.ensure_indexes()  # an attempt's task profiles (job detail, profile API, job removal)
    await store.usage.ensure_indexes()  # the usage rollups' days by user, by VC, all (the usage report)
    await store.notifications.ensure_indexes()  # subscriptions by owner, deliveries due and by owner, expiries
    await store.journal.ensure_indexes()  # the events: by number, waiting to be numbered, by time
    # sessions by expiry, submissions by Idempotency-Key (read by _id) by creation, kept a day
    # (shared.db.idempotency): removed by paiq a window at a time, not by TTL indexes (shared.db.expiry)
    await store.expiring.ensure_indexes()
    # a user's tokens, ended when their password changes or they are removed
    await store.tokens.create_index([("user", ASCENDING)], name="tokens_by_user")
    # whether an admin is left when one is demoted (services/submit/users.py)
    await store.users.create_index([("admin", ASCENDING)], name="users_by_admin")
    # a group's members: the users whose groups name it (services/submit/users.py; groups are read by _id)
    await store.users.create_index([("groups", ASCENDING)], name="users_by_group")
    existing = {str(ix["name"]) async for ix in await jobs.list_indexes()}
    for name in OBSOLETE_INDEXES:
        if name in existing:
            await jobs.drop_index(name)


async def _migrate(store: JobReads, fresh: bool) -> None:
    doc = await store.meta.find_one({"_id": "schema"})
    if doc is not None and int(doc.get("version", 0)) >= SCHEMA_VERSION:
        return
    if doc is None and fresh:
        await store.meta.update_one({"_id": "schema"}, {"$max": {"version": SCHEMA_VERSION}}, upsert=True)
        return
    me = f"{socket.gethostname()}-{os.getpid()}"
    if not await store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS):
        await _wait_for_migration(store)
        return
    try:
        # Read again under the lease: a service that read the old version just before another finished
        # migrating and let the lease go would otherwise migrate a second time.
        doc = await store.meta.find_one({"_id": "schema"})
        version = int(doc.get("version", 1)) if doc is not None else 1
        if version >= SCHEMA_VERSION:
            return
        if version < 2:
            await _migrate_jobs(store, me)
        if version < 3:
            await _count_positions(store, me)
        elif version < 5:
            await _count_values(store, me)
        await _key_names(store, me)
        if version < 6:
            await _backfill_usage(store, me)
        await store.meta.update_one({"_id": "schema"}, {"$max": {"version": SCHEMA_VERSION}}, upsert=True)
    finally:
        await store.release_lease("schema-migration", me)


async def _migrate_jobs(store: JobReads, me: str) -> None:
    """Version 1 -> 2: earlier attempts out of the job documents, the indexed fields of active work and
    of lists added, and the tallies of ended jobs counted (once, over the whole history)."""
    log.warning("migrating job documents to schema version 2; services wait for it", schema=SCHEMA_VERSION)
    counts: Counter[tuple[str, str]] = Counter()
    done = 0
    async for doc in store.jobs.find({}).sort([("_id", ASCENDING)]):
        for past in doc.pop("attempts", None) or []:
            await store.attempts.replace_one({"_id": f"{doc['_id']}/{past['attempt']}"},
                                             {"job_id": doc["_id"], **past}, upsert=True)
        job = JobRecord.from_document(doc)
        if job.state.is_final:
            counts[(job.virtual_cluster, job.state.value)] += 1
        new = job.model_copy(update={"counted": job.state.is_final}).to_document()
        await store.jobs.replace_one({"_id": job.id}, new)
        done += 1
        if done % 1000 == 0:
            await store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS)
            log.info("migrating job documents", done=done)
    await store.tallies.set_counts(counts)
    log.warning("job documents migrated to schema version 2", jobs=done)


async def _count_positions(store: JobReads, me: str) -> None:
    """Version 2 -> 3: the counts of ended jobs by creation time behind deep pages (shared.db.lists.counts),
    counted once over the whole history."""
    log.warning("counting the stored jobs for deep pages (schema version 3); services wait for it")
    counted = await store.list_counts.recount(lambda: store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS))
    log.warning("stored jobs counted for deep pages", jobs=counted)


async def _count_values(store: JobReads, me: str) -> None:
    """Version 4 -> 5: the values the v2 list's orders visit (shared.db.lists.counts), counted once over the
    ended jobs (version 3's recount counts them with the rest)."""
    log.warning("counting the stored jobs' values for the v2 list's orders (schema version 5); services wait for it")
    counted = await store.list_counts.recount_values(
        lambda: store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS))
    log.warning("stored jobs' values counted", jobs=counted)


async def _backfill_usage(store: JobReads, me: str) -> None:
    """Version 5 -> 6: the usage of the jobs that ended before the usage rollups (shared.db.usage), added once:
    every ended job counted in the tallies without the rollups' mark (one ended since is marked; one not yet
    counted is added when it is), from after the last one a cut-off migration added, in chunks by id, each read
    whole with its earlier attempts."""
    log.warning("adding the usage of jobs that ended before the usage reports (schema version 6); services wait "
                "for it")
    after = await store.usage.backfilled_to(store.meta)
    query = {"counted": True, "state": {"$nin": list(ACTIVE_JOB_STATES)}, MARK: {"$ne": True}}
    ids = sorted(i for i in [str(d["_id"]) async for d in store.jobs.find(query, {"_id": 1})] if i > after)

    async def chunks() -> AsyncIterator[list[tuple[JobRecord, list[AttemptRecord]]]]:
        for start in range(0, len(ids), BACKFILL_CHUNK):
            await store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS)
            if found := await _with_attempts(store, ids[start:start + BACKFILL_CHUNK]):
                yield found

    added = await store.usage.backfill(chunks(), store.meta, atomic=await store.supports_transactions())
    log.warning("usage of earlier jobs added", jobs=added, **({"after": after} if after else {}))


async def _with_attempts(store: JobReads, ids: list[str]) -> list[tuple[JobRecord, list[AttemptRecord]]]:
    """Jobs read whole by id, each with its earlier attempts (a query for each kind)."""
    jobs = await store.records_of(store.jobs.find({"_id": {"$in": ids}}))
    archived: dict[str, list[AttemptRecord]] = {job.id: [] for job in jobs}
    async for d in store.attempts.find({"job_id": {"$in": list(archived)}}):
        archived[d["job_id"]].append(AttemptRecord.from_document(d))
    return [(job, sorted(archived[job.id], key=lambda a: a.attempt)) for job in jobs]


async def _key_names(store: JobReads, me: str) -> None:
    """Version 3 -> 4: the ``name_keys`` of jobs stored before them (GET /api/v2/jobs's keyword,
    shared.keywords), once over the jobs that lack them."""
    done = 0
    batch: list[UpdateOne] = []
    async for doc in store.jobs.find({"name_keys": {"$exists": False}}, {"name": 1}):
        batch.append(UpdateOne({"_id": doc["_id"]}, {"$set": {"name_keys": name_keys(str(doc.get("name", "")))}}))
        if len(batch) == 1000:
            await store.jobs.bulk_write(batch, ordered=False)
            done += len(batch)
            batch = []
            await store.hold_lease("schema-migration", me, MIGRATION_LEASE_MS)
    if batch:
        await store.jobs.bulk_write(batch, ordered=False)
        done += len(batch)
    log.warning("stored jobs keyed for the v2 list's keyword (schema version 4)", jobs=done)


async def _wait_for_migration(store: JobReads, limit_s: float = 1800) -> None:
    log.warning("another service is migrating the job documents; waiting for it")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        doc = await store.meta.find_one({"_id": "schema"})
        if doc is not None and int(doc.get("version", 0)) >= SCHEMA_VERSION:
            return
        await asyncio.sleep(1)
    raise StoreError(f"the job documents were not migrated to schema version {SCHEMA_VERSION} within {limit_s:.0f}s")
