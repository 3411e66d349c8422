"""OpenPAI v1 routes beside the job API: the API root, submitting by PUT, and user administration.

Each route's success and each refusal, with OpenPAI's codes and statuses, checked against the
OpenAPI document (the status is documented for that route, the body has the documented shape).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import jsonschema
import pytest

from services.cli.client import PaiqClient
from services.submit.openapi import document
from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config, raw, token_of
from tests.infra import ADMIN_USER, Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the API's own handling

Answer = tuple[int, Any, dict[str, str]]


async def call(platform: Platform, method: str, path: str, *, token: str | None = None, **kw: Any) -> Answer:
    return await raw(platform, method, path, headers={"Authorization": f"Bearer {token}"} if token else {}, **kw)


def documented(method: str, route: str, answer: Answer, schema: dict[str, Any] | None = None) -> None:
    """The status is one the OpenAPI document gives for this route; the body has its documented shape."""
    status, body, _ = answer
    doc = document()
    responses = doc["paths"][route][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {route} answered {status}, not documented: {body}"
    content = responses[str(status)].get("content", {})
    if "application/json" in content:
        jsonschema.validate(body, {**(schema or content["application/json"]["schema"]),
                                   "components": doc["components"]})


def refused(answer: Answer, status: int, code: str) -> None:
    assert (answer[0], answer[1].get("code") if isinstance(answer[1], dict) else answer[1]) == (status, code)


@pytest.fixture
async def user_token(platform: Platform, admin: PaiqClient, user: str) -> str:
    await admin.put_user(user, "secret-pass")
    return await token_of(platform, user)


# --- GET /api/v1 ------------------------------------------------------------------------------------


async def test_the_api_root_answers_as_openpai_did(platform: Platform) -> None:
    answer = await call(platform, "GET", "/api/v1")
    status, body, headers = answer
    assert status == 200 and body == "<pre>PAI RESTful API</pre>"
    assert headers["Content-Type"].startswith("text/html")
    documented("GET", "/api/v1", answer)


# --- PUT /api/v1/user/{user}/jobs/{job} --------------------------------------------------------------


async def test_put_submits_a_job_named_by_the_path(platform: Platform, user: str, user_token: str) -> None:
    answer = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/byput", token=user_token,
                        json=job_config("byput", command="true"))
    status, body, headers = answer
    assert status == 202 and body == {"message": "update job byput successfully"}
    assert headers["Location"] == f"/api/v1/user/{user}/jobs/byput"
    documented("PUT", "/api/v1/user/{user}/jobs/{job}", answer)
    async with aiohttp.ClientSession() as s:
        client = PaiqClient(s, platform.api, user_token)
        detail, _ = await wait_final(client, user, "byput")
        assert detail["name"] == "byput" and detail["jobStatus"]["state"] == "SUCCEEDED"
        assert detail["jobStatus"]["username"] == user
    status, listed, _ = await call(platform, "GET", f"/api/v1/user/{user}/jobs")
    assert [j["name"] for j in listed] == ["byput"]
    again = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/byput", token=user_token,
                       json=job_config("byput", command="true"))
    refused(again, 409, "ConflictJobError")
    documented("PUT", "/api/v1/user/{user}/jobs/{job}", again)


async def test_put_with_another_job_name_uses_the_paths_name_and_says_so(platform: Platform, user: str,
                                                                          user_token: str) -> None:
    """OpenPAI v0.14 overwrote the body's jobName with the path's name; paiq does too, with a warning."""
    status, body, headers = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/frompath", token=user_token,
                                       json=job_config("frombody", command="true"))
    assert status == 202 and body["message"] == "update job frompath successfully"
    assert body["warnings"] == ["jobName: the body says 'frombody' but the path names the job 'frompath'; "
                                "the path's name is used, as in OpenPAI"]
    assert "frompath" in headers["X-Warning"]
    status, config, _ = await call(platform, "GET", f"/api/v1/user/{user}/jobs/frompath/config")
    assert status == 200 and config["jobName"] == "frompath"
    refused(await call(platform, "GET", f"/api/v1/user/{user}/jobs/frombody"), 404, "NoJobError")


@pytest.mark.parametrize(("path_name", "config", "rule"), [
    ("nameless", {k: v for k, v in job_config("x", command="true").items() if k != "jobName"}, "jobName"),
    ("bad%20name", job_config("x", command="true"), "jobName"),
    ("noimage", {k: v for k, v in job_config("noimage", command="true").items() if k != "image"}, "image"),
])
async def test_put_refuses_an_invalid_job_with_400_naming_the_field(
        platform: Platform, user: str, user_token: str, path_name: str, config: dict[str, Any], rule: str) -> None:
    """A body without jobName is refused as OpenPAI's schema refused it, even though the path names the job."""
    answer = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/{path_name}", token=user_token, json=config)
    refused(answer, 400, "InvalidParametersError")
    assert answer[1]["message"].startswith(rule), answer[1]
    documented("PUT", "/api/v1/user/{user}/jobs/{job}", answer)


async def test_put_refuses_anonymous_other_users_and_unknown_virtual_clusters(
        platform: Platform, admin: PaiqClient, user: str, user_token: str) -> None:
    route = "/api/v1/user/{user}/jobs/{job}"
    anonymous = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/anon", json=job_config("anon", command="true"))
    refused(anonymous, 401, "UnauthorizedUserError")
    documented("PUT", route, anonymous)
    other = unique("other")
    await admin.put_user(other, "secret-pass")
    as_other = await call(platform, "PUT", f"/api/v1/user/{other}/jobs/x", token=user_token,
                          json=job_config("x", command="true"))
    refused(as_other, 403, "ForbiddenUserError")
    documented("PUT", route, as_other)
    no_vc = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/novc", token=user_token,
                       json=job_config("novc", command="true", virtualCluster="nowhere"))
    refused(no_vc, 404, "NoVirtualClusterError")
    documented("PUT", route, no_vc)
    status, listed, _ = await call(platform, "GET", f"/api/v1/user/{user}/jobs")
    assert status == 200 and listed == []


# --- GET /api/v1/user, GET /api/v1/user/{user} ------------------------------------------------------


async def test_admins_list_every_user_without_secrets(platform: Platform, admin_token: str, user: str,
                                                      user_token: str) -> None:
    answer = await call(platform, "GET", "/api/v1/user", token=admin_token)
    documented("GET", "/api/v1/user", answer)
    status, users, _ = answer
    assert status == 200
    names = [u["username"] for u in users]
    assert names == sorted(names) and {ADMIN_USER, user} <= set(names)
    by_name = {u["username"]: u for u in users}
    assert by_name[ADMIN_USER]["admin"] is True
    assert by_name[user] == {"username": user, "email": "", "grouplist": [], "admin": False,
                             "extension": {"virtualCluster": ["default"]}, "virtualCluster": ["default"]}
    assert "password" not in json.dumps(users) and "hash" not in json.dumps(users)


async def test_only_admins_list_users(platform: Platform, user_token: str) -> None:
    anonymous = await call(platform, "GET", "/api/v1/user")
    refused(anonymous, 401, "UnauthorizedUserError")
    documented("GET", "/api/v1/user", anonymous)
    as_user = await call(platform, "GET", "/api/v1/user", token=user_token)
    refused(as_user, 403, "ForbiddenUserError")
    documented("GET", "/api/v1/user", as_user)


async def test_a_profile_is_its_owners_or_an_admins_to_see(platform: Platform, admin: PaiqClient, admin_token: str,
                                                           user: str, user_token: str) -> None:
    route = "/api/v1/user/{user}"
    team, vc = unique("team"), unique("vc")
    await admin.put_virtual_cluster(vc, {"cpus": 0, "memory": 0, "gpus": 0}, [], groups=[team])
    try:
        status, _, _ = await call(platform, "PUT", "/api/v1/user", token=admin_token,
                                  json={"username": user, "modify": True, "groups": [team]})
        assert status == 200
        own = await call(platform, "GET", f"/api/v1/user/{user}", token=user_token)
        documented("GET", route, own)
        assert own[1] == {"username": user, "email": "", "grouplist": [team], "admin": False,
                          "extension": {"virtualCluster": ["default", vc]}, "virtualCluster": ["default", vc]}
        by_admin = await call(platform, "GET", f"/api/v1/user/{user}", token=admin_token)
        assert by_admin[:2] == own[:2]
    finally:
        await admin.delete_virtual_cluster(vc)
    admins_own = await call(platform, "GET", f"/api/v1/user/{ADMIN_USER}", token=admin_token)
    documented("GET", route, admins_own)
    assert admins_own[1]["admin"] is True
    others = await call(platform, "GET", f"/api/v1/user/{ADMIN_USER}", token=user_token)
    refused(others, 403, "ForbiddenUserError")
    documented("GET", route, others)
    anonymous = await call(platform, "GET", f"/api/v1/user/{user}")
    refused(anonymous, 401, "UnauthorizedUserError")
    documented("GET", route, anonymous)
    # OpenPAI answered this route's unknown user with 400 NoUserError (its PUT and DELETE with 404)
    missing = await call(platform, "GET", f"/api/v1/user/{unique('ghost')}", token=admin_token)
    refused(missing, 400, "NoUserError")
    documented("GET", route, missing)
    bad_name = await call(platform, "GET", "/api/v1/user/bad%20name", token=admin_token)
    refused(bad_name, 400, "InvalidParametersError")


# --- DELETE /api/v1/user ----------------------------------------------------------------------------


async def test_an_admin_removes_a_user_whose_tokens_stop_at_once(platform: Platform, admin: PaiqClient,
                                                                 admin_token: str, user: str,
                                                                 user_token: str) -> None:
    # the user's job outlives them, as in OpenPAI
    status, _, _ = await call(platform, "PUT", f"/api/v1/user/{user}/jobs/kept", token=user_token,
                              json=job_config("kept", command="true"))
    assert status == 202
    answer = await call(platform, "DELETE", "/api/v1/user", token=admin_token, json={"username": user})
    documented("DELETE", "/api/v1/user", answer)
    assert answer[:2] == (200, {"message": f"remove user {user} successfully"})
    refused(await call(platform, "GET", f"/api/v1/user/{user}", token=user_token), 401, "UnauthorizedUserError")
    refused(await call(platform, "PUT", f"/api/v1/user/{user}/jobs/late", token=user_token,
                       json=job_config("late", command="true")), 401, "UnauthorizedUserError")
    refused(await call(platform, "POST", "/api/v1/token", json={"username": user, "password": "secret-pass"}),
            401, "UnauthorizedUserError")
    status, users, _ = await call(platform, "GET", "/api/v1/user", token=admin_token)
    assert user not in {u["username"] for u in users}
    refused(await call(platform, "GET", f"/api/v1/user/{user}", token=admin_token), 400, "NoUserError")
    # a new user of the same name does not bring the old tokens back
    await admin.put_user(user, "other-pass")
    refused(await call(platform, "GET", f"/api/v1/user/{user}", token=user_token), 401, "UnauthorizedUserError")
    status, _, _ = await call(platform, "GET", f"/api/v1/user/{user}/jobs/kept")
    assert status == 200


async def test_removing_an_unknown_user_is_404_and_a_missing_name_400(platform: Platform, admin_token: str) -> None:
    missing = await call(platform, "DELETE", "/api/v1/user", token=admin_token, json={"username": unique("ghost")})
    refused(missing, 404, "NoUserError")
    documented("DELETE", "/api/v1/user", missing)
    for body in ({}, {"username": ""}, {"username": "bad name"}):
        answer = await call(platform, "DELETE", "/api/v1/user", token=admin_token, json=body)
        refused(answer, 400, "InvalidParametersError")
        documented("DELETE", "/api/v1/user", answer)
    form = await call(platform, "DELETE", "/api/v1/user", token=admin_token, data={"username": unique("ghost")})
    refused(form, 404, "NoUserError")


async def test_only_admins_remove_users(platform: Platform, admin: PaiqClient, user: str, user_token: str) -> None:
    victim = unique("victim")
    await admin.put_user(victim, "secret-pass")
    anonymous = await call(platform, "DELETE", "/api/v1/user", json={"username": victim})
    refused(anonymous, 401, "UnauthorizedUserError")
    documented("DELETE", "/api/v1/user", anonymous)
    as_user = await call(platform, "DELETE", "/api/v1/user", token=user_token, json={"username": victim})
    refused(as_user, 403, "ForbiddenUserError")
    documented("DELETE", "/api/v1/user", as_user)
    assert (await token_of(platform, victim)), "the victim is still there"


async def test_no_admin_is_ever_removed_so_the_platform_keeps_one(platform: Platform, admin: PaiqClient,
                                                                  admin_token: str) -> None:
    """OpenPAI's RemoveAdminError: not another admin, not yourself, and so never the last one."""
    other_admin = unique("boss")
    await admin.put_user(other_admin, "secret-pass", admin=True)
    for target in (other_admin, ADMIN_USER):
        answer = await call(platform, "DELETE", "/api/v1/user", token=admin_token, json={"username": target})
        refused(answer, 403, "RemoveAdminError")
        documented("DELETE", "/api/v1/user", answer)
    other_token = await token_of(platform, other_admin)
    refused(await call(platform, "DELETE", "/api/v1/user", token=other_token, json={"username": ADMIN_USER}),
            403, "RemoveAdminError")
    status, me, _ = await call(platform, "GET", f"/api/v1/user/{ADMIN_USER}", token=admin_token)
    assert status == 200 and me["admin"] is True
    # once no longer an admin, a user can be removed
    await admin.put_user(other_admin, None, admin=False, modify=True)
    answer = await call(platform, "DELETE", "/api/v1/user", token=admin_token, json={"username": other_admin})
    assert answer[0] == 200
    refused(await call(platform, "GET", "/api/v1/user", token=other_token), 401, "UnauthorizedUserError")


async def test_the_last_admin_is_never_demoted(platform: Platform, admin: PaiqClient, admin_token: str) -> None:
    """Removing admin rights could lock the platform out as removing the user would: refused for the last."""
    # other tests of this platform made admins of their own: take their rights, so one admin is left
    for u in await admin.users():
        if u["admin"] and u["username"] != ADMIN_USER:
            await admin.put_user(u["username"], None, admin=False, modify=True)
    answer = await call(platform, "PUT", "/api/v1/user", token=admin_token,
                        json={"username": ADMIN_USER, "admin": False, "modify": True})
    refused(answer, 403, "RemoveAdminError")
    documented("PUT", "/api/v1/user", answer)
    assert "last admin" in answer[1]["message"]
    # with a second admin, the first may step down (and is made admin again by the second)
    deputy = unique("deputy")
    await admin.put_user(deputy, "secret-pass", admin=True)
    await admin.put_user(ADMIN_USER, None, admin=False, modify=True)
    deputy_client = admin.with_token(await token_of(platform, deputy))
    await deputy_client.put_user(ADMIN_USER, None, admin=True, modify=True)
    status, me, _ = await call(platform, "GET", f"/api/v1/user/{ADMIN_USER}", token=admin_token)
    assert status == 200 and me["admin"] is True
