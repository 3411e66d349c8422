"""Every answer of the API says ``X-Content-Type-Options: nosniff`` (a browser never guesses another type than
the one said: a task's log as HTML), whatever its route and status, refusals, 404 and 405 included; and every
answer that carries a secret (a token, the SSH private key, a webhook's signing key) says
``Cache-Control: no-store``. Through the real app, users and store: every route of the table, then each route
declared secret with a request that gets its secret."""

from __future__ import annotations

import asyncio
import io
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.fernet import Fernet
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.contract.httpparser import ApiRunner
from services.submit.deps import SubmitDeps
from services.submit.routes.table import ROUTES
from services.submit.users import Users
from shared.admission.validation import MAX_CONFIG_BYTES
from shared.bus.memory import MemoryBus
from shared.db.store import Store
from shared.settings.model import Settings
from tests.infra import HASH_ROUNDS
from tests.integration.test_v2_access_api import STORAGES, Api
from tests.integration.test_v2_admin_api import v1_job

pytestmark = pytest.mark.integration

NOSNIFF = ("X-Content-Type-Options", "nosniff")
NO_STORE = ("Cache-Control", "no-store")
VALUES = {"user": "alice", "job": "none", "vc": "none", "group": "none", "id": "none", "token": "none", "file": "none",
          "storage": "none", "role": "main", "index": "0", "attemptId": "0", "attemptIndex": "0",
          "taskAttemptId": "0", "key1": "a", "key2": "b", "key3": "c", "key4": "d"}
SECRET_ROUTES = {("POST", "/api/v1/token"), ("POST", "/api/v2/authn/basic/login"), ("GET", "/api/v2/tokens"),
                 ("POST", "/api/v2/tokens/application"), ("POST", "/api/v1/notifications/subscriptions"),
                 ("GET", "/api/v1/user/{user}/jobs/{job}/ssh/{file}")}


@pytest.fixture
async def api(mongo_uri: str, tmp_path: Path) -> AsyncIterator[Api]:
    """The real app and store, with PAIQ_SECRETS_KEY (so that jobs get SSH key pairs), an admin and a user."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"headers_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("boss", "boss-password", admin=True)
    await users.create("alice", "alice-password", admin=False)
    (tmp_path / "storages.yaml").write_text(STORAGES)
    settings = Settings.from_env({"PAIQ_SECRETS_KEY": Fernet.generate_key().decode(),
                                  "PAIQ_STORAGE_CONFIG": str(tmp_path / "storages.yaml")})
    deps = SubmitDeps(settings=settings, store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        api = Api(test_client)
        for who in ("boss", "alice"):
            login = await api.call("POST", "/api/v1/token", body={"username": who, "password": f"{who}-password"},
                                   schema="Token")
            api.tokens[who] = login["token"]
        yield api
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


def has(headers: Any, header: tuple[str, str]) -> bool:
    return bool(headers.get(header[0]) == header[1])


async def test_every_route_answers_nosniff_whatever_it_answers(api: Api) -> None:
    """Each route as a caller without a token sends it (many answer 401, 400 or 404; reads 200, the event streams
    200 and stay open), and HEAD of each GET (no body: tests/integration/test_head_answers_api.py)."""
    statuses: set[int] = set()
    for route in ROUTES:
        path = re.sub(r"\{(\w+)\}", lambda m: VALUES[m[1]], route.path)
        for method in (route.method, "HEAD") if route.method == "GET" else (route.method,):
            async with api.client.request(method, path) as resp:
                assert has(resp.headers, NOSNIFF), (method, route.path, resp.status, dict(resp.headers))
                statuses.add(resp.status)
    assert {200, 400, 401, 404} <= statuses


async def test_refusals_outside_any_route_answer_nosniff(api: Api) -> None:
    answers = [
        await api.client.get("/api/v1/nothing-here"),  # 404
        await api.client.patch("/api/v1/jobs"),  # 405
        await api.client.post("/api/v1/token", data=io.BytesIO(b"x" * (2 * MAX_CONFIG_BYTES + 1)),
                              headers={"Content-Type": "application/json"}),  # 413
        await api.client.get("/api/v1/user/alice/jobs/none/config"),  # 404 of a route
        await api.client.post("/api/v1/token", data=b"{", headers={"Content-Type": "application/json"}),  # 400
        await api.client.get("/api/v2/users/me"),  # 401
        await api.client.get("/api/v2/users", headers={"Authorization": f"Bearer {api.tokens['alice']}"}),  # 403
    ]
    assert [a.status for a in answers] == [404, 405, 413, 404, 400, 401, 403]
    for a in answers:
        assert has(a.headers, NOSNIFF), (a.url, a.status, dict(a.headers))
        assert not has(a.headers, NO_STORE) or a.url.path == "/api/v1/token"


async def test_every_answer_that_carries_a_secret_says_no_store(api: Api) -> None:
    assert {(r.method, r.path) for r in ROUTES if r.secret} == SECRET_ROUTES
    bearer = {"Authorization": f"Bearer {api.tokens['alice']}"}
    creds = {"username": "alice", "password": "alice-password"}
    secrets = [
        await api.client.post("/api/v1/token", json=creds),
        await api.client.post("/api/v1/token", data=creds),  # the form too
        await api.client.post("/api/v2/authn/basic/login", json=creds),
        await api.client.post("/api/v2/tokens/application", headers=bearer),
        await api.client.get("/api/v2/tokens", headers=bearer),
        await api.client.post("/api/v1/notifications/subscriptions", headers=bearer,
                              json={"channel": "email", "kinds": ["failed"]}),
    ]
    job = await api.client.post("/api/v1/user/alice/jobs", json=v1_job("keyed", "default"), headers=bearer)
    assert job.status == 202, await job.text()
    key = await api.client.get("/api/v1/user/alice/jobs/keyed/ssh/alice~keyed", headers=bearer)
    assert "PRIVATE KEY" in await key.text()
    secrets.append(key)
    assert [s.status for s in secrets] == [200, 200, 200, 200, 200, 201, 200]
    for s in secrets:
        assert has(s.headers, NO_STORE) and has(s.headers, NOSNIFF), (s.url, dict(s.headers))
    # and what carries no secret is left to the caches
    for path in ("/api/v2/users/me", "/api/v1/user/alice/jobs/keyed", "/api/v1/user/alice/jobs/keyed/ssh"):
        plain = await api.client.get(path, headers=bearer)
        assert plain.status == 200 and not has(plain.headers, NO_STORE), (path, dict(plain.headers))


async def raw_answer(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return answer


async def test_what_aiohttp_answers_before_the_app_says_nosniff_too() -> None:
    """The HTTP parser's refusals and an Expect other than 100-continue, as the submit service serves them."""
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, None), bus=MemoryBus(), users=cast(Any, None))
    runner = ApiRunner(create_app(deps), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for request, status in [
                (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b" 400 "),
                (b"GET /api/v1 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", b" 431 "),
                (b"POST /api/v1/token HTTP/1.1\r\nHost: x\r\nExpect: no\r\nContent-Length: 2\r\n\r\n{}", b" 417 ")]:
            answer = await raw_answer(port, request)
            head = answer.split(b"\r\n\r\n", 1)[0]
            assert status in head.split(b"\r\n", 1)[0], answer[:200]
            assert b"\r\nX-Content-Type-Options: nosniff" in head, head
    finally:
        await runner.cleanup()
        deps.cpu.shutdown()
