"""A task re-run in place (taskRetryCount) read back run by run, through the real app and store (a
MongoDB-wire server): OpenPAI v1.8's per-task attempts in /api/v2 (a task's ``attemptId`` and
``containerLog`` name its run; ``.../taskIndex/{i}/attempts`` lists every run, latest first, each with its own
container, exit code and times; ``.../attempts/{t}/logs`` points at run t's log), and v1's log and task
profile routes, which read the task's last run of the attempt asked and any other through ``taskAttempt``.

The job is written as the status service and the launchers leave one: attempt 0 archived with its task at
run 1, attempt 1 current with its task at run 2 after runs 0 and 1 exited 3; each run's record, log and
profile stored under its own task attempt."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from services.submit.routes.v2 import jobreads
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.logs import LogChunk, LogLineRecord, LogStore
from shared.db.profiles import ProfileWrite, TaskProfile
from shared.db.store import Store
from shared.profiling.series import add
from shared.profiling.usage import Usage
from shared.records import AttemptRecord, JobRecord, JobState, TaskRecord, TaskState
from shared.settings.model import Settings
from shared.taskref import TaskRef
from tests.infra import HASH_ROUNDS
from tests.unit.factories import make_config, make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DOC = document()
NAME = "rerun"
V2 = f"/api/v2/jobs/alice~{NAME}"
V1 = f"/api/v1/user/alice/jobs/{NAME}"
RUNS = {0: 1, 1: 2}  # job attempt -> the task's last run in it


def check(body: Any, schema: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}", "components": DOC["components"]})


def task(attempt: int, *, state: TaskState, exit_code: int | None) -> TaskRecord:
    run = RUNS[attempt]
    return TaskRecord(role="main", index=0, state=state, node_id="n1", ip="10.0.0.1", gpus=(0,),
                      ports={"http": (20001,)}, container_id=f"c-{attempt}-{run}", exit_code=exit_code,
                      started_ms=1000 * (attempt * 10 + run), completed_ms=None if exit_code is None else 99_000,
                      retries=run, accountable_retries=run, diagnostics=f"attempt {attempt} run {run} said so")


def the_job() -> JobRecord:
    job = make_job(make_config(jobName=NAME), tasks=[task(1, state=TaskState.RUNNING, exit_code=None)],
                   state=JobState.RUNNING, attempt=1)
    return job.model_copy(update={"retries": 1})


async def store_run(logs: LogStore, key: TaskRef, exit_code: int | None) -> None:
    """A run as its launcher leaves it: claimed, started, its log, and (ended) its exit."""
    await logs.claim(key, "n1")
    container = f"c-{key.attempt}-{key.task_attempt}"
    await logs.set_running(key, container)
    text = f"attempt {key.attempt} run {key.task_attempt}\n"
    await logs.append(key, LogChunk(seq=0, lines=(LogLineRecord(stream="stdout", ts_ns=1, text=text),),
                                    total_bytes=len(text), last_ts_ns=1))
    if exit_code is not None:
        await logs.set_ended(key, exit_code=exit_code, reason=f"exit {exit_code}", diagnostics="run failed",
                             container_id=container)


def profile_of(key: TaskRef) -> TaskProfile:
    profile = TaskProfile(job_id=key.job_id, attempt=key.attempt, role=key.role, index=key.index,
                          task_attempt=key.task_attempt, node_id="n1", cpus=1, gpus=(0,), interval_ms=10_000)
    for t in range(1, 3 + key.task_attempt):  # run n has n + 2 points: whose they are shows
        point = Usage(t_ms=t * 10_000, span_ms=10_000, cpu=0.5, mem=2**20, mem_peak=2**20)
        profile = profile.model_copy(update={"series": add(profile.series, point).series, "last": point,
                                             "totals": profile.totals.plus(point, 1)})
    return profile


class Api:
    def __init__(self, client: TestClient[Any, Any], tokens: dict[str, str]) -> None:
        self.client = client
        self.tokens = tokens

    async def get(self, path: str, who: str | None = "alice", status: int = 200, schema: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        resp = await self.client.get(path, headers=headers)
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        assert resp.status == status, (path, resp.status, body)
        if schema or status >= 400:
            check(body, schema or "Error")
        return body

    async def log(self, path: str, who: str = "alice") -> tuple[str, str]:
        """A v1 log's text and the run it is of (X-Task-Attempt)."""
        resp = await self.client.get(path, headers={"Authorization": f"Bearer {self.tokens[who]}"})
        assert resp.status == 200, (path, await resp.text())
        return await resp.text(), resp.headers["X-Task-Attempt"]


@pytest.fixture
async def api(mongo_uri: str) -> AsyncIterator[Api]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"taskruns_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    job = the_job()
    await store.insert_job(job)
    await store.attempts.insert_one(AttemptRecord(
        attempt=0, tasks=(task(0, state=TaskState.FAILED, exit_code=3),), launched_ms=1, completed_ms=2,
        exit_code=3, trigger_role="main", trigger_index=0).to_document(job.id))
    logs = LogStore(store.jobs.database)
    writes = []
    for attempt, last in RUNS.items():
        for run in range(last + 1):
            key = TaskRef(job_id=job.id, attempt=attempt, role="main", index=0, task_attempt=run)
            current = (attempt, run) == (1, 2)
            await store_run(logs, key, None if current else 3)
            writes.append(ProfileWrite(profile=profile_of(key), new=True))
    assert await store.profiles.save(writes) == 0
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("alice", "alice-password", admin=False)
    await users.create("bob", "bob-password", admin=False)
    deps = SubmitDeps(settings=Settings.from_env({}), store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        tokens = {}
        for who in ("alice", "bob"):
            login = await test_client.post("/api/v2/authn/basic/login",
                                           json={"username": who, "password": f"{who}-password"})
            tokens[who] = (await login.json())["token"]
        yield Api(test_client, tokens)
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


def task_path(attempt: int) -> str:
    return f"{V2}/attempts/{attempt}/taskRoles/main/taskIndex/0/attempts"


async def test_a_tasks_attempt_id_and_container_log_name_its_run_in_the_detail_and_job_attempts(api: Api) -> None:
    detail = await api.get(V2, schema="V2JobDetail")
    [status] = detail["taskRoles"]["main"]["taskStatuses"]
    assert (status["attemptId"], status["retries"], detail["jobStatus"]["attemptId"]) == (2, 2, 1)
    assert status["containerLog"] == f"{task_path(1)}/2/logs"
    earlier = await api.get(f"{V2}/attempts/0", who="bob", schema="V2JobDetail")
    [was] = earlier["taskRoles"]["main"]["taskStatuses"]
    assert (was["attemptId"], was["containerLog"]) == (1, f"{task_path(0)}/1/logs"), "attempt 0 ended at run 1"
    attempts = await api.get(f"{V2}/job-attempts", schema="V2JobAttempts")
    assert [a["taskRoles"]["main"]["taskStatuses"][0]["attemptId"] for a in attempts] == [1, 2]


async def test_a_tasks_attempts_are_its_runs_latest_first_each_with_its_own_container_exit_and_times(
        api: Api) -> None:
    body = await api.get(task_path(1), schema="V2TaskAttempts")
    assert (body["jobAttemptId"], body["retries"], body["taskState"]) == (1, 2, "RUNNING")
    runs = body["attempts"]
    assert [r["attemptId"] for r in runs] == [2, 1, 0], "latest first, as v1.8's models/v2/task.js"
    assert [r["containerId"] for r in runs] == ["c-1-2", "c-1-1", "c-1-0"]
    assert [(r["attemptState"], r["containerExitCode"]) for r in runs] == [("RUNNING", None), ("FAILED", 3),
                                                                          ("FAILED", 3)]
    assert [r["containerLog"] for r in runs] == [f"{task_path(1)}/{n}/logs" for n in (2, 1, 0)]
    for run in runs[1:]:
        assert run["currentAttemptCreatedTime"] <= run["currentAttemptLaunchedTime"] \
            <= run["currentAttemptCompletedTime"], run
        assert (run["containerNodeName"], run["containerIp"], run["containerGpus"]) == ("n1", "10.0.0.1", 1)
        assert run["containerExitSpec"]["reason"] == "exit 3" and run["containerExitDiagnostics"] == "run failed"
    other = await api.get(task_path(1), who="bob", schema="V2TaskAttempts")
    assert all(r["containerExitDiagnostics"] is None for r in other["attempts"]), "what programs printed: owner's"
    archived = await api.get(task_path(0), schema="V2TaskAttempts")
    assert [(r["attemptId"], r["containerId"]) for r in archived["attempts"]] == [(1, "c-0-1"), (0, "c-0-0")]


async def test_a_tasks_runs_listed_are_bounded(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobreads, "MAX_RUNS_SHOWN", 2)
    body = await api.get(task_path(1), schema="V2TaskAttempts")
    assert [r["attemptId"] for r in body["attempts"]] == [2, 1], "the newest; run 0's log is still reachable"
    await api.get(f"{task_path(1)}/0/logs", schema="V2LogList")


async def test_each_runs_log_list_leads_to_that_runs_log(api: Api) -> None:
    for attempt, last in RUNS.items():
        for run in range(last + 1):
            listed = await api.get(f"{task_path(attempt)}/{run}/logs", schema="V2LogList")
            assert [loc["name"] for loc in listed["locations"]] == ["all", "stdout", "stderr"]
            text, shown = await api.log(listed["locations"][0]["uri"])
            assert (text, shown) == (f"attempt {attempt} run {run}\n", str(run))


@pytest.mark.parametrize(("path", "who", "status", "code"), [
    (f"{task_path(1)}/3/logs", "alice", 404, "NoTaskLogError"),
    (f"{task_path(0)}/2/logs", "alice", 404, "NoTaskLogError"),
    (f"{task_path(1)}/0/logs", "bob", 403, "ForbiddenUserError"),
    (f"{task_path(1)}/0/logs", None, 401, "UnauthorizedUserError"),
    (f"{task_path(1)}/x/logs", "alice", 400, "InvalidParametersError"),
    (f"{task_path(2)}/0/logs", "alice", 404, "NoJobError"),
    (f"{V2}/attempts/1/taskRoles/main/taskIndex/1/attempts", "alice", 404, "NoJobError"),
    (f"{V2}/attempts/1/taskRoles/other/taskIndex/0/attempts/0/logs", "alice", 404, "NoJobError"),
    ("/api/v2/jobs/alice~missing/attempts/0/taskRoles/main/taskIndex/0/attempts", "alice", 404, "NoJobError"),
    (task_path(1), None, 401, "UnauthorizedUserError"),
    (f"{V1}/tasks/main/0/log?taskAttempt=3", "alice", 404, "NoJobError"),
    (f"{V1}/tasks/main/0/log?attempt=0&taskAttempt=2", "alice", 404, "NoJobError"),
    (f"{V1}/tasks/main/0/log?attempt=2", "alice", 404, "NoJobError"),
    (f"{V1}/tasks/main/0/log?taskAttempt=one", "alice", 400, "InvalidParametersError"),
    (f"{V1}/tasks/main/0/log?taskAttempt=0", "bob", 403, "ForbiddenUserError"),
    (f"{V1}/tasks/main/0/profile?taskAttempt=3", None, 404, "NoJobError"),
    (f"{V1}/tasks/main/0/profile?attempt=5", None, 404, "NoJobError"),
    (f"{V1}/tasks/main/0/profile?taskAttempt=-1", None, 400, "InvalidParametersError"),
])
async def test_refusals_as_openpai_answered(api: Api, path: str, who: str | None, status: int, code: str) -> None:
    body = await api.get(path, who=who, status=status)
    assert body["code"] == code, body


async def test_the_v1_log_reads_the_last_run_of_the_attempt_asked_and_any_run_by_task_attempt(api: Api) -> None:
    log = f"{V1}/tasks/main/0/log"
    assert await api.log(log) == ("attempt 1 run 2\n", "2"), "the current attempt's current run"
    assert await api.log(f"{log}?attempt=0") == ("attempt 0 run 1\n", "1"), "an earlier attempt's last run"
    assert await api.log(f"{log}?attempt=0&taskAttempt=0") == ("attempt 0 run 0\n", "0")
    assert await api.log(f"{log}?taskAttempt=1&tail=5&stream=stdout") == ("attempt 1 run 1\n", "1")


async def test_the_task_profile_reads_the_current_run_and_any_run_by_task_attempt(api: Api) -> None:
    profile = f"{V1}/tasks/main/0/profile"
    current = await api.get(profile, who=None, schema="TaskProfile")
    assert (current["attempt"], current["taskAttempt"], current["task"]["taskAttempt"]) == (1, 2, 2)
    assert len(current["points"]) == 4, "run 2's series (run n has n + 2 points)"
    first = await api.get(f"{profile}?taskAttempt=0", who=None, schema="TaskProfile")
    assert (first["taskAttempt"], len(first["points"])) == (0, 2)
    earlier = await api.get(f"{profile}?attempt=0", who=None, schema="TaskProfile")
    assert (earlier["attempt"], earlier["taskAttempt"], len(earlier["points"])) == (0, 1, 3)
    job = await api.get(f"{V1}/profile", who=None, schema="JobProfile")
    assert [(t["taskIndex"], t["taskAttempt"]) for t in job["tasks"]] == [(0, 0), (0, 1), (0, 2)], "each run"
