"""OpenPAI v1.8's ``/api/v2/jobs`` reads and changes on a real finished job, on `paiq up` (the same submit code
answers in both shapes): the list's filters (username, vc, state, keyword, tagsContain, withTotalCount), the
detail, its attempts, a task's attempts and log list (whose address serves what the task printed), a tag, and
401 without a token."""

from __future__ import annotations

from typing import Any

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import ALL_IN_ONE_ONLY, raw
from tests.infra import Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240), ALL_IN_ONE_ONLY]  # the API's own reads

SUMMARY_KEYS = {"debugId", "name", "username", "state", "subState", "executionType", "tags", "retries",
                "retryDetails", "retryDelayTime", "submissionTime", "createdTime", "launchedTime", "completedTime",
                "appExitCode", "virtualCluster", "totalGpuNumber", "totalTaskNumber", "totalTaskRoleNumber",
                "jobPriority"}


def v2_yaml(name: str) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: busybox, type: dockerimage, uri: "local/busybox:latest"}}
taskRoles:
  main:
    instances: 1
    dockerImage: busybox
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands:
      - echo v2-list-e2e from $PAI_CURRENT_TASK_ROLE_NAME
"""


async def test_a_finished_v2_job_is_listed_filtered_detailed_and_tagged(platform: Platform, api: PaiqClient,
                                                                        user: str) -> None:
    name = unique("trainMnist-")
    await api.submit_v2(v2_yaml(name).encode())
    detail, seen = await wait_final(api, user, name)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail)
    token = {"Authorization": f"Bearer {api._token}"}

    async def get(path: str) -> Any:
        status, body, _ = await raw(platform, "GET", path, headers=token)
        assert status == 200, (path, status, body)
        return body

    listed = await get(f"/api/v2/jobs?username={user}")
    assert [j["name"] for j in listed] == [name] and set(listed[0]) == SUMMARY_KEYS
    assert listed[0]["state"] == "SUCCEEDED" and listed[0]["totalTaskNumber"] == 1
    page = await get(f"/api/v2/jobs?username={user}&vc=default&state=SUCCEEDED&keyword=MNIST&withTotalCount=true")
    assert [j["name"] for j in page["data"]] == [name] and page["totalCount"] == 1
    assert await get(f"/api/v2/jobs?username={user}&keyword=nist") == [], "a prefix of a word, not any substring"
    counted = await get(f"/api/v2/jobs?username={user}&state=SUCCEEDED&withTotalCount=true")
    assert counted["totalCount"] == 1, "from the counters"
    status, _, _ = await raw(platform, "GET", "/api/v2/jobs")
    assert status == 401

    job = await get(f"/api/v2/jobs/{user}~{name}")
    assert job["name"] == name and job["jobStatus"]["state"] == "SUCCEEDED" and job["jobStatus"]["appExitCode"] == 0
    task = job["taskRoles"]["main"]["taskStatuses"][0]
    assert task["taskState"] == "SUCCEEDED" and task["containerExitCode"] == 0
    events = await get(f"/api/v2/jobs/{user}~{name}/events")
    assert {e["reason"] for e in events["data"]} == {"Scheduled", "Started", "Completed"}, events
    attempts = await get(f"/api/v2/jobs/{user}~{name}/job-attempts")
    assert [(a["attemptIndex"], a["isLatest"], a["state"]) for a in attempts] == [(0, True, "SUCCEEDED")]
    one = await get(task["containerLog"].rsplit("/", 2)[0])
    assert one["taskRoleName"] == "main" and [a["attemptId"] for a in one["attempts"]] == [0]
    logs = await get(task["containerLog"])
    uri = {loc["name"]: loc["uri"] for loc in logs["locations"]}["stdout"]
    status, text, _ = await raw(platform, "GET", uri, headers=token)
    assert status == 200 and "v2-list-e2e from main" in text

    status, body, _ = await raw(platform, "PUT", f"/api/v2/jobs/{user}~{name}/tag", json={"value": "golden"},
                                headers=token)
    assert status == 200, body
    tagged = await get(f"/api/v2/jobs?tagsContain=golden&username={user}")
    assert [(j["name"], j["tags"]) for j in tagged] == [(name, ["golden"])]
    assert (await get(f"/api/v2/jobs/{user}~{name}"))["tags"] == ["golden"]
    status, body, _ = await raw(platform, "DELETE", f"/api/v2/jobs/{user}~{name}/tag", json={"value": "golden"},
                                headers=token)
    assert status == 200, body
