"""``GET /api/v2/jobs?order=`` through the real app and store (a MongoDB-wire server): the portal's sorts page by
offset and by ``X-Next-Cursor`` as a plain sort of the same jobs, with filters and ``withTotalCount`` (the same
tally in every order); what no index serves is a 400 that says why; the answers keep v1.8's shape."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db import listorder
from shared.db.lists.orders import Order
from shared.db.store import Store
from shared.settings.model import Settings
from tests.infra import HASH_ROUNDS
from tests.integration.test_v2_list_order import FILTERS, a_job, expected

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOC = document()


class Env:
    def __init__(self, client: TestClient[Any, Any], token: str, jobs: list[Any]) -> None:
        self.client, self.token, self.jobs = client, token, jobs

    async def get(self, query: str, status: int = 200) -> tuple[Any, str | None]:
        resp = await self.client.get(f"/api/v2/jobs?{query}", headers={"Authorization": f"Bearer {self.token}"})
        body = await resp.json()
        assert resp.status == status, (query, resp.status, body)
        schema = "Error" if status >= 400 else ("V2JobPage" if "withTotalCount=true" in query else "V2JobList")
        jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}", "components": DOC["components"]})
        return body, resp.headers.get("X-Next-Cursor")


@pytest.fixture(scope="module")
async def env(mongo_uri: str) -> AsyncIterator[Env]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"v2order_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    rng = random.Random(8)
    jobs = [a_job(i, rng) for i in range(80)] + [a_job(i, rng, active=True) for i in range(80, 90)]
    await store.insert_jobs(jobs[:80])
    for job in jobs[80:]:
        await store.insert_job(job)
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("alice", "alice-password", admin=False)
    deps = SubmitDeps(settings=Settings.from_env({}), store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        resp = await test_client.post("/api/v2/authn/basic/login",
                                      json={"username": "alice", "password": "alice-password"})
        yield Env(test_client, (await resp.json())["token"], jobs)
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


def _names(body: Any) -> list[str]:
    return [f"{j['username']}~{j['name']}" for j in (body["data"] if isinstance(body, dict) else body)]


@pytest.mark.parametrize(("query", "filters"), [
    ("", "none"), ("username=u1", "user"), ("state=FAILED", "state"), ("vc=vision", "vc"),
    ("username=u1,u4", "users"), ("keyword=train", "keyword"),
])
@pytest.mark.parametrize("order", ["jobName,ASC", "submissionTime,ASC", "username,DESC", "vc,ASC", "retries,DESC",
                                   "totalTaskNumber,ASC", "totalGpuNumber,DESC", "state,ASC", "completionTime,DESC",
                                   "jobPriority,ASC"])
async def test_the_portals_sorts_page_as_a_plain_sort(env: Env, order: str, query: str, filters: str) -> None:
    want = [i.split("~")[0] + "~" + i.split("~")[1] for i in expected(env.jobs, set(), Order.parse(order),
                                                                         FILTERS[filters])]
    prefix = f"order={order}&{query}&limit=7"
    by_offset: list[str] = []
    for offset in range(0, len(want) + 7, 7):
        body, _ = await env.get(f"{prefix}&offset={offset}&withTotalCount=true")
        by_offset += _names(body)
        assert body["totalCount"] >= len(by_offset), "a tally or a lower bound, as for newest first"
        if filters in ("none", "user", "state", "vc", "users"):
            assert body["totalCount"] == len(want), "the same tally in every order"
    assert by_offset == want
    by_cursor: list[str] = []
    body, cursor = await env.get(prefix)
    by_cursor += _names(body)
    while cursor:
        body, cursor = await env.get(f"{prefix}&cursor={cursor}")
        by_cursor += _names(body)
    assert by_cursor == want


async def test_what_no_index_serves_is_a_400_that_says_why(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listorder, "MAX_SORTED", 20)
    body, _ = await env.get("order=jobName,ASC", status=400)
    assert body["code"] == "InvalidParametersError" and "no index holds the list in that order" in body["message"]
    body, _ = await env.get("order=retries,ASC&offset=9990&limit=20", status=400)
    assert "offset + limit: at most 10000 with order=retries,ASC" in body["message"]
    body, _ = await env.get("order=jobName,SIDEWAYS", status=400)
    assert "order: one of jobName, submissionTime" in body["message"]
    _, cursor = await env.get("order=state,ASC&limit=3")
    body, _ = await env.get(f"order=state,DESC&limit=3&cursor={cursor}", status=400)
    assert "not a cursor of order=state,DESC" in body["message"]
    body, _ = await env.get("order=username,ASC&username=u2&limit=100")
    assert body and {j["username"] for j in body} == {"u2"}
