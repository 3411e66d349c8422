"""A name in the OpenAPI document's components is one schema: a model the routes read or answer with is
described under its class name by its own schema (and so are the models it holds), never by another's that
took the name; and the body each route reads is, in the document the app serves, the schema of the model the
route parses it with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from services.submit.app import create_app
from services.submit.contract.configschema import REF
from services.submit.contract.route import ModelBody, Route
from services.submit.deps import SubmitDeps
from services.submit.openapi import SchemaNameTakenError, document, named_schemas
from services.submit.routes.table import ROUTES
from shared.bus.memory import MemoryBus
from shared.settings.model import Settings

pytestmark = pytest.mark.unit

DOC = document()
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]


def registered() -> dict[tuple[type[BaseModel], JsonSchemaMode], str]:
    """Every model a route reads (validated) or answers with (serialized), and the first route that does."""
    out: dict[tuple[type[BaseModel], JsonSchemaMode], str] = {}
    for r in ROUTES:
        if isinstance(r.body, ModelBody):
            out.setdefault((r.body.model, "validation"), f"{r.method} {r.path}")
        for reply in r.replies.values():
            if isinstance(reply.model, type):
                out.setdefault((reply.model, "serialization"), f"{r.method} {r.path}")
    return out


MODELS = registered()


def own_schemas(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
    """The model's schema and those of the models it holds, by the names the document refers to them by."""
    _, generated = models_json_schema([(model, mode)], by_alias=True, ref_template=REF)
    schemas: dict[str, Any] = generated["$defs"]
    return schemas


@pytest.mark.parametrize(("model", "mode"), list(MODELS), ids=[f"{m.__name__} ({mode})" for m, mode in MODELS])
def test_a_model_is_described_under_its_name_by_its_own_schema(model: type[BaseModel], mode: JsonSchemaMode) -> None:
    """Two different models (or a model and a hand-made schema) under one name: one of them is described by the
    other's schema, or pydantic names them apart (``module__Name``) and the routes' references dangle."""
    own = own_schemas(model, mode)
    assert model.__name__ in own, f"{model.__name__} shares its name with another model it holds: {sorted(own)}"
    for name, schema in own.items():
        assert SCHEMAS.get(name) == schema, (
            f"the document's {name!r} is not the schema of {model.__name__}'s (read or answered by "
            f"{MODELS[model, mode]}): two schemas were registered under that name")


def test_a_name_given_to_two_different_schemas_is_refused() -> None:
    assert named_schemas(("a", {"A": {"type": "string"}}), ("b", {"A": {"type": "string"}, "B": {}})) == {
        "A": {"type": "string"}, "B": {}}
    with pytest.raises(SchemaNameTakenError, match=r"'A'.*both a and b"):
        named_schemas(("a", {"A": {"type": "string"}}), ("b", {"A": {"type": "object"}}))


@pytest.fixture
async def served() -> AsyncIterator[dict[str, Any]]:
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, None), bus=MemoryBus(), users=cast(Any, None))
    async with TestClient(TestServer(create_app(deps))) as client:
        resp = await client.get("/api/v1/openapi.json")
        assert resp.status == 200
        yield await resp.json()
    deps.cpu.shutdown()


def _body(doc: dict[str, Any], route: Route) -> dict[str, Any]:
    ref = doc["paths"][route.path][route.method.lower()]["requestBody"]["content"]["application/json"]["schema"]
    found: dict[str, Any] = doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
    return found


async def test_the_served_document_gives_each_route_the_body_it_parses(served: dict[str, Any]) -> None:
    routes = [r for r in ROUTES if isinstance(r.body, ModelBody)]
    for route in routes:
        assert isinstance(route.body, ModelBody)
        assert _body(served, route) == own_schemas(route.body.model, "validation")[route.body.model.__name__], (
            route.method, route.path)
    # the one that was wrong: a user's VCs, not a VC's body (quota, borrowing, users, groups)
    vcs = next(r for r in routes if (r.method, r.path) == ("PUT", "/api/v2/users/{user}/virtualcluster"))
    assert set(_body(served, vcs)["properties"]) == {"virtualCluster"}
    vc = next(r for r in ROUTES if (r.method, r.path) == ("PUT", "/api/v1/virtual-clusters/{vc}"))
    body = served["paths"][vc.path]["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert {"quota", "borrowing", "users", "groups"} <= set(served["components"]["schemas"][body.rsplit("/")[-1]][
        "properties"])
