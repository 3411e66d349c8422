"""OpenPAI v1.8's ``/api/v2/jobs`` reads and changes in the real aiohttp app, with the fake store of
:mod:`tests.unit.test_openapi_answers`: each route's status, keys and types against the document (whose
schemas are OpenPAI's shapes, :mod:`services.submit.contract.v2.jobs`), and 401/403/404/409 as OpenPAI
answered them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.errors import STATUS_OF
from services.submit.openapi import document
from shared.bus.memory import MemoryBus
from shared.db.lists.paging import JobPage, JobSummary
from shared.db.tags import MAX_TAGS, TagsFullError
from shared.keywords import keyword_query, name_keys, words
from shared.settings.model import Settings
from tests.unit.test_openapi_answers import SECRET, FakeStore, FakeUsers, documented_answer

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

DOC = document()
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]


@dataclass
class V2FakeStore(FakeStore):
    """The fake store with the v2 list's filters, its counters and tags."""

    tags: dict[str, list[str]] = field(default_factory=dict)
    asked: list[dict[str, Any]] = field(default_factory=list)

    async def list_jobs(self, *, user: str | None = None, state: str | None = None, limit: int = 1000,
                        offset: int = 0, cursor: object = None, vc: str | None = None, keyword: str | None = None,
                        tags: tuple[str, ...] = ()) -> JobPage:
        self.asked.append({"user": user, "state": state, "vc": vc, "keyword": keyword, "tags": tags})
        key = keyword_query(keyword)["name_keys"] if keyword else None
        found = [j for j in self.jobs if user in (None, j.user) and state in (None, j.state.value)
                 and vc in (None, j.virtual_cluster) and (key is None or key in name_keys(j.name))
                 and (not tags or set(tags) & set(self.tags.get(j.id, [])))]
        page = [JobSummary.model_validate({**j.to_document(), "tags": self.tags.get(j.id, [])})
                for j in found[offset:offset + limit]]
        return JobPage(page, "next-cursor" if len(found) > offset + limit else None)

    async def count_jobs(self, *, user: str | None = None, state: str | None = None,
                         vc: str | None = None) -> int | None:
        if vc and user:
            return None
        return sum(1 for j in self.jobs if user in (None, j.user) and state in (None, j.state.value)
                   and vc in (None, j.virtual_cluster))

    async def tags_of(self, job_id: str) -> tuple[str, ...]:
        return tuple(self.tags.get(job_id, []))

    async def add_tag(self, job_id: str, tag: str) -> None:
        held = self.tags.setdefault(job_id, [])
        if tag not in held:
            if len(held) >= MAX_TAGS:
                raise TagsFullError(job_id)
            held.append(tag)

    async def delete_tag(self, job_id: str, tag: str) -> bool:
        held = self.tags.get(job_id, [])
        if tag not in held:
            return False
        held.remove(tag)
        return True


@pytest.fixture
async def env() -> AsyncIterator[tuple[TestClient[Any, Any], V2FakeStore]]:
    store = V2FakeStore()
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, store), bus=MemoryBus(),
                      users=cast(Any, FakeUsers()))
    async with TestClient(TestServer(create_app(deps))) as client:
        yield client, store
    deps.cpu.shutdown()


JOB = "/api/v2/jobs/alice~"
TASK = JOB + "failed/attempts/1/taskRoles/main/taskIndex/0/attempts"
# (method, path, token, body, status): every route of /api/v2/jobs this module serves, with its errors.
CASES: list[tuple[str, str, str | None, Any, int]] = [
    ("GET", "/api/v2/jobs", "alice-token", None, 200),
    ("GET", "/api/v2/jobs?withTotalCount=true", "alice-token", None, 200),
    ("GET", "/api/v2/jobs?username=alice&vc=default&state=FAILED&offset=0&limit=2&order=submissionTime,DESC",
     "bob-token", None, 200),
    ("GET", "/api/v2/jobs?keyword=FAI&withTotalCount=true", "alice-token", None, 200),
    ("GET", "/api/v2/jobs?tagsContain=a,b", "alice-token", None, 200),
    ("GET", "/api/v2/jobs", None, None, 401),
    ("GET", "/api/v2/jobs?username=alice,bob&state=FAILED,WAITING&withTotalCount=true", "alice-token", None, 200),
    ("GET", "/api/v2/jobs?username=" + ",".join(f"u{i}" for i in range(17)), "alice-token", None, 400),
    ("GET", "/api/v2/jobs?username=alice,bob,carol&state=FAILED,WAITING,RUNNING&vc=a,b", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?order=jobName,UP", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?order=name,ASC", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?state=DONE", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?limit=50000", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?vc=default&offset=9999&limit=2", "alice-token", None, 400),
    ("GET", "/api/v2/jobs?tagsNotContain=a&tagsContain=b&username=alice", "alice-token", None, 200),
    ("GET", "/api/v2/jobs?tagsNotContain=a&username=alice,bob", "alice-token", None, 400),
    ("GET", JOB + "failed", "alice-token", None, 200),
    ("GET", JOB + "queued", "bob-token", None, 200),
    ("GET", JOB + "failed", None, None, 401),
    ("GET", JOB + "missing", "alice-token", None, 404),
    ("GET", JOB + "failed/attempts/0", "alice-token", None, 200),
    ("GET", JOB + "failed/attempts/1", "alice-token", None, 200),
    ("GET", JOB + "failed/attempts/2", "alice-token", None, 404),
    ("GET", JOB + "failed/attempts/x", "alice-token", None, 400),
    ("GET", JOB + "failed/job-attempts", "alice-token", None, 200),
    ("GET", JOB + "failed/job-attempts/0", "bob-token", None, 200),
    ("GET", JOB + "failed/job-attempts/3", "alice-token", None, 404),
    ("GET", JOB + "missing/job-attempts", "alice-token", None, 404),
    ("GET", TASK, "alice-token", None, 200),
    ("GET", JOB + "failed/attempts/1/taskRoles/main/taskIndex/9/attempts", "alice-token", None, 404),
    ("GET", TASK + "/0/logs", "alice-token", None, 200),
    ("GET", TASK + "/0/logs", "bob-token", None, 403),
    ("GET", TASK + "/1/logs", "alice-token", None, 404),
    ("GET", JOB + "failed/events", "bob-token", None, 200),
    ("GET", JOB + "queued/events?type=Warning", "alice-token", None, 200),
    ("GET", JOB + "failed/events?type=Info", "alice-token", None, 400),
    ("GET", JOB + "missing/events", "alice-token", None, 404),
    ("GET", JOB + "running/ssh", "bob-token", None, 200),
    ("GET", JOB + "running/ssh", None, None, 401),
    ("PUT", JOB + "running/executionType", "alice-token", {"value": "STOP"}, 202),
    ("PUT", JOB + "running/executionType", "bob-token", {"value": "STOP"}, 403),
    ("PUT", JOB + "running/executionType", "alice-token", {"value": "GO"}, 400),
    ("PUT", JOB + "missing/executionType", "alice-token", {"value": "STOP"}, 404),
    ("PUT", JOB + "failed/tag", "alice-token", {"value": "best"}, 200),
    ("PUT", JOB + "failed/tag", "admin-token", {"value": "best"}, 200),
    ("PUT", JOB + "failed/tag", "bob-token", {"value": "best"}, 403),
    ("PUT", JOB + "failed/tag", "alice-token", {"value": "a,b"}, 400),
    ("PUT", JOB + "failed/tag", None, {"value": "best"}, 401),
    ("DELETE", JOB + "failed/tag", "alice-token", {"value": "never"}, 404),
    ("DELETE", JOB + "missing/tag", "alice-token", {"value": "never"}, 404),
]


@pytest.mark.parametrize(("method", "path", "token", "body", "status"), CASES,
                         ids=[f"{m} {p} {s}" for m, p, _, _, s in CASES])
async def test_each_v2_job_route_answers_its_documented_shape(env: tuple[TestClient[Any, Any], V2FakeStore],
                                                              method: str, path: str, token: str | None, body: Any,
                                                              status: int) -> None:
    client, _ = env
    answer = await documented_answer(client, method, path, token, body, status)
    if status >= 400:
        assert STATUS_OF[answer["code"]] == status


def _keys(model: str) -> set[str]:
    return set(SCHEMAS[model]["properties"])


async def test_the_list_item_has_openpai_v1_8s_keys_and_the_filters_reach_the_store(
        env: tuple[TestClient[Any, Any], V2FakeStore]) -> None:
    client, store = env
    alice = {"Authorization": "Bearer alice-token"}
    listed = await (await client.get("/api/v2/jobs", headers=alice)).json()
    assert {"debugId", "name", "username", "state", "subState", "executionType", "tags", "retries", "retryDetails",
            "retryDelayTime", "submissionTime", "createdTime", "launchedTime", "completedTime", "appExitCode",
            "virtualCluster", "totalGpuNumber", "totalTaskNumber", "totalTaskRoleNumber",
            "jobPriority"} == set(listed[0]) == _keys("V2JobSummary")
    paged = await (await client.get("/api/v2/jobs?withTotalCount=true&limit=1", headers=alice)).json()
    assert set(paged) == {"totalCount", "data"} and paged["totalCount"] == 3 and len(paged["data"]) == 1
    found = await (await client.get("/api/v2/jobs?keyword=fail&withTotalCount=true", headers=alice)).json()
    assert [j["name"] for j in found["data"]] == ["failed"] and found["totalCount"] == 1, "a lower bound: no counter"
    union = await (await client.get("/api/v2/jobs?username=alice,bob&state=FAILED,WAITING&withTotalCount=true&limit=1",
                                    headers=alice)).json()
    newest = min((j for j in store.jobs if j.name in ("queued", "failed")), key=lambda j: (-j.created_ms, j.id))
    assert union["totalCount"] == 2 and [j["name"] for j in union["data"]] == [newest.name], "merged newest first"
    await client.get("/api/v2/jobs?username=alice&vc=default&state=FAILED", headers=alice)
    assert store.asked[-1] == {"user": "alice", "state": "FAILED", "vc": "default", "keyword": None, "tags": ()}


async def test_a_tag_is_stored_shown_and_filtered_and_removed(env: tuple[TestClient[Any, Any], V2FakeStore]) -> None:
    client, _ = env
    alice = {"Authorization": "Bearer alice-token"}
    put = await client.put(JOB + "failed/tag", json={"value": "best"}, headers=alice)
    assert await put.json() == {"status": 200, "message": "Add tag best for job alice~failed successfully."}
    detail = await (await client.get(JOB + "failed", headers=alice)).json()
    assert detail["tags"] == ["best"]
    tagged = await (await client.get("/api/v2/jobs?tagsContain=best", headers=alice)).json()
    assert [j["name"] for j in tagged] == ["failed"] and tagged[0]["tags"] == ["best"]
    everyone = [j["name"] for j in await (await client.get("/api/v2/jobs", headers=alice)).json()]
    untagged = await (await client.get("/api/v2/jobs?tagsNotContain=best,other", headers=alice)).json()
    assert [j["name"] for j in untagged] == [n for n in everyone if n != "failed"]
    gone = await client.delete(JOB + "failed/tag", json={"value": "best"}, headers=alice)
    assert (await gone.json())["message"] == "Delete tag best from job alice~failed successfully."
    again = await client.delete(JOB + "failed/tag", json={"value": "best"}, headers=alice)
    assert again.status == 404 and await again.json() == {
        "code": "NoTagError", "message": "Tag best is not found for job alice~failed."}


async def test_the_detail_has_openpai_v1_8s_keys_and_shows_what_tasks_printed_only_to_the_owner(
        env: tuple[TestClient[Any, Any], V2FakeStore]) -> None:
    client, _ = env
    owner = await (await client.get(JOB + "failed", headers={"Authorization": "Bearer alice-token"})).json()
    other = await (await client.get(JOB + "failed", headers={"Authorization": "Bearer bob-token"})).json()
    assert set(owner) == {"debugId", "name", "tags", "jobPriority", "jobStatus", "taskRoles", "tensorboardAddress"}
    assert owner["tensorboardAddress"] is None, "no tensorboard plugin"
    assert set(owner["jobStatus"]) == _keys("V2JobStatus") and "appExitTriggerTaskRoleName" in owner["jobStatus"]
    assert owner["jobStatus"]["attemptId"] == 1 and owner["jobStatus"]["appExitDiagnostics"] == SECRET
    task = owner["taskRoles"]["main"]["taskStatuses"][0]
    assert set(task) == _keys("V2TaskStatus") and task["containerGpus"] == 3, "GPUs 0 and 1 as OpenPAI's bitmask"
    assert task["containerLog"].endswith("/attempts/1/taskRoles/main/taskIndex/0/attempts/0/logs"), "its run 0"
    assert SECRET not in str(other)
    earlier = await (await client.get(JOB + "failed/attempts/0", headers={"Authorization": "Bearer bob-token"})).json()
    assert earlier["jobStatus"]["attemptId"] == 0 and earlier["jobStatus"]["appExitCode"] == 2
    attempts = await (await client.get(JOB + "failed/job-attempts",
                                       headers={"Authorization": "Bearer alice-token"})).json()
    assert [(a["attemptIndex"], a["isLatest"]) for a in attempts] == [(0, False), (1, True)]
    missing = await client.get(JOB + "failed/attempts/2", headers={"Authorization": "Bearer alice-token"})
    assert (await missing.json())["message"] == "JobAttemptId 2 is not found in alice~failed."


@pytest.mark.parametrize(("name", "keyword", "found"), [
    ("tf-mnistTrain_v2", "mnist", True), ("tf-mnistTrain_v2", "TRAIN", True), ("tf-mnistTrain_v2", "v2", True),
    ("tf-mnistTrain_v2", "tf-mn", True), ("tf-mnistTrain_v2", "nist", False), ("HTTPServer2x", "server2", True),
    ("job.42", "42", True), ("a" * 40, "a" * 30, True), ("b" * 40, "a" * 30, False),
])
def test_a_keyword_is_a_prefix_of_the_name_or_of_a_word_of_it(name: str, keyword: str, found: bool) -> None:
    query = keyword_query(keyword)
    assert (query["name_keys"] in name_keys(name)) is found
    assert words("tf-mnistTrain_v2") == ["tf", "mnist", "train", "v2"]
    assert len(name_keys("x-" * 127)) <= 24 + 8, "a job's keys are bounded whatever its name"


async def test_events_are_derived_from_the_jobs_record_newest_first(
        env: tuple[TestClient[Any, Any], V2FakeStore]) -> None:
    client, _ = env
    alice = {"Authorization": "Bearer alice-token"}
    failed = await (await client.get(JOB + "failed/events", headers=alice)).json()
    assert failed["totalCount"] == len(failed["data"]) and failed["data"][0]["reason"] == "Failed"
    assert set(failed["data"][0]) == _keys("V2JobEvent")
    queued = await (await client.get(JOB + "queued/events?type=Warning", headers=alice)).json()
    assert [(e["reason"], e["message"]) for e in queued["data"]] == [("FailedScheduling", "waiting for 1 GPU")]


async def test_the_job_attempts_health_check_answers_ok_to_a_token(
        env: tuple[TestClient[Any, Any], V2FakeStore]) -> None:
    client, _ = env
    ok = await client.get(JOB + "failed/job-attempts/healthz", headers={"Authorization": "Bearer bob-token"})
    assert ok.status == 200 and await ok.text() == "ok"
    assert (await client.get(JOB + "failed/job-attempts/healthz")).status == 401
