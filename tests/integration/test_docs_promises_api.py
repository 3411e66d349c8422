"""Promises the docs make about the API, through the real app, users and store: an ``Idempotency-Key`` sent
again with another body is a 409 (with the same body, the first answer again); a user has at most 20
subscriptions (the 21st is a 400 saying so; deleting one makes room)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography.fernet import Fernet
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.store import Store
from shared.notify.subscriptions import MAX_SUBSCRIPTIONS
from shared.settings.model import Settings
from tests.infra import HASH_ROUNDS

pytestmark = pytest.mark.integration


class Client:
    def __init__(self, client: TestClient[Any, Any], token: str) -> None:
        self.client, self.token = client, token

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        resp = await self.client.request(method, path, json=body,
                                         headers={"Authorization": f"Bearer {self.token}", **(headers or {})})
        return resp.status, await resp.json(), dict(resp.headers)


@pytest.fixture
async def alice(mongo_uri: str) -> AsyncIterator[Client]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"promises_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("alice", "alice-password", admin=False)
    settings = Settings.from_env({"PAIQ_SECRETS_KEY": Fernet.generate_key().decode(),
                                  "PAIQ_NOTIFY_WEBHOOK_ALLOW": "127.0.0.1"})
    deps = SubmitDeps(settings=settings, store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        resp = await test_client.post("/api/v1/token", json={"username": "alice", "password": "alice-password"})
        yield Client(test_client, (await resp.json())["token"])
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


def _job(name: str, command: str = "true") -> dict[str, Any]:
    return {"jobName": name, "image": "local/busybox:latest",
            "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": command}]}


async def test_an_idempotency_key_sent_again_with_another_body_is_409_and_with_the_same_body_the_first_answer(
        alice: Client) -> None:
    key = {"Idempotency-Key": "train-2026-11-29"}
    status, body, headers = await alice.call("POST", "/api/v1/user/alice/jobs", _job("first"), key)
    assert status == 202, body
    status, again, headers = await alice.call("POST", "/api/v1/user/alice/jobs", _job("first"), key)
    assert (status, again) == (202, body) and headers.get("Idempotent-Replayed") == "true"
    status, refused, _ = await alice.call("POST", "/api/v1/user/alice/jobs", _job("first", "sleep 1"), key)
    assert status == 409 and refused["code"] == "ConflictJobError", refused
    assert "sent before with another body (job first)" in refused["message"]
    status, _, _ = await alice.call("POST", "/api/v1/user/alice/jobs", _job("second"), key)
    assert status == 409, "another job under a used key is another body too"
    status, listed, _ = await alice.call("GET", "/api/v1/user/alice/jobs")
    assert [j["name"] for j in listed] == ["first"], "nothing stored for the refused requests"


async def test_a_user_has_at_most_20_subscriptions(alice: Client) -> None:
    hook = {"channel": "webhook", "kinds": ["failed"], "url": "http://127.0.0.1:9/hook"}
    made = []
    for _ in range(MAX_SUBSCRIPTIONS):
        status, body, _ = await alice.call("POST", "/api/v1/notifications/subscriptions", hook)
        assert status == 201, body
        made.append(body["subscription"]["id"])
    assert MAX_SUBSCRIPTIONS == 20
    status, refused, _ = await alice.call("POST", "/api/v1/notifications/subscriptions", hook)
    assert status == 400 and refused["code"] == "InvalidParametersError", refused
    assert refused["message"] == "at most 20 subscriptions each; delete one first"
    status, _, _ = await alice.call("DELETE", f"/api/v1/notifications/subscriptions/{made[0]}")
    assert status == 200
    status, body, _ = await alice.call("POST", "/api/v1/notifications/subscriptions", hook)
    assert status == 201, body
    status, listed, _ = await alice.call("GET", "/api/v1/notifications/subscriptions")
    assert len(listed["subscriptions"]) == 20
