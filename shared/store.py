"""MongoDB, the source of truth, through PyMongo's async API.

Every state change is a conditional ``find_one_and_update``: the filter carries the state (and the
attempt) the change expects, so a duplicated or late event changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from shared.errors import JobExistsError, StoreError
from shared.logstore import LogStore
from shared.records import ACTIVE_JOB_STATES, JobRecord, JobState, NodeRecord, TaskRecord, TaskState, now_ms
from shared.vclusters import VirtualCluster

Doc = dict[str, Any]


class Store:
    def __init__(self, client: AsyncMongoClient[Doc], database: str) -> None:
        self._client = client
        db = client[database]
        self.jobs: AsyncCollection[Doc] = db["jobs"]
        self.nodes: AsyncCollection[Doc] = db["nodes"]
        self.users: AsyncCollection[Doc] = db["users"]
        self.vcs: AsyncCollection[Doc] = db["virtual_clusters"]
        self.leases: AsyncCollection[Doc] = db["leases"]
        self.tokens: AsyncCollection[Doc] = db["tokens"]

    async def ensure_indexes(self) -> None:
        await self.jobs.create_index([("user", ASCENDING), ("name", ASCENDING)], unique=True)
        await self.jobs.create_index([("created_ms", DESCENDING)])
        await self.jobs.create_index([("user", ASCENDING), ("created_ms", DESCENDING)])
        await self.jobs.create_index([("state", ASCENDING), ("sub_state", ASCENDING), ("created_ms", ASCENDING)])
        await self.tokens.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0)

    # --- jobs ------------------------------------------------------------------------------

    async def insert_job(self, job: JobRecord) -> None:
        try:
            await self.jobs.insert_one(job.to_document())
        except DuplicateKeyError as e:
            raise JobExistsError(job.id) from e

    async def get_job(self, job_id: str) -> JobRecord | None:
        doc = await self.jobs.find_one({"_id": job_id})
        return JobRecord.from_document(doc) if doc else None

    async def find_job(self, user: str, name: str) -> JobRecord | None:
        doc = await self.jobs.find_one({"user": user, "name": name})
        return JobRecord.from_document(doc) if doc else None

    async def list_jobs(self, *, user: str | None = None, limit: int = 1000, skip: int = 0) -> list[JobRecord]:
        query: Doc = {"user": user} if user else {}
        cursor = self.jobs.find(query).sort([("created_ms", DESCENDING), ("_id", ASCENDING)])
        return [JobRecord.from_document(d) async for d in cursor.skip(skip).limit(limit)]

    async def queued_jobs(self) -> list[JobRecord]:
        """WAITING jobs that hold no placement yet, oldest first."""
        cursor = self.jobs.find({"state": JobState.WAITING.value, "sub_state": "queued"})
        return [JobRecord.from_document(d) async for d in cursor.sort([("created_ms", ASCENDING)])]

    async def placed_jobs(self) -> list[JobRecord]:
        """Active jobs that hold a placement."""
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)}, "sub_state": {"$ne": "queued"}})
        return [JobRecord.from_document(d) async for d in cursor]

    async def jobs_holding_resources(self) -> list[JobRecord]:
        """Placed jobs with a task not yet ended, final jobs included: a completed job's leftover tasks
        hold their CPUs, GPUs and ports until their containers are really gone."""
        cursor = self.jobs.find({"sub_state": {"$ne": "queued"},
                                 "tasks.state": {"$in": [TaskState.WAITING.value, TaskState.RUNNING.value]}})
        return [JobRecord.from_document(d) async for d in cursor]

    async def jobs_on_node(self, node_id: str) -> list[JobRecord]:
        """Jobs with a task on the node that has not ended (final jobs whose tasks still stop included)."""
        cursor = self.jobs.find({"tasks.node_id": node_id,
                                 "tasks.state": {"$in": [TaskState.WAITING.value, TaskState.RUNNING.value]}})
        return [JobRecord.from_document(d) async for d in cursor]

    async def update_job(self, job_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> JobRecord | None:
        """Apply ``$set: changes`` if the job still matches ``expect``; the job after, or None."""
        try:
            doc = await self.jobs.find_one_and_update(
                {"_id": job_id, **expect}, {"$set": dict(changes), "$inc": {"version": 1}},
                return_document=ReturnDocument.AFTER,
            )
        except PyMongoError as e:
            raise StoreError(f"updating job {job_id} failed: {e}") from e
        return JobRecord.from_document(doc) if doc else None

    async def replace_job(self, job: JobRecord, expected_version: int) -> bool:
        """Write ``job`` whole if nobody changed it since ``expected_version`` was read."""
        doc = job.to_document()
        doc["version"] = expected_version + 1
        try:
            result = await self.jobs.replace_one({"_id": job.id, "version": expected_version}, doc)
        except PyMongoError as e:
            raise StoreError(f"writing job {job.id} failed: {e}") from e
        return result.modified_count == 1

    async def retry_pending_jobs(self) -> list[JobRecord]:
        cursor = self.jobs.find({"state": JobState.WAITING.value, "sub_state": "retry pending"})
        return [JobRecord.from_document(d) async for d in cursor]

    async def commit_placements(self, placements: Sequence[tuple[JobRecord, Sequence[TaskRecord]]]) -> list[JobRecord]:
        """Place many queued jobs in one round trip; the jobs that were placed (a job that changed
        meanwhile, e.g. was stopped, is left as it is)."""
        if not placements:
            return []
        token = uuid.uuid4().hex  # marks this batch's writes, to read back exactly the jobs it placed
        ops = [UpdateOne(
            {"_id": job.id, "state": JobState.WAITING.value, "sub_state": "queued", "attempt": job.attempt,
             "stop_requested_by": None},
            {"$set": {"tasks": [t.model_dump(mode="json") for t in tasks], "sub_state": "starting", "reason": "",
                      "queue_position": None, "placement_id": token}, "$inc": {"version": 1}})
            for job, tasks in placements]
        try:
            await self.jobs.bulk_write(ops, ordered=False)
            cursor = self.jobs.find({"_id": {"$in": [job.id for job, _ in placements]}, "placement_id": token})
            return [JobRecord.from_document(d) async for d in cursor]
        except PyMongoError as e:
            raise StoreError(f"committing {len(ops)} placements failed: {e}") from e

    async def set_waiting_reasons(self, waiting: Sequence[tuple[JobRecord, str, int]]) -> None:
        """Record why (and where in its queue) each job waits, in one round trip."""
        if not waiting:
            return
        ops = [UpdateOne({"_id": job.id, "state": JobState.WAITING.value, "sub_state": "queued",
                          "attempt": job.attempt},
                         {"$set": {"reason": reason, "queue_position": position}, "$inc": {"version": 1}})
               for job, reason, position in waiting]
        await self.jobs.bulk_write(ops, ordered=False)

    async def update_task(self, job_id: str, attempt: int, slot: int, expect_states: Sequence[str],
                          changes: Mapping[str, Any]) -> JobRecord | None:
        """Change task ``slot`` of the current attempt, if it is in one of ``expect_states``."""
        return await self.update_job(
            job_id,
            {"attempt": attempt, f"tasks.{slot}.state": {"$in": list(expect_states)}},
            {f"tasks.{slot}.{k}": v for k, v in changes.items()},
        )

    async def job_counts_by_vc_and_state(self) -> dict[str, dict[str, int]]:
        pipeline: list[Doc] = [{"$group": {"_id": {"vc": "$virtual_cluster", "state": "$state"}, "n": {"$sum": 1}}}]
        out: dict[str, dict[str, int]] = {}
        async for row in await self.jobs.aggregate(pipeline):
            out.setdefault(str(row["_id"]["vc"]), {})[str(row["_id"]["state"])] = int(row["n"])
        return out

    async def jobs_to_stop(self) -> list[JobRecord]:
        """Active jobs a user asked to stop (the stop event may have been lost)."""
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)}, "stop_requested_by": {"$ne": None}})
        return [JobRecord.from_document(d) async for d in cursor]

    async def delete_job(self, job_id: str) -> bool:
        result = await self.jobs.delete_one({"_id": job_id})
        await LogStore(self.jobs.database).delete_job(job_id)  # its tasks' logs and runs go with it
        return result.deleted_count == 1

    # --- nodes -----------------------------------------------------------------------------

    async def upsert_node(self, node: NodeRecord) -> None:
        doc = node.to_document()
        await self.nodes.replace_one({"_id": node.id}, doc, upsert=True)

    async def heartbeat(self, node_id: str) -> None:
        await self.nodes.update_one({"_id": node_id}, {"$set": {"heartbeat_ms": now_ms(), "lost": False}})

    async def list_nodes(self) -> list[NodeRecord]:
        return [NodeRecord.model_validate(d) async for d in self.nodes.find({}).sort([("_id", ASCENDING)])]

    async def mark_node_lost(self, node_id: str, heard_before_ms: int) -> bool:
        """Mark a node lost if it still has not been heard from since ``heard_before_ms`` (once)."""
        result = await self.nodes.update_one(
            {"_id": node_id, "lost": False, "heartbeat_ms": {"$lt": heard_before_ms}}, {"$set": {"lost": True}})
        return result.modified_count == 1

    # --- virtual clusters ------------------------------------------------------------------

    async def list_vcs(self) -> list[VirtualCluster]:
        return [VirtualCluster.model_validate({k: v for k, v in d.items() if k != "_id"})
                async for d in self.vcs.find({}).sort([("_id", ASCENDING)])]

    async def put_vc(self, vc: VirtualCluster) -> None:
        await self.vcs.replace_one({"_id": vc.name}, {"_id": vc.name, **vc.model_dump(mode="json")}, upsert=True)

    async def delete_vc(self, name: str) -> bool:
        return (await self.vcs.delete_one({"_id": name})).deleted_count == 1

    async def active_jobs_in_vc(self, name: str) -> int:
        return await self.jobs.count_documents({"virtual_cluster": name,
                                                "state": {"$in": list(ACTIVE_JOB_STATES)}})

    # --- leases ------------------------------------------------------------------------------

    async def hold_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew the lease ``name`` for ``holder``; False while someone else holds it."""
        now = now_ms()
        try:
            doc = await self.leases.find_one_and_update(
                {"_id": name, "$or": [{"holder": holder}, {"expires_ms": {"$lt": now}}]},
                {"$set": {"holder": holder, "expires_ms": now + ttl_ms}}, upsert=True,
                return_document=ReturnDocument.AFTER)
        except DuplicateKeyError:
            return False  # held by another: the upsert tried to create a second one
        return doc is not None and doc.get("holder") == holder

    async def release_lease(self, name: str, holder: str) -> None:
        await self.leases.delete_one({"_id": name, "holder": holder})

    async def ping(self) -> None:
        await self._client.admin.command("ping")


@asynccontextmanager
async def open_store(uri: str, database: str) -> AsyncIterator[Store]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True, serverSelectionTimeoutMS=10000)
    try:
        store = Store(client, database)
        try:
            await store.ensure_indexes()
        except PyMongoError as e:
            raise StoreError(f"cannot reach MongoDB: {e}") from e
        yield store
    finally:
        await client.close()
