"""The OpenAPI document's schemas are the models the handlers answer with and read, and the handlers'
real answers match what the document gives for their route and status.

The handlers run in the real aiohttp app, with the store, the users and the bus replaced by fakes that
hold one cluster's worth of records (a queued job, a job that failed after a retry with what its task
printed, a running one with an ssh port); each answer is checked against the document's schema for its
route and status, as a client generated from the document would read it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import BaseModel

from services.submit.app import create_app
from services.submit.contract.answers import ANSWERS, Message
from services.submit.contract.requests import REQUESTS
from services.submit.deps import SubmitDeps
from services.submit.errors import STATUS_OF, ApiError, ErrorCode
from services.submit.openapi import document
from services.submit.routes.ssh import new_job_key
from services.submit.users import Principal, UserInfo
from shared.bus.memory import MemoryBus
from shared.db.idempotency import Submitted
from shared.db.journal import JournalEntry, JournalState, JournalTail
from shared.db.lists.paging import JobPage, JobSummary
from shared.db.profiles import TaskProfile
from shared.events import CloudEvent, dump_event
from shared.jobconfig.sealing import new_key
from shared.profiling.idle import IdleState
from shared.profiling.series import add
from shared.profiling.usage import Usage
from shared.records import AttemptRecord, JobRecord, JobState, NodeRecord, SubState, TaskState
from shared.scheduling.queueing import QueueEntry, Share, entry_of
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from shared.taskref import TaskRef
from shared.tasks.jobkeys import StoredJobKey
from tests.unit.factories import config_dict, make_config, make_job, make_node, make_task, port_dict, role_dict

pytestmark = pytest.mark.unit

DOC = document()
KEYS_KEY = new_key()  # what the fake store's job keys are sealed with (PAIQ_SECRETS_KEY)
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
TOKENS = {"admin-token": Principal("admin", True), "alice-token": Principal("alice", False, ("team",)),
          "bob-token": Principal("bob", False)}
SECRET = "what the task printed: secret-ish"


def queued_job() -> JobRecord:
    job = make_job(make_config(jobName="queued"), state=JobState.WAITING)
    return job.model_copy(update={"reason": "waiting for 1 GPU", "queued_ms": 1})


def failed_job() -> JobRecord:
    task = make_task(state=TaskState.FAILED, node_id="n1", ip="10.0.0.1", gpus=[0, 1], exit_code=1,
                     ports={"http": (20001,)}, completed_ms=2, reason="exit code 1", diagnostics=SECRET)
    job = make_job(make_config(jobName="failed"), tasks=[task], state=JobState.FAILED, attempt=1)
    return job.model_copy(update={"sub_state": SubState.COMPLETED, "exit_code": 1, "exit_phrase": "failed",
                                  "exit_type": "USER_FAILURE", "exit_reason": "task main[0] failed",
                                  "exit_diagnostics": SECRET, "trigger_role": "main", "trigger_index": 0,
                                  "completed_ms": 3, "launched_ms": 1, "retries": 1, "stop_requested_by": "alice"})


def running_job() -> JobRecord:
    config = make_config(role_dict(portList=[port_dict("ssh")]), jobName="running")
    task = make_task(state=TaskState.RUNNING, node_id="n1", ip="10.0.0.1", ports={"ssh": (20002,)})
    return make_job(config, tasks=[task]).model_copy(update={"sub_state": SubState.RUNNING})


ATTEMPT = AttemptRecord(attempt=0, tasks=(make_task(state=TaskState.FAILED, exit_code=2, diagnostics=SECRET),),
                        launched_ms=1, completed_ms=2, exit_code=2, exit_phrase="failed", trigger_role="main",
                        trigger_index=0)


def sampled(job: JobRecord, gpus: tuple[int, ...] = (0,)) -> TaskProfile:
    """A task profile after three samples (a GPU held and flagged idle)."""
    profile = TaskProfile(id=f"{job.id}/0/main/0", job_id=job.id, attempt=0, role="main", index=0, node_id="n1",
                          cpus=1, gpus=gpus, mem_limit=512 * 2**20, interval_ms=10_000)
    for t in range(1, 4):
        point = Usage(t_ms=t * 10_000, span_ms=10_000, cpu=0.5, mem=100 * 2**20, mem_peak=120 * 2**20,
                      blk_read=0.0, blk_write=1024.0, gpu_util=1.0, gpu_mem=2**30)
        profile = profile.model_copy(update={"series": add(profile.series, point).series, "last": point,
                                             "totals": profile.totals.plus(point, len(gpus))})
    return profile.model_copy(update={"idle": IdleState(since_ms=0, peak_percent=1.0, flagged=True, below_percent=5)})


@dataclass
class FakeProfiles:
    """The stored profiles the handlers read, held in memory."""

    found: list[TaskProfile]

    async def of_job(self, job_id: str, attempt: int) -> list[TaskProfile]:
        return [p for p in self.found if (p.job_id, p.attempt) == (job_id, attempt)]

    async def get(self, key: TaskRef) -> TaskProfile | None:
        return next((p for p in self.found if p.id == key.id), None)


class FakeJournal:
    """The journal in memory: what is recorded is numbered at once."""

    def __init__(self) -> None:
        self.tail = JournalTail()
        self.entries: list[JournalEntry] = []

    def add(self, events: Sequence[CloudEvent]) -> None:
        for event in events:
            seq = len(self.entries) + 1
            self.entries.append(JournalEntry(seq=seq, id=event.id, job=event.subject, type=event.routing_key,
                                             at_ms=1, body=dump_event(event).decode()))
            self.tail.advanced(seq)

    async def state(self) -> JournalState:
        return JournalState(last=len(self.entries), published=len(self.entries))

    async def read(self, after: int, limit: int = 500, through: int | None = None) -> list[JournalEntry]:
        return [e for e in self.entries if after < e.seq <= min(after + limit, through or after + limit)]

    async def number_of(self, event_id: str) -> int | None:
        return next((e.seq for e in self.entries if e.id == event_id), None)

    async def number_at(self, time_ms: int) -> int:
        return 0


@dataclass
class FakeStore:
    """What the handlers read of the store, held in memory."""

    jobs: list[JobRecord] = field(default_factory=lambda: [queued_job(), failed_job(), running_job()])
    keys: dict[str, StoredJobKey] = field(default_factory=dict)
    nodes: list[NodeRecord] = field(default_factory=lambda: [make_node(gpus=["V100", "V100"])])
    vcs: list[VirtualCluster] = field(default_factory=lambda: [
        VirtualCluster(name="research", quota=Quota(cpus=25, memory=25, gpus=50), groups=("team",))])

    profiles: FakeProfiles = field(default_factory=lambda: FakeProfiles([]))
    journal: FakeJournal = field(default_factory=lambda: FakeJournal())

    def __post_init__(self) -> None:
        self.keys = {j.id: new_job_key(j, ()).sealed(KEYS_KEY) for j in self.jobs}
        self.profiles = FakeProfiles([sampled(j) for j in self.jobs if j.name == "running"])

    async def list_jobs(self, *, user: str | None = None, state: str | None = None, limit: int = 1000,
                        offset: int = 0, cursor: object = None) -> JobPage:
        found = [j for j in self.jobs if user in (None, j.user) and state in (None, j.state.value)]
        page = [JobSummary.model_validate(j.to_document()) for j in found[offset:offset + limit]]
        return JobPage(page, "next-cursor" if len(found) > offset + limit else None)

    async def queue_order(self) -> list[QueueEntry]:
        return [entry_of(j) for j in self.jobs if j.sub_state == SubState.QUEUED]

    async def queue_shares(self) -> dict[str, dict[str, Share]]:
        return {}

    async def find_job(self, user: str, name: str) -> JobRecord | None:
        return next((j for j in self.jobs if (j.user, j.name) == (user, name)), None)

    async def get_job(self, job_id: str) -> JobRecord | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    async def attempts_of(self, job_id: str) -> list[AttemptRecord]:
        return [ATTEMPT]

    async def job_key(self, job_id: str) -> StoredJobKey | None:
        return self.keys.get(job_id)

    async def put_job_key(self, key: StoredJobKey) -> None:
        self.keys[key.job_id] = key

    async def insert_job(self, job: JobRecord, document: object = None) -> None:
        self.jobs.append(job)

    async def submit_job(self, job: JobRecord, document: object, key: StoredJobKey | None,
                         idempotency: object = None, events: Sequence[CloudEvent] = ()) -> Submitted:
        if key is not None:
            await self.put_job_key(key)
        await self.insert_job(job)
        self.journal.add(events)
        return Submitted.STORED

    async def idempotent_submission(self, user: str, key: str) -> None:
        return None

    async def update_job(self, job_id: str, expect: object, changes: object,
                         events: Sequence[CloudEvent] = ()) -> JobRecord | None:
        job = await self.get_job(job_id)
        if job is None or job.state.is_final:
            return None
        self.journal.add(events)
        return job

    async def delete_job(self, job_id: str) -> bool:
        self.jobs = [j for j in self.jobs if j.id != job_id]
        return True

    async def list_vcs(self) -> list[VirtualCluster]:
        return self.vcs

    async def put_vc(self, vc: VirtualCluster) -> None:
        self.vcs = [*[v for v in self.vcs if v.name != vc.name], vc]

    async def list_nodes(self) -> list[NodeRecord]:
        return self.nodes

    async def jobs_holding_resources(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.state == JobState.RUNNING]

    async def job_counts_by_vc_and_state(self) -> dict[str, dict[str, int]]:
        return {"default": {"WAITING": 1, "FAILED": 1, "RUNNING": 1}}


class FakeUsers:
    async def principal(self, token: str) -> Principal | None:
        return TOKENS.get(token)

    async def login(self, user: str, password: str, expiration_s: int) -> tuple[str, bool]:
        if password != "right-password":
            raise ApiError("UnauthorizedUserError", "user name or password is wrong")
        return f"{user}-token", TOKENS[f"{user}-token"].admin

    async def list_all(self) -> list[UserInfo]:
        return [UserInfo(name=p.user, admin=p.admin, groups=p.groups) for p in TOKENS.values()]

    async def get(self, user: str) -> UserInfo | None:
        return next((u for u in await self.list_all() if u.name == user), None)

    async def update(self, user: str, **_: object) -> None:
        return None


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    settings = Settings.from_env({})
    deps = SubmitDeps(settings=settings, store=cast(Any, FakeStore()), bus=MemoryBus(),
                      users=cast(Any, FakeUsers()))
    async with TestClient(TestServer(create_app(deps))) as test_client:
        yield test_client
    deps.cpu.shutdown()


def route_of(path: str) -> str:
    """The document's route for a concrete path."""
    for route in DOC["paths"]:
        if re.fullmatch(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(route)), path):
            return route
    raise AssertionError(f"no documented route for {path}")


# (method, path, token, body, the status it answers): every JSON answer the handlers give, and some errors.
CASES: list[tuple[str, str, str | None, Any, int]] = [
    ("GET", "/api/v1/jobs", None, None, 200),
    ("GET", "/api/v1/jobs?limit=1", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs?state=WAITING", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/queued", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/failed", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/failed", "alice-token", None, 200),
    ("GET", "/api/v1/user/alice/jobs/running", "admin-token", None, 200),
    ("GET", "/api/v1/user/alice/jobs/running/ssh", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/missing", None, None, 404),
    ("GET", "/api/v1/user/alice/jobs/running/profile", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/queued/profile", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/running/profile?attempt=x", None, None, 400),
    ("GET", "/api/v1/user/alice/jobs/missing/profile", None, None, 404),
    ("GET", "/api/v1/user/alice/jobs/running/tasks/main/0/profile", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/running/tasks/main/0/profile?since=20000", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/queued/tasks/main/0/profile", None, None, 200),
    ("GET", "/api/v1/user/alice/jobs/running/tasks/main/7/profile", None, None, 404),
    ("GET", "/api/v1/user/alice/jobs/running/tasks/main/0/profile?since=soon", None, None, 400),
    ("GET", "/api/v1/user/alice/jobs/running/ssh/nope", None, None, 404),
    ("POST", "/api/v1/user/alice/jobs", "alice-token", config_dict(jobName="new", colour="blue"), 202),
    ("POST", "/api/v1/user/alice/jobs", "alice-token", config_dict(jobName="new2", virtualCluster="nope"), 404),
    ("PUT", "/api/v1/user/alice/jobs/renamed", "alice-token", config_dict(jobName="other"), 202),
    ("POST", "/api/v1/user/alice/jobs", "bob-token", config_dict(), 403),
    ("POST", "/api/v1/user/alice/jobs", None, config_dict(), 401),
    ("PUT", "/api/v1/user/alice/jobs/running/executionType", "alice-token", {"value": "STOP"}, 202),
    ("PUT", "/api/v1/user/alice/jobs/failed/executionType", "alice-token", {"value": "STOP"}, 200),
    ("PUT", "/api/v1/user/alice/jobs/failed/executionType", "alice-token", {"value": "GO"}, 400),
    ("DELETE", "/api/v1/user/alice/jobs/failed", "alice-token", None, 202),
    ("DELETE", "/api/v1/user/alice/jobs/running", "alice-token", None, 202),
    ("GET", "/api/v1/virtual-clusters", None, None, 200),
    ("GET", "/api/v1/virtual-clusters/research", None, None, 200),
    ("GET", "/api/v1/virtual-clusters/nope", None, None, 404),
    ("PUT", "/api/v1/virtual-clusters/lab", "admin-token", {"quota": {"gpus": 10}}, 200),
    ("PUT", "/api/v1/virtual-clusters/lab", "alice-token", {"quota": {"gpus": 10}}, 403),
    ("PUT", "/api/v1/virtual-clusters/lab", "admin-token", {"quota": {"gpus": 10}, "borrowing": {"gpus": 20}}, 200),
    ("PUT", "/api/v1/virtual-clusters/lab", "admin-token", {"borrowing": {"gpus": 101}}, 400),
    ("PUT", "/api/v1/virtual-clusters/default", "admin-token", {"borrowing": {"gpus": 20}}, 200),
    ("PUT", "/api/v1/virtual-clusters/default", "admin-token", {"quota": {"gpus": 20}}, 400),
    ("POST", "/api/v1/token", None, {"username": "alice", "password": "right-password", "expiration": "60"}, 200),
    ("POST", "/api/v1/token", None, {"username": "alice", "password": "wrong"}, 401),
    ("POST", "/api/v1/token", None, {"username": "alice", "password": "x", "expiration": 0}, 400),
    ("GET", "/api/v1/user", "admin-token", None, 200),
    ("GET", "/api/v1/user", "alice-token", None, 403),
    ("GET", "/api/v1/user/alice", "alice-token", None, 200),
    ("GET", "/api/v1/user/nobody", "admin-token", None, 400),
    ("PUT", "/api/v1/user", "admin-token", {"username": "alice", "modify": True, "groups": ["a"]}, 200),
    ("PUT", "/api/v1/user", "admin-token", {"username": "carol", "password": "short"}, 400),
    ("GET", "/api/v1/whoami", "alice-token", None, 200),
    ("GET", "/api/v1/whoami", "nobody's", None, 401),
    ("GET", "/healthz", None, None, 200),
    ("GET", "/livez", None, None, 200),
]


async def documented_answer(client: TestClient[Any, Any], method: str, path: str, token: str | None, body: Any,
                            status: int) -> Any:
    """The answer to a request, once its status is ``status`` and it holds to the schema the served
    document gives that route and status."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = await client.request(method, path, json=body, headers=headers)
    answer = await resp.json()
    assert resp.status == status, answer
    responses = DOC["paths"][route_of(path.partition("?")[0])][method.lower()]["responses"]
    assert str(status) in responses, (method, path, status)
    schema = responses[str(status)]["content"]["application/json"]["schema"]
    jsonschema.validate(answer, {**schema, "components": DOC["components"]})
    return answer


@pytest.mark.parametrize(("method", "path", "token", "body", "status"), CASES,
                         ids=[f"{m} {p} {s}" for m, p, _, _, s in CASES])
async def test_each_answer_matches_its_documented_schema(client: TestClient[Any, Any], method: str, path: str,
                                                         token: str | None, body: Any, status: int) -> None:
    answer = await documented_answer(client, method, path, token, body, status)
    if status >= 400:
        assert STATUS_OF[answer["code"]] == status or (answer["code"], status) == ("NoUserError", 400)


async def test_a_job_detail_shows_what_its_tasks_printed_only_to_its_owner(client: TestClient[Any, Any]) -> None:
    owner = await (await client.get("/api/v1/user/alice/jobs/failed",
                                    headers={"Authorization": "Bearer alice-token"})).json()
    anyone = await (await client.get("/api/v1/user/alice/jobs/failed",
                                     headers={"Authorization": "Bearer bob-token"})).json()
    assert owner["jobStatus"]["appExitDiagnostics"] == SECRET
    assert owner["jobStatus"]["attempts"][0]["taskStatuses"][0]["containerExitDiagnostics"] == SECRET
    assert SECRET not in str(anyone)
    assert anyone["jobStatus"]["appExitDiagnostics"] == ""
    assert anyone["taskRoles"]["main"]["taskStatuses"][0]["containerExitDiagnostics"] == ""


async def test_answers_send_null_for_what_has_no_value_and_leave_out_no_warnings(
        client: TestClient[Any, Any]) -> None:
    """OpenPAI's shapes: every field present (null where unset), ``warnings`` only where there are some."""
    detail = await (await client.get("/api/v1/user/alice/jobs/queued")).json()
    status = detail["jobStatus"]
    assert status["appExitSpec"] is None and status["completedTime"] is None and status["queuePosition"] == 1
    assert status["usage"] is None, "nothing sampled yet"
    assert detail["taskRoles"]["main"]["taskStatuses"][0]["containerGpus"] is None
    listed = await (await client.get("/api/v1/jobs")).json()
    assert set(listed[0]) == set(SCHEMAS["JobSummary"]["properties"])
    headers = {"Authorization": "Bearer alice-token"}
    plain = await client.post("/api/v1/user/alice/jobs", json=config_dict(jobName="plain"), headers=headers)
    assert await plain.json() == {"message": "update job plain successfully"}
    warned = await client.post("/api/v1/user/alice/jobs", json=config_dict(jobName="warned", tmp=1), headers=headers)
    assert (await warned.json())["warnings"] == ["tmp: unknown field, ignored (kept in the stored config)"]


@pytest.mark.parametrize("model", [*ANSWERS, *REQUESTS], ids=lambda m: m.__name__)
def test_every_model_is_a_schema_of_the_document_and_some_route_uses_it(model: type[BaseModel]) -> None:
    assert model.__name__ in SCHEMAS
    paths = repr(DOC["paths"])
    used = f"#/components/schemas/{model.__name__}'" in paths or any(
        f"#/components/schemas/{model.__name__}'" in repr(SCHEMAS[other]) for other in SCHEMAS
        if f"#/components/schemas/{other}'" in paths)
    assert used, f"{model.__name__} is in the document but no route answers or reads it"


def test_the_schemas_are_the_models_own() -> None:
    """A field added to a model is in the document: the component lists exactly the model's fields."""
    for model in ANSWERS:
        props = SCHEMAS[model.__name__].get("properties")
        if props is not None:
            assert set(props) == {f.alias or n for n, f in model.model_fields.items()}, model.__name__
    assert SCHEMAS["Message"]["required"] == ["message"], "warnings are left out when there are none"


def test_every_error_code_has_a_status_and_the_error_schema_lists_them_all() -> None:
    assert set(SCHEMAS["Error"]["properties"]["code"]["enum"]) == set(STATUS_OF) == set(
        ErrorCode.__args__)  # type: ignore[attr-defined]


def test_a_message_leaves_out_warnings_only_when_there_are_none() -> None:
    assert Message(message="m").model_dump(by_alias=True) == {"message": "m"}
    assert Message(message="m", warnings=("w",)).model_dump(by_alias=True) == {"message": "m", "warnings": ("w",)}


async def test_a_job_detail_and_its_profile_sum_what_its_tasks_used(client: TestClient[Any, Any]) -> None:
    usage = (await (await client.get("/api/v1/user/alice/jobs/running")).json())["jobStatus"]["usage"]
    profile = await (await client.get("/api/v1/user/alice/jobs/running/profile")).json()
    assert profile["usage"] == usage and profile["attempt"] == 0 and profile["intervalSeconds"] == 10
    assert usage["tasksSampled"] == 1 and usage["gpuHoursHeld"] == pytest.approx(30 / 3600, abs=1e-6)
    assert usage["gpuUtilization"] == 1.0 and usage["memoryPeakTask"] == "main[0]"
    assert usage["memoryPeakBytes"] == 120 * 2**20 and usage["memoryLimitBytes"] == 512 * 2**20
    assert usage["idleGpuTasks"] == ["main[0]"]
    assert usage["warnings"] == ["task main[0] held 1 GPU used under 5% (at most 1.0%) for 30 s"]
    [task] = profile["tasks"]
    assert task["samples"] == 3 and task["cpuCoreSeconds"] == 15 and task["gpuIdle"] is True
    assert task["last"]["time"] == 30_000 and task["last"]["networkReceiveBytesPerSecond"] is None
    series = await (await client.get("/api/v1/user/alice/jobs/running/tasks/main/0/profile?since=10000")).json()
    assert [p["time"] for p in series["points"]] == [20_000, 30_000] and series["task"] == task
    empty = await (await client.get("/api/v1/user/alice/jobs/queued/tasks/main/0/profile")).json()
    assert empty["task"] is None and empty["points"] == [] and empty["intervalSeconds"] is None
