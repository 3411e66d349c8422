"""Task logs that outlive their containers, and the launcher's record of each task's container.

Why MongoDB and not files: a launcher runs on each node and the REST API anywhere else; MongoDB is
the one thing both already reach (and the truth of everything else), so logs need no shared file
system, no extra port on the nodes, and survive a node's disk. Each task keeps at most a configured
number of bytes (``PAIQ_TASK_LOG_MAX_BYTES``); the last kept line says so when output was cut.

- ``task_runs``: one document per run of a task of an attempt (:attr:`TaskRef.id`: ``<job>/<attempt>/<role>/<index>``,
  and ``/<task_attempt>`` for a re-run, taskRetryCount): the node and container, the phase (``launching`` ->
  ``running`` -> ``ended``) with when it started and ended, the exit as reported, and whether the log is
  complete or was truncated. The task's earlier runs are read back from here (the job keeps only the
  current run's), by their ids: :meth:`LogStore.runs_of`. A launcher claims a run before it creates the
  container, so after a crash it can tell "never started" (relaunch) from "already ran" (never again).
- ``task_log_chunks``: the log itself, in chunks of lines ``[stream, ts_ns, text]`` numbered ``seq``
  from 0, each with the running byte count and last timestamp (where a restarted launcher resumes).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from shared.records import now_ms
from shared.taskref import TaskRef

Doc = dict[str, Any]
STREAM_CODES = {"stdout": "o", "stderr": "e"}
STREAM_NAMES = {v: k for k, v in STREAM_CODES.items()}




class RunPhase(StrEnum):
    LAUNCHING = "launching"  # claimed; the container may not exist yet
    RUNNING = "running"  # the container was created and started
    ENDED = "ended"  # the exit (or the failure to start) was reported


class TaskRun(TaskRef):
    """A task's run as ``task_runs`` keeps it (``_id``: :attr:`TaskRef.id`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    node_id: str
    phase: RunPhase
    container_id: str | None = None
    claimed_ms: int = 0
    started_ms: int | None = None  # its container started (absent in what older launchers wrote)
    ended_ms: int | None = None
    exit_code: int | None = None
    reason: str = ""
    diagnostics: str = ""
    log_truncated: bool = False
    log_complete: bool = False
    stopped_for: str = ""  # why its launcher stopped it (a limit it passed); kept if the launcher restarts meanwhile


class LogLineRecord(BaseModel):
    model_config = ConfigDict(frozen=True)
    stream: str
    ts_ns: int
    text: str


class LogChunk(BaseModel):
    model_config = ConfigDict(frozen=True)
    seq: int
    lines: tuple[LogLineRecord, ...]
    total_bytes: int
    last_ts_ns: int


class LogEnd(BaseModel):
    """Where a task run's stored log ends: the next chunk's number, the bytes kept, the engine timestamp of the
    last line kept, and whether the cap cut it. A recorder that ended cleanly hands it to the next one (the
    catch-up after the exit), which then reads nothing back from the store to resume."""

    model_config = ConfigDict(frozen=True)
    seq: int
    total_bytes: int
    last_ts_ns: int
    truncated: bool


class LogStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.runs = db["task_runs"]
        self.chunks = db["task_log_chunks"]

    async def ensure_indexes(self) -> None:
        await self.runs.create_index([("job_id", ASCENDING)])
        await self.chunks.create_index([("run", ASCENDING), ("seq", ASCENDING)], unique=True)

    # --- runs ------------------------------------------------------------------------------

    async def claim(self, key: TaskRef, node_id: str) -> TaskRun:
        """The run of ``key``: created (``launching``) unless it exists; as it is now. (An insert that may
        collide, not an upsert through ``find_one_and_update``, which SecantusDB answers by reading the
        whole collection, and this one grows with every task ever run.)"""
        doc = {"_id": key.id, **key.fields(), "node_id": node_id, "phase": RunPhase.LAUNCHING.value,
               "claimed_ms": now_ms()}
        try:
            await self.runs.insert_one(doc)
        except DuplicateKeyError:
            found = await self.runs.find_one({"_id": key.id})
            if found is not None:
                return TaskRun.model_validate(found)
        return TaskRun.model_validate(doc)

    async def get_run(self, key: TaskRef) -> TaskRun | None:
        doc = await self.runs.find_one({"_id": key.id})
        return TaskRun.model_validate(doc) if doc else None

    async def get_runs(self, keys: Sequence[TaskRef]) -> dict[str, TaskRun]:
        """The runs of ``keys`` that are stored, by id: one query, read by ids."""
        found = self.runs.find({"_id": {"$in": [k.id for k in keys]}})
        return {d["_id"]: TaskRun.model_validate(d) async for d in found}

    async def runs_of(self, task: TaskRef, last: int, limit: int) -> list[TaskRun]:
        """The task's runs ``last``, ``last - 1``, ... (at most ``limit`` of them), newest first, those stored:
        read by their ids (``task.task_attempt`` is ignored), so the cost is the runs asked for, never the
        collection's."""
        query = runs_query(task, last, limit)
        found = {d["_id"]: TaskRun.model_validate(d) async for d in self.runs.find(query)}
        return [found[i] for i in query["_id"]["$in"] if i in found]

    async def set_running(self, key: TaskRef, container_id: str) -> None:
        await self.runs.update_one({"_id": key.id, "phase": {"$ne": RunPhase.ENDED.value}},
                                   {"$set": {"phase": RunPhase.RUNNING.value, "container_id": container_id,
                                             "started_ms": now_ms()}})

    async def set_ended(self, key: TaskRef, *, exit_code: int, reason: str, diagnostics: str,
                        container_id: str | None) -> None:
        changes: Doc = {"phase": RunPhase.ENDED.value, "exit_code": exit_code, "reason": reason,
                        "diagnostics": diagnostics, "ended_ms": now_ms()}
        if container_id:
            changes["container_id"] = container_id
        else:
            changes["log_complete"] = True  # never ran: there is no log to wait for
        await self.runs.update_one({"_id": key.id, "phase": {"$ne": RunPhase.ENDED.value}}, {"$set": changes})

    async def set_stopped_for(self, key: TaskRef, reason: str) -> None:
        """Its launcher stops the run for ``reason``: its exit, whenever it is reported, says so."""
        await self.runs.update_one({"_id": key.id, "phase": {"$ne": RunPhase.ENDED.value}},
                                   {"$set": {"stopped_for": reason}})

    async def set_log_state(self, key: TaskRef, *, truncated: bool | None = None, complete: bool | None = None) -> None:
        changes: Doc = {}
        if truncated is not None:
            changes["log_truncated"] = truncated
        if complete is not None:
            changes["log_complete"] = complete
        if changes:
            await self.runs.update_one({"_id": key.id}, {"$set": changes})

    # --- log chunks ------------------------------------------------------------------------

    async def append(self, key: TaskRef, chunk: LogChunk) -> None:
        """Store one chunk; storing the same ``seq`` twice (a replay) keeps the first."""
        doc = {"run": key.id, "seq": chunk.seq, "total_bytes": chunk.total_bytes, "last_ts_ns": chunk.last_ts_ns,
               "lines": [[STREAM_CODES.get(ln.stream, "o"), ln.ts_ns, ln.text] for ln in chunk.lines]}
        try:
            await self.chunks.insert_one(doc)
        except DuplicateKeyError:
            return

    async def last_chunk(self, key: TaskRef) -> LogChunk | None:
        doc = await self.chunks.find_one({"run": key.id}, sort=[("seq", DESCENDING)])
        return _chunk(doc) if doc else None

    async def chunks_after(self, key: TaskRef, seq: int, limit: int = 100) -> list[LogChunk]:
        cursor = self.chunks.find({"run": key.id, "seq": {"$gt": seq}}).sort([("seq", ASCENDING)]).limit(limit)
        return [_chunk(d) async for d in cursor]

    async def tail(self, key: TaskRef, lines: int, streams: frozenset[str]) -> tuple[list[LogLineRecord], int]:
        """The last ``lines`` lines of ``streams``, oldest first, and the seq of the last chunk (-1: none)."""
        kept: list[LogLineRecord] = []
        last_seq = -1
        cursor = self.chunks.find({"run": key.id}).sort([("seq", DESCENDING)])
        async for doc in cursor:
            chunk = _chunk(doc)
            last_seq = max(last_seq, chunk.seq)
            kept[:0] = [ln for ln in chunk.lines if ln.stream in streams]
            if len(kept) >= lines:
                break
        return kept[-lines:] if lines else [], last_seq

    async def forget_run(self, key: TaskRef) -> None:
        await self.chunks.delete_many({"run": key.id})
        await self.runs.delete_one({"_id": key.id})

    async def delete_job(self, job_id: str) -> None:
        """Forget every log and run of a job (when the job itself is deleted)."""
        ids = [d["_id"] async for d in self.runs.find({"job_id": job_id}, {"_id": 1})]
        await self.chunks.delete_many({"run": {"$in": ids}})
        await self.runs.delete_many({"job_id": job_id})


def runs_query(task: TaskRef, last: int, limit: int) -> Doc:
    """The query of :meth:`LogStore.runs_of`: runs ``last`` down to ``last - limit + 1`` of ``task`` by id."""
    ids = [task.model_copy(update={"task_attempt": n}).id for n in range(last, max(-1, last - limit), -1)]
    return {"_id": {"$in": ids}}


def _chunk(doc: Doc) -> LogChunk:
    return LogChunk(
        seq=int(doc["seq"]), total_bytes=int(doc.get("total_bytes", 0)), last_ts_ns=int(doc.get("last_ts_ns", 0)),
        lines=tuple(LogLineRecord(stream=STREAM_NAMES.get(s, "stdout"), ts_ns=int(ts), text=str(text))
                    for s, ts, text in doc.get("lines", [])))
