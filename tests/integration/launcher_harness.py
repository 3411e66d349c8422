"""A launcher running for real (Docker engine, MongoDB-wire server, in-process bus) for integration tests.

Jobs are stored already placed on the test's node, exactly as the scheduler leaves them; the launcher
is told to launch them over the bus, and every ``task.*`` event it publishes is collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import docker

from services.launcher.deps import LauncherDeps
from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.profiling.gpureader import GpuReader
from services.launcher.reconcile import plan_of
from services.launcher.service import start_launcher
from shared.admission.validation import Accepted, validate_job_config
from shared.bus.base import Router
from shared.bus.memory import MemoryBus
from shared.db.logs import LogStore
from shared.db.store import Store, open_store
from shared.events import CloudEvent, LaunchTasks, LaunchTasksData, TaskExited, TaskProgress, TaskStarted
from shared.ops.vitals import Vitals
from shared.records import JobRecord, SubState, TaskRecord, TaskSpec, job_id_of, now_ms
from shared.settings.model import Settings
from shared.taskref import TaskRef
from shared.tasks.launchspec import task_specs
from tests.infra import unique

E = TypeVar("E", bound=CloudEvent)


@dataclass
class Harness:
    node_id: str
    settings: Settings
    store: Store
    logs: LogStore
    bus: MemoryBus
    fs: Path
    events: list[CloudEvent] = field(default_factory=list)
    deps: LauncherDeps | None = None
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def record(self, event: CloudEvent) -> Sequence[CloudEvent]:
        async with self._arrived:
            self.events.append(event)
            self._arrived.notify_all()
        return []

    async def wait_for(self, kind: type[E], match: Callable[[E], bool] = lambda _: True,
                       limit_s: float = 30) -> E:
        def found() -> E | None:
            return next((e for e in self.events if isinstance(e, kind) and match(e)), None)

        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: found() is not None), limit_s)
        event = found()
        assert event is not None
        return event

    def of(self, kind: type[E], job_id: str) -> list[E]:
        return [e for e in self.events if isinstance(e, kind) and e.subject == job_id]

    async def job(self, name: str, *, command: str = "true", roles: list[dict[str, Any]] | None = None,
                  **config: Any) -> tuple[JobRecord, list[TaskSpec]]:
        """Store a job whose tasks are placed on this node; it and its launch specs."""
        raw = {"jobName": name, "image": "local/busybox:latest",
               "taskRoles": roles or [{"name": "main", "memoryMB": 128, "command": command}], **config}
        result = validate_job_config(raw)
        assert isinstance(result, Accepted), result
        user = "tester"
        tasks = tuple(TaskRecord(role=r.name, index=i, node_id=self.node_id, ip="127.0.0.1",
                                 ports={p.label: tuple(range(p.begin_at, p.begin_at + p.port_number))
                                        for p in r.port_list})
                      for r in result.config.task_roles for i in range(r.task_number))
        job = JobRecord(id=job_id_of(user, name), user=user, name=name, virtual_cluster="default",
                        config=result.config, raw_config=result.raw, created_ms=now_ms(), tasks=tasks,
                        sub_state=SubState.STARTING)
        await self.store.insert_job(job)
        plan = plan_of(job)
        assert plan is not None
        return job, task_specs(job, plan, self.settings.default_fs_uri)

    async def launch(self, job: JobRecord, specs: Sequence[TaskSpec]) -> None:
        await self.bus.publish([LaunchTasks(subject=job.id, data=LaunchTasksData(
            job_id=job.id, attempt=job.attempt, node_id=self.node_id, tasks=tuple(specs)))])

    async def exited(self, job: JobRecord, limit_s: float = 30, index: int = 0) -> TaskExited:
        return await self.wait_for(TaskExited, lambda e: e.subject == job.id and e.data.index == index, limit_s)

    def key(self, job: JobRecord, role: str = "main", index: int = 0) -> TaskRef:
        return TaskRef(job_id=job.id, attempt=job.attempt, role=role, index=index)

    async def log_text(self, job: JobRecord, role: str = "main", index: int = 0,
                       streams: frozenset[str] = frozenset({"stdout", "stderr"})) -> str:
        chunks = await self.logs.chunks_after(self.key(job, role, index), -1, limit=10_000)
        return "".join(ln.text for c in chunks for ln in c.lines if ln.stream in streams)


def harness_settings(tmp: Path, node_id: str, database: str, mongo_uri: str, **extra: str) -> Settings:
    env = {"PAIQ_NODE_ID": node_id, "PAIQ_DATA_DIR": str(tmp / "data"),
           "PAIQ_DEFAULT_FS_URI": f"file://{tmp / 'fs'}", "PAIQ_MONGODB_URI": mongo_uri,
           "PAIQ_MONGODB_DATABASE": database, "PAIQ_RECONCILE_SECONDS": "1", "PAIQ_STOP_GRACE_SECONDS": "1",
           "PAIQ_NODE_CPUS": "16", "PAIQ_NODE_MEMORY_MB": "16384", **extra}
    return Settings.from_env(env)


@asynccontextmanager
async def running_launcher(settings: Settings, store: Store, bus: MemoryBus, driver: DockerDriver | None = None,
                           gpu_reader: GpuReader | None = None) -> AsyncIterator[LauncherDeps]:
    """The launcher service as its process runs it; leaving the block is a crash as far as Docker goes
    (containers keep running, nothing is cleaned up)."""
    async with AsyncExitStack() as stack:
        driver = driver or DockerDriver.from_url(None)
        stack.push_async_callback(driver.close)
        deps = LauncherDeps(settings=settings, store=store, bus=bus, driver=driver,
                            logs=LogStore(store.jobs.database))
        yield await start_launcher(stack, deps, Vitals(), gpu_reader)


@asynccontextmanager
async def harness(tmp: Path, mongo_uri: str, docker_client: docker.DockerClient,
                  **extra: str) -> AsyncIterator[Harness]:
    node_id = unique("lnch-")
    database = f"launcher_{uuid.uuid4().hex[:10]}"
    settings = harness_settings(tmp, node_id, database, mongo_uri, **extra)
    (tmp / "fs").mkdir(parents=True, exist_ok=True)
    bus = MemoryBus()
    try:
        async with open_store(mongo_uri, database) as store:
            h = Harness(node_id=node_id, settings=settings, store=store, logs=LogStore(store.jobs.database),
                        bus=bus, fs=tmp / "fs")
            router = Router()
            for kind in (TaskStarted, TaskExited, TaskProgress):
                router.on(kind, h.record)
            await bus.subscribe("observer", ["task.*"], router)
            yield h
    finally:
        await bus.close()
        for c in docker_client.api.containers(all=True, filters={"label": f"paiq.node={node_id}"}):
            with contextlib.suppress(docker.errors.APIError):
                docker_client.api.remove_container(c["Id"], force=True)
