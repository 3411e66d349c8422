"""OpenPAI v1.8's /api/v2 access routes on `paiq up` (the same submit code answers in both shapes), as an
OpenPAI v1.x client walks them: an admin logs in, makes a user and a group, puts the user in it and lets the
group use a virtual cluster; the user logs in, sees themselves, their group and that VC, takes an application
token and revokes it, then logs out and their token is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import ALL_IN_ONE_ONLY, raw
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the API's own handling


async def call(platform: Platform, method: str, path: str, token: str | None = None, body: Any = None,
               status: int = 200) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    got, answer, _ = await raw(platform, method, path, headers=headers, json=body)
    assert got == status, (method, path, got, answer)
    return answer


async def login(platform: Platform, user: str, password: str) -> str:
    answer = await call(platform, "POST", "/api/v2/authn/basic/login", body={"username": user, "password": password})
    assert set(answer) == {"user", "token", "admin", "hasGitHubPAT"}
    return str(answer["token"])


async def test_login_me_groups_vc_and_token_revoke(platform: Platform) -> None:
    admin = await login(platform, ADMIN_USER, ADMIN_PASSWORD)
    user, group, vc = unique("v2u"), f"g{unique()}".replace("-", "_"), unique("vc")
    await call(platform, "POST", "/api/v2/users", admin, {"username": user, "password": "secret-pass",
                                                           "email": f"{user}@example.com"}, status=201)
    await call(platform, "POST", "/api/v2/groups", admin, {"groupname": group, "description": "e2e"}, status=201)
    await call(platform, "POST", "/api/v2/groups", admin, {"groupname": group}, status=409)
    await call(platform, "PUT", f"/api/v2/users/{user}/group", admin, {"groupname": group}, status=201)
    await call(platform, "PUT", f"/api/v2/virtual-clusters/{vc}", admin,
               {"quota": {"cpus": 1, "memory": 1, "gpus": 0}, "users": [], "groups": [group]}, status=201)
    try:
        token = await login(platform, user, "secret-pass")
        me = await call(platform, "GET", "/api/v2/users/me", token)
        assert me["username"] == user and me["grouplist"] == [group] and me["email"] == f"{user}@example.com"
        assert vc in me["virtualCluster"] and me["admin"] is False
        mine = await call(platform, "GET", f"/api/v2/groups/{group}", token)
        assert mine["extension"]["acls"]["virtualClusters"] == [vc]
        assert await call(platform, "GET", f"/api/v2/groups/{group}/userlist", admin) == [
            {"username": user, "clusterAdmin": False}]
        await call(platform, "GET", f"/api/v2/groups/{group}/userlist", token, status=403)
        seen = await call(platform, "GET", f"/api/v2/virtual-clusters/{vc}", token)
        assert {"capacity", "usedCapacity", "maxCapacity", "resourcesTotal"} <= set(seen)
        await call(platform, "GET", "/api/v2/users", token, status=403)
        app = await call(platform, "POST", "/api/v2/tokens/application", token)
        assert len((await call(platform, "GET", "/api/v2/tokens", token))["tokens"]) == 2
        await call(platform, "DELETE", f"/api/v2/tokens/{app['token']}", admin, status=403)  # not the admin's
        await call(platform, "DELETE", f"/api/v2/tokens/{app['token']}", token)
        await call(platform, "GET", "/api/v2/users/me", app["token"], status=401)
        await call(platform, "DELETE", "/api/v2/authn/basic/logout", token)
        await call(platform, "GET", "/api/v2/users/me", token, status=401)
    finally:
        await call(platform, "DELETE", f"/api/v2/virtual-clusters/{vc}", admin, status=201)
        await call(platform, "DELETE", f"/api/v2/groups/{group}", admin)
        await call(platform, "DELETE", f"/api/v2/users/{user}", admin)
