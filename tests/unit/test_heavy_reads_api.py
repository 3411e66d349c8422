"""The anonymous budget and the list's query numbers, through the app (a store in memory): the 429 is the
documented answer, with Retry-After; a token is never in the budget; numbers are ASCII digits only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from shared.bus.memory import MemoryBus
from shared.settings.model import Settings
from tests.unit.test_openapi_answers import DOC, FakeStore, FakeUsers

pytestmark = pytest.mark.unit

DEEP = "/api/v1/jobs?limit=20&offset=500"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    deps = SubmitDeps(settings=Settings.from_env({"PAIQ_ANONYMOUS_HEAVY_READS": "1"}),
                      store=cast(Any, FakeStore()), bus=MemoryBus(), users=cast(Any, FakeUsers()))
    async with TestClient(TestServer(create_app(deps))) as test_client:
        yield test_client
    deps.cpu.shutdown()


async def test_beyond_the_budget_an_anonymous_deep_page_is_the_documented_429(client: TestClient[Any, Any]) -> None:
    assert (await client.get(DEEP)).status == 200
    refused = await client.get(DEEP)
    body = await refused.json()
    assert refused.status == 429 and body["code"] == "TooManyRequestsError", body
    assert refused.headers["Retry-After"] == "1"
    assert "PAIQ" not in body["message"] and "token" in body["message"]
    documented = DOC["paths"]["/api/v1/jobs"]["get"]["responses"]["429"]
    assert "Retry-After" in documented["headers"]
    jsonschema.validate(body, {**documented["content"]["application/json"]["schema"], "components": DOC["components"]})
    for path in ("/api/v1/user/alice/jobs?offset=1", "/api/v1/user/alice/jobs/failed/profile"):
        assert (await client.get(path)).status == 429, path
    # what is not heavy, and what comes with a token, is not in the budget
    assert (await client.get("/api/v1/jobs?limit=20")).status == 200
    assert (await client.get("/api/v1/user/alice/jobs/failed")).status == 200
    assert (await client.get(DEEP, headers={"Authorization": "Bearer bob-token"})).status == 200
    assert (await client.get(DEEP, headers={"Authorization": "Bearer not-a-token"})).status == 429
    # a request refused for its parameters costs nothing of the budget, and is refused as it is
    for bad in ("/api/v1/jobs?offset=100001", "/api/v1/jobs?state=DONE", "/api/v1/user/alice/jobs?limit=0"):
        assert (await client.get(bad)).status == 400, bad


@pytest.mark.parametrize(("query", "name"), [
    ("limit=%D9%A1", "limit"), ("limit=%EF%BC%95", "limit"), ("limit=+5", "limit"), ("limit=", "limit"),
    ("limit=10001", "limit"), ("offset=%D9%A1", "offset"), ("offset=100001", "offset"), ("offset=-0", "offset"),
])
async def test_list_numbers_are_ascii_digits_in_range(client: TestClient[Any, Any], query: str, name: str) -> None:
    resp = await client.get(f"/api/v1/jobs?{query}", headers={"Authorization": "Bearer bob-token"})
    body = await resp.json()
    assert resp.status == 400 and body["code"] == "InvalidParametersError", body
    assert body["message"].startswith(f"{name}: must be a whole number"), body
