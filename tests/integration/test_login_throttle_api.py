"""Guessing passwords is slowed, and costs the server nothing while it is refused: after five wrong passwords for
one user, each password login route (v1 and v2) answers ``429 TooManyRequestsError`` with ``Retry-After`` while
the window lasts, the right password too, fast (no bcrypt hash); another user logs in as before, and once the
window has passed the right password logs in and clears the count. Through the real app, users and store."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration import test_v2_access_api
from tests.integration.test_v2_access_api import Api

pytestmark = pytest.mark.integration
api = test_v2_access_api.api  # the fixture: the real app and store, with an admin (boss) and a user (alice)

FREE = 5
FAST_S = 0.05  # a throttled answer hashes nothing: well under one bcrypt-12 hash (~0.2-0.3 s)


async def login(api: Api, path: str, user: str, password: str) -> tuple[int, dict[str, Any], dict[str, str], float]:
    started = time.perf_counter()
    resp = await api.client.post(path, json={"username": user, "password": password})
    body = await resp.json()
    return resp.status, body, dict(resp.headers), time.perf_counter() - started


@pytest.mark.parametrize("path", ["/api/v1/token", "/api/v2/authn/basic/login"])
async def test_wrong_passwords_for_one_user_are_slowed_then_refused_fast_with_retry_after(api: Api, path: str) -> None:
    for _ in range(FREE):
        status, body, _, _ = await login(api, path, "alice", "wrong-password")
        assert (status, body["code"]) == (401, "UnauthorizedUserError")
    status, body, headers, took = await login(api, path, "alice", "wrong-password")
    assert (status, body["code"]) == (429, "TooManyRequestsError"), body
    assert headers["Retry-After"] == "1" and "alice" in body["message"]
    assert took < FAST_S, f"a throttled answer took {took:.3f} s"
    status, body, headers, took = await login(api, path, "alice", "alice-password")  # the right one waits too
    assert status == 429 and headers["Retry-After"] == "1" and took < FAST_S
    status, _, _, _ = await login(api, path, "boss", "boss-password")  # another user is not held back
    assert status == 200
    await asyncio.sleep(int(headers["Retry-After"]))
    status, body, _, _ = await login(api, path, "alice", "alice-password")
    assert status == 200 and body["user"] == "alice"
    status, _, _, _ = await login(api, path, "alice", "wrong-password")  # the right password cleared the count
    assert status == 401


async def test_a_users_old_password_is_guarded_as_a_login(api: Api) -> None:
    change = {"patch": True, "data": {"username": "alice", "newPassword": "new-password", "oldPassword": "wrong!"}}
    for _ in range(FREE):
        await api.call("PUT", "/api/v2/users/me", "alice", change, status=403)
    answer = await api.call("PUT", "/api/v2/users/me", "alice", change, status=429)
    assert answer["code"] == "TooManyRequestsError"
    status, _, headers, _ = await login(api, "/api/v2/authn/basic/login", "alice", "alice-password")
    assert status == 429 and int(headers["Retry-After"]) >= 1
