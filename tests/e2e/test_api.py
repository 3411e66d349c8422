"""The v1 REST API as OpenPAI clients use it: auth, every route, error shapes, the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
import pytest

from services.cli.client import ApiCallError, PaiqClient
from services.submit.openapi import document
from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config, logged_in, raw
from tests.infra import Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the API's own handling


def schema_of(name: str) -> dict[str, Any]:
    doc = document()
    return {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}


def valid(instance: Any, name: str) -> None:
    jsonschema.validate(instance, schema_of(name))


async def test_anonymous_submit_is_401(platform: Platform, user: str) -> None:
    status, body, _ = await raw(platform, "POST", f"/api/v1/user/{user}/jobs",
                                data=json.dumps(job_config("anon", command="true")))
    assert status == 401 and body["code"] == "UnauthorizedUserError"
    valid(body, "Error")


@pytest.mark.parametrize(("method", "suffix", "body"), [
    ("DELETE", "", None), ("PUT", "/executionType", '{"value": "STOP"}')])
async def test_anonymous_changes_are_401_whether_or_not_the_job_exists(
        platform: Platform, api: PaiqClient, user: str, method: str, suffix: str, body: str | None) -> None:
    """Who asks is checked before the job is looked up: a stranger cannot tell which jobs exist (issue 24)."""
    name = unique("exists")
    await api.submit(user, json.dumps(job_config(name, command="sleep 30")).encode())
    answers = []
    for job in (name, unique("ghost")):
        status, answer, _ = await raw(platform, method, f"/api/v1/user/{user}/jobs/{job}{suffix}", data=body)
        answers.append((status, answer["code"]))
    assert answers == [(401, "UnauthorizedUserError")] * 2
    await api.stop(user, name)


async def test_submitting_as_another_user_is_403(api: PaiqClient, user: str) -> None:
    with pytest.raises(ApiCallError) as refused:
        await api.submit(unique("other"), json.dumps(job_config("x", command="true")).encode())
    assert refused.value.status == 403 and refused.value.code == "ForbiddenUserError"


async def test_only_the_owner_or_an_admin_may_stop_a_job(api: PaiqClient, admin: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("long", command="sleep 60")).encode())
    intruder = await logged_in(admin, unique("intruder"))
    with pytest.raises(ApiCallError) as refused:
        await intruder.stop(user, "long")
    assert refused.value.status == 403 and refused.value.code == "ForbiddenUserError"
    answer = await admin.stop(user, "long")
    assert "stop requested" in answer["message"]
    detail, _ = await wait_final(api, user, "long")
    assert detail["jobStatus"]["state"] == "STOPPED"
    assert detail["jobStatus"]["executionType"] == "STOP"
    assert detail["jobStatus"]["appExitCode"] == -210
    again = await api.stop(user, "long")
    assert "already ended (STOPPED)" in again["message"]


async def test_an_expired_token_is_401(platform: Platform, admin: PaiqClient, user: str) -> None:
    await admin.put_user(user, "secret-pass")
    token = (await admin.with_token(None).login(user, "secret-pass", expiration_s=1))["token"]
    short = admin.with_token(token)
    await short.submit(user, json.dumps(job_config("in-time", command="true")).encode())
    await asyncio.sleep(1.5)
    with pytest.raises(ApiCallError) as refused:
        await short.submit(user, json.dumps(job_config("too-late", command="true")).encode())
    assert refused.value.status == 401 and "expired" in refused.value.message


async def test_wrong_password_and_unknown_user_get_the_same_401(admin: PaiqClient, user: str) -> None:
    await admin.put_user(user, "secret-pass")
    anonymous = admin.with_token(None)
    answers = []
    for name, password in ((user, "wrong-pass"), (unique("ghost"), "secret-pass")):
        with pytest.raises(ApiCallError) as refused:
            await anonymous.login(name, password)
        answers.append((refused.value.status, refused.value.message))
    assert answers[0] == answers[1] == (401, "user name or password is wrong")


async def test_token_route_takes_a_form_body_too(platform: Platform, admin: PaiqClient, user: str) -> None:
    await admin.put_user(user, "secret-pass")
    status, body, _ = await raw(platform, "POST", "/api/v1/token",
                                data={"username": user, "password": "secret-pass", "expiration": "3600"})
    assert status == 200 and body["user"] == user and body["admin"] is False
    valid(body, "Token")


async def test_only_admins_manage_users(api: PaiqClient, admin: PaiqClient, user: str) -> None:
    with pytest.raises(ApiCallError) as refused:
        await api.put_user(unique("new"), "secret-pass")
    assert refused.value.status == 403
    with pytest.raises(ApiCallError) as conflict:
        await admin.put_user(user, "secret-pass")
    assert conflict.value.status == 409
    with pytest.raises(ApiCallError) as short:
        await admin.put_user(unique("weak"), "123")
    assert short.value.status == 400 and "at least 6" in short.value.message


async def test_config_is_returned_as_submitted_with_warnings_for_unknown_fields(
        platform: Platform, api: PaiqClient, user: str) -> None:
    config = job_config("seedlike", command="true", tmp={"vgInfo": {"名称": "test"}}, authFile="", extras={})
    config["taskRoles"][0]["storageGB"] = 5  # type: ignore[index]
    body, headers = await api.submit(user, json.dumps(config).encode())
    assert body["warnings"] == ["tmp: unknown field, ignored (kept in the stored config)",
                                "taskRoles[0].storageGB: unknown field, ignored (kept in the stored config)"]
    assert "storageGB" in headers["X-Warning"]
    assert await api.config(user, "seedlike") == config
    status, text, headers = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/seedlike/config",
                                      headers={"Accept": "text/yaml"})
    assert status == 200 and headers["Content-Type"].startswith("text/yaml")
    assert "storageGB: 5" in text and "jobName: seedlike" in text
    await wait_final(api, user, "seedlike")


async def test_every_answer_has_the_documented_shape(platform: Platform, api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("shaped", command="true")).encode())
    await wait_final(api, user, "shaped")
    for path, schema in ((f"/api/v1/user/{user}/jobs/shaped", "JobDetail"),
                         ("/api/v1/virtual-clusters/default", "VirtualCluster")):
        status, body, _ = await raw(platform, "GET", path)
        assert status == 200
        valid(body, schema)
    status, jobs, _ = await raw(platform, "GET", f"/api/v1/jobs?username={user}")
    assert status == 200 and [j["name"] for j in jobs] == ["shaped"]
    for job in jobs:
        valid(job, "JobSummary")
    status, listed, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs")
    assert listed == jobs
    status, served, _ = await raw(platform, "GET", "/api/v1/openapi.json")
    assert status == 200 and served == json.loads(json.dumps(document()))
    status, page, headers = await raw(platform, "GET", "/api/docs")  # the same, as a web page
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert all(f'id="schema-{name}"' in page for name in served["components"]["schemas"])


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/v1/nothing-here", 404, "NoApiError"),
    ("GET", "/api/v1/user/USER/jobs/missing", 404, "NoJobError"),
    ("GET", "/api/v1/user/USER/jobs/missing/config", 404, "NoJobError"),
    ("GET", "/api/v1/user/USER/jobs/missing/ssh", 404, "NoJobError"),
    ("GET", "/api/v1/virtual-clusters/nope", 404, "NoVirtualClusterError"),
    ("GET", "/api/v1/jobs?limit=zero", 400, "InvalidParametersError"),
    ("GET", "/api/v1/user/bad%20name/jobs", 400, "InvalidParametersError"),
    ("PATCH", "/api/v1/jobs", 405, "MethodNotAllowedError"),
    ("GET", "/api/v1/jobs?cursor=not-a-cursor", 400, "InvalidParametersError"),
    ("GET", "/api/v1/jobs?state=DONE", 400, "InvalidParametersError"),
    ("GET", "/api/v1/jobs?offset=100001", 400, "InvalidParametersError"),
])
async def test_errors_have_openpai_codes(platform: Platform, user: str, method: str, path: str, status: int,
                                         code: str) -> None:
    got, body, _ = await raw(platform, method, path.replace("USER", user))
    assert (got, body["code"]) == (status, code)
    valid(body, "Error")


async def test_lists_page_by_cursor_newest_first_with_a_state_filter(platform: Platform, api: PaiqClient,
                                                                     user: str) -> None:
    names = [f"page{i}" for i in range(5)]
    never_fits = [{"name": "main", "taskNumber": 1, "cpuNumber": 1024, "memoryMB": 128, "command": "true"}]
    for name in names:  # created one after the other: newest first is the reverse
        await api.submit(user, json.dumps(job_config(name, command="true", roles=never_fits)).encode())
        await asyncio.sleep(0.002)
    await api.stop(user, "page0")
    stopped_detail, _ = await wait_final(api, user, "page0")  # a stop is asynchronous (202)
    assert stopped_detail["jobStatus"]["state"] == "STOPPED"
    status, first, headers = await raw(platform, "GET", f"/api/v1/user/{user}/jobs?limit=2")
    assert status == 200 and [j["name"] for j in first] == ["page4", "page3"]
    assert headers["Link"].endswith('rel="next"') and "cursor=" in headers["Link"]
    seen = [j["name"] for j in first]
    while "X-Next-Cursor" in headers:
        status, page, headers = await raw(platform, "GET",
                                          f"/api/v1/user/{user}/jobs?limit=2&cursor={headers['X-Next-Cursor']}")
        assert status == 200
        seen += [j["name"] for j in page]
    assert seen == names[::-1], "every job once, newest first"
    _, stopped, headers = await raw(platform, "GET", f"/api/v1/jobs?username={user}&state=STOPPED")
    assert [j["name"] for j in stopped] == ["page0"] and "X-Next-Cursor" not in headers
    _, by_offset, _ = await raw(platform, "GET", f"/api/v1/jobs?username={user}&limit=2&offset=3")
    assert [j["name"] for j in by_offset] == ["page1", "page0"]
    for name in names[1:]:
        await api.stop(user, name)


async def test_ssh_info_of_an_ended_job_lists_no_container_and_of_an_unknown_job_is_404(
        platform: Platform, api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("ended", command="true")).encode())
    await wait_final(api, user, "ended")
    status, body, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/ended/ssh")
    assert status == 200 and body["containers"] == []
    assert body["keyPair"]["privateKeyFileName"] == f"{user}~ended"
    status, body, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/nosuchjob/ssh")
    assert (status, body["code"]) == (404, "NoJobError")


async def test_an_unknown_virtual_cluster_is_404_and_nothing_is_stored(api: PaiqClient, user: str) -> None:
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, json.dumps(job_config("vc", command="true", virtualCluster="nope")).encode())
    assert (refused.value.status, refused.value.code) == (404, "NoVirtualClusterError")
    assert await api.jobs(user) == []


async def test_delete_stops_a_running_job_and_removes_it(api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("doomed", command="sleep 60")).encode())
    for _ in range(100):
        if (await api.job(user, "doomed"))["jobStatus"]["state"] == "RUNNING":
            break
        await asyncio.sleep(0.1)
    answer = await api.delete(user, "doomed")
    assert "being stopped" in answer["message"]
    for _ in range(150):
        if await api.jobs(user) == []:
            break
        await asyncio.sleep(0.1)
    assert await api.jobs(user) == []
    await api.submit(user, json.dumps(job_config("doomed", command="true")).encode())  # the name is free again
    detail, _ = await wait_final(api, user, "doomed")
    assert detail["jobStatus"]["state"] == "SUCCEEDED"


async def test_what_a_task_printed_is_shown_only_to_its_owner(platform: Platform, api: PaiqClient, admin: PaiqClient,
                                                              user: str) -> None:
    await api.submit(user, json.dumps(job_config("talkative", command="echo secret-ish >&2; exit 4")).encode())
    mine, _ = await wait_final(api, user, "talkative")
    assert "secret-ish" in mine["jobStatus"]["appExitDiagnostics"]
    assert "secret-ish" in mine["taskRoles"]["main"]["taskStatuses"][0]["containerExitDiagnostics"]
    assert "secret-ish" in (await admin.job(user, "talkative"))["jobStatus"]["appExitDiagnostics"]
    status, anonymous, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/talkative")
    assert status == 200 and anonymous["jobStatus"]["state"] == "FAILED"
    assert anonymous["jobStatus"]["appExitDiagnostics"] == ""
    assert anonymous["taskRoles"]["main"]["taskStatuses"][0]["containerExitDiagnostics"] == ""
    assert "secret-ish" not in json.dumps(anonymous)
