"""Jobs of one GPU role in a VC at a priority, and what the launcher and the status service would do to
them, for the preemption tests that run the scheduler's real passes against the MongoDB-wire server."""

from __future__ import annotations

from shared.db.store import Store
from shared.events import CloudEvent
from shared.records import JobRecord, JobState, SubState, TaskState, initial_tasks, now_ms
from tests.unit.factories import make_config, role_dict


def job(name: str, vc: str, gpus: int, priority: str, *, at: int) -> JobRecord:
    config = make_config(role_dict("main", gpuNumber=gpus, cpuNumber=1, memoryMB=1024), jobName=name,
                         virtualCluster=vc, extras={"hivedScheduler": {"jobPriorityClass": priority}})
    return JobRecord(id=f"u~{name}~00000000", user="u", name=name, virtual_cluster=vc, config=config,
                     raw_config={}, created_ms=at, tasks=initial_tasks(config))


async def run(store: Store, job_id: str) -> None:
    """The launcher started the job's task: it runs."""
    record = await store.get_job(job_id)
    assert record is not None
    tasks = tuple(t.model_copy(update={"state": TaskState.RUNNING, "started_ms": now_ms()}) for t in record.tasks)
    await store.update_job(job_id, {}, {"state": JobState.RUNNING.value, "sub_state": SubState.RUNNING.value,
                                        "launched_ms": now_ms(), "tasks": [t.model_dump(mode="json") for t in tasks]})


def of(events: list[CloudEvent], kind: type[CloudEvent]) -> list[CloudEvent]:
    return [e for e in events if isinstance(e, kind)]
