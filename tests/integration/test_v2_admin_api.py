"""OpenPAI v1.8's /api/v2 admin routes that came last, through the real app, users and store: a VC's status
(stopped: no new jobs, its own go on), a group's per-field changes, the singular ``/api/v2/user`` and
``/api/v2/group`` aliases, and application tokens sent as ``Basic user:token``; each answer's status and keys
against the document's schema, and the 400/401/403/404 OpenPAI answered."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from services.submit.routes.v2.clusters import vc_status
from tests.integration import test_v2_access_api
from tests.integration.test_v2_access_api import Api
from tests.unit.factories import config_dict, role_dict

pytestmark = pytest.mark.integration
api = test_v2_access_api.api  # the fixture: the real app and store, with an admin (boss) and a user (alice)


def v1_job(name: str, vc: str) -> dict[str, Any]:
    return config_dict(role_dict(taskNumber=1, cpuNumber=1, memoryMB=256), jobName=name, virtualCluster=vc)


def v2_job(name: str, vc: str) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: img, type: dockerimage, uri: busybox}}
defaults: {{virtualCluster: {vc}}}
taskRoles:
  main:
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands: [sleep 1]
"""


async def submit_v2(api: Api, who: str, name: str, vc: str, status: int) -> dict[str, Any]:
    resp = await api.client.post("/api/v2/jobs", data=v2_job(name, vc), headers={
        "Authorization": f"Bearer {api.tokens[who]}", "Content-Type": "text/yaml"})
    answer: dict[str, Any] = await resp.json()
    assert resp.status == status, answer
    return answer


async def test_a_stopped_vc_takes_no_new_jobs_and_keeps_those_it_has(api: Api) -> None:
    status = "/api/v2/virtual-clusters/research/status"
    stop, run = {"vcStatus": "stopped"}, {"vcStatus": "running"}
    research = await api.call("GET", "/api/v2/virtual-clusters/research", "alice", schema="V2VirtualCluster")
    assert research["status"] == "RUNNING"
    await submit_v2(api, "boss", "before", "research", 202)
    # as v1.8's router: the name first (default: 403 to anyone), then who asks, the body, admin, the VC
    await api.call("PUT", "/api/v2/virtual-clusters/default/status", None, stop, status=403)
    await api.call("PUT", "/api/v2/virtual-clusters/default/status", "boss", stop, status=403)
    await api.call("PUT", "/api/v2/virtual-clusters/bad.name/status", "boss", stop, status=400)
    await api.call("PUT", status, None, stop, status=401)
    await api.call("PUT", status, "alice", stop, status=403)
    await api.call("PUT", status, "boss", {"vcStatus": "paused"}, status=400)
    await api.call("PUT", status, "boss", {}, status=400)
    await api.call("PUT", "/api/v2/virtual-clusters/none/status", "boss", stop, status=404)
    api.tokens["app"] = (await api.call("POST", "/api/v2/tokens/application", "boss",
                                        schema="ApplicationToken"))["token"]
    await api.call("PUT", status, "app", stop, status=403)
    done = await api.call("PUT", status, "boss", stop, status=201, schema="VcDone")
    assert done == {"status": 201, "message": "Stop virtual cluster research successfully."}
    # its waiting job stays, so it drains; a new one is refused, v1 and v2 alike, an admin's too
    research = await api.call("GET", "/api/v2/virtual-clusters/research", "alice", schema="V2VirtualCluster")
    assert research["status"] == "DRAINING"
    refused = await api.call("POST", "/api/v1/user/boss/jobs", "boss", v1_job("after", "research"), status=403)
    assert refused == {"code": "ForbiddenUserError",
                       "message": "Virtual cluster research is STOPPED. Cannot accept submission of job after."}
    await submit_v2(api, "boss", "after2", "research", 403)
    job = await api.call("GET", "/api/v2/jobs/boss~before", "boss", schema="V2JobDetail")
    assert job["jobStatus"]["state"] == "WAITING"
    listed = await api.call("GET", "/api/v2/virtual-clusters", "alice", schema="V2VirtualClusters")
    assert (listed["default"]["status"], listed["research"]["status"]) == ("RUNNING", "DRAINING")
    await submit_v2(api, "alice", "elsewhere", "default", 202)  # other VCs take jobs
    # a change of its quota keeps it stopped, and its body may not set that
    await api.call("PUT", "/api/v2/virtual-clusters/research", "boss", {"quota": {"gpus": 40}, "users": ["boss"]},
                   status=201, schema="VcDone")
    await api.call("POST", "/api/v1/user/boss/jobs", "boss", v1_job("after3", "research"), status=403)
    await api.call("PUT", "/api/v1/virtual-clusters/research", "boss", {"stopped": False}, status=400)
    done = await api.call("PUT", status, "boss", run, status=201, schema="VcDone")
    assert done["message"] == "Activate virtual cluster research successfully."
    assert (await api.call("GET", "/api/v2/virtual-clusters/research", "alice",
                           schema="V2VirtualCluster"))["status"] == "RUNNING"
    await submit_v2(api, "boss", "again", "research", 202)


@pytest.mark.parametrize(("stopped", "jobs", "shown"), [
    (False, {"RUNNING": 2}, "RUNNING"), (True, {"WAITING": 1}, "DRAINING"), (True, {"RUNNING": 1}, "DRAINING"),
    (True, {"SUCCEEDED": 9, "STOPPED": 1}, "STOPPED"), (True, {}, "STOPPED")])
def test_a_stopped_vc_drains_while_its_jobs_wait_or_run(stopped: bool, jobs: dict[str, int], shown: str) -> None:
    assert vc_status(stopped, jobs) == shown


async def test_a_groups_fields_change_one_at_a_time(api: Api) -> None:
    await api.call("POST", "/api/v2/groups", "boss", {"groupname": "ml", "extension": {"keep": 1}}, status=201)
    await api.call("PUT", "/api/v2/groups/ml/description", None, {"description": "x"}, status=401)
    await api.call("PUT", "/api/v2/groups/ml/description", "alice", {"description": "x"}, status=403)
    done = await api.call("PUT", "/api/v2/groups/ml/description", "boss", {"description": "learners"}, status=201)
    assert done == {"message": "update group description data successfully."}
    await api.call("PUT", "/api/v2/groups/ml/externalname", "boss", {"externalName": "ML team"}, status=201)
    await api.call("PUT", "/api/v2/groups/ml/externalname", "boss", {"externalName": 7}, status=400)
    await api.call("PUT", "/api/v2/groups/ml/extension", "boss", {"extension": {"add": [1]}}, status=201)
    await api.call("PUT", "/api/v2/groups/ml/extension", "boss", {}, status=400)
    await api.call("PUT", "/api/v2/groups/ml/extension/a/b/c", "boss", {"data": {"deep": True}}, status=201)
    await api.call("PUT", "/api/v2/groups/ml/extension/keep", "boss", {"data": None}, status=201)
    await api.call("PUT", "/api/v2/groups/ml/extension/add/x", "boss", {"data": 1}, status=400)  # a list on the way
    await api.call("PUT", "/api/v2/groups/ml/extension/a", "boss", {}, status=400)  # data is required
    for path in ("description", "externalname", "extension", "extension/k"):
        body = {"description": "", "externalName": "", "extension": {}, "data": 1}
        key = {"description": "description", "externalname": "externalName", "extension": "extension"}.get(path, "data")
        await api.call("PUT", f"/api/v2/groups/none/{path}", "boss", {key: body[key]}, status=400)
    group = await api.call("GET", "/api/v2/groups/ml", "alice", schema="V2Group")
    assert (group["description"], group["externalName"]) == ("learners", "ML team")
    assert {k: v for k, v in group["extension"].items() if k != "acls"} == {
        "keep": None, "add": [1], "a": {"b": {"c": {"deep": True}}}}
    api.tokens["app"] = (await api.call("POST", "/api/v2/tokens/application", "boss",
                                        schema="ApplicationToken"))["token"]
    await api.call("PUT", "/api/v2/groups/ml/description", "app", {"description": "x"}, status=403)


async def test_the_singular_aliases_answer_as_the_plural_routes(api: Api) -> None:
    assert await api.call("GET", "/api/v2/user/me", "alice", schema="V2User") == await api.call(
        "GET", "/api/v2/users/me", "alice", schema="V2User")
    await api.call("GET", "/api/v2/user", "alice", status=403)
    await api.call("POST", "/api/v2/group", "boss", {"groupname": "ml"}, status=201)
    await api.call("PUT", "/api/v2/group/ml/externalname", "boss", {"externalName": "ML"}, status=201)
    assert (await api.call("GET", "/api/v2/group/ml", "alice", schema="V2Group"))["externalName"] == "ML"
    await api.call("PUT", "/api/v2/user/alice/group", "boss", {"groupname": "ml"}, status=201)
    assert await api.call("GET", "/api/v2/group/ml/userlist", "boss", schema="GroupMembers") == [
        {"username": "alice", "clusterAdmin": False}]
    await api.call("GET", "/api/v2/group/none", "alice", status=404)
    await api.call("DELETE", "/api/v2/group/ml", "boss")


async def test_an_application_token_signs_in_as_basic_user_colon_token(api: Api) -> None:
    token = (await api.call("POST", "/api/v2/tokens/application", "alice", schema="ApplicationToken"))["token"]

    async def basic(user: str, secret: str, path: str = "/api/v2/users/me") -> tuple[int, Any]:
        raw = base64.b64encode(f"{user}:{secret}".encode()).decode()
        resp = await api.client.get(path, headers={"Authorization": f"Basic {raw}"})
        return resp.status, await resp.json()

    status, me = await basic("alice", token)
    assert status == 200 and me["username"] == "alice"
    assert (await basic("alice", token, "/api/v2/tokens/check"))[1]["application"] is True
    # another user's name, a session token, a wrong token: OpenPAI's 401
    assert await basic("boss", token) == (401, {"code": "UnauthorizedUserError", "message": "Your token is invalid."})
    assert (await basic("alice", api.tokens["alice"]))[0] == 401
    assert (await basic("alice", "nope"))[0] == 401
    resp = await api.client.get("/api/v2/users/me", headers={"Authorization": "Basic %%%"})
    assert resp.status == 401
    # and, an application's, it reads but manages nothing
    assert (await basic("alice", token, "/api/v2/tokens"))[0] == 403
