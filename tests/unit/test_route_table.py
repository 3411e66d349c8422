"""The route table (services.submit.routes.table) is the one declaration of the REST API's routes: aiohttp's router
and the OpenAPI document are both built from it, so neither can hold a route the other lacks; a page's
bounds are read and described from one value; bodies are validated by their models, refused in OpenPAI's
words."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest
from aiohttp.test_utils import make_mocked_request
from pydantic import BaseModel

from services.submit.app import create_app
from services.submit.contract.notify import NOTIFY_REQUESTS
from services.submit.contract.refusals import validated
from services.submit.contract.requests import REQUESTS, ExecutionTypeChange, TokenRequest, UserChange, UserRemoval
from services.submit.contract.route import ModelBody, Route, WholeNumber, paths
from services.submit.contract.v2.jobs import V2_JOB_REQUESTS
from services.submit.contract.v2.users import V2_REQUESTS
from services.submit.errors import ApiError
from services.submit.openapi import document
from services.submit.routes.listing import LIMIT, OFFSET
from services.submit.routes.table import ROUTES

pytestmark = pytest.mark.unit

DOC = document()


def served() -> dict[tuple[str, str], object]:
    """What aiohttp's router of a new app serves: each (method, path) and its handler (HEAD aside)."""
    app = create_app(cast(Any, None))
    return {(r.method, r.resource.canonical): r.handler for r in app.router.routes()
            if r.resource is not None and r.method != "HEAD"}


def test_the_router_serves_exactly_the_table_and_the_document_describes_exactly_the_router() -> None:
    router = served()
    documented = {(method.upper(), path) for path, ops in DOC["paths"].items() for method in ops}
    assert set(router) == documented, (set(router) - documented, documented - set(router))
    assert router == {(r.method, r.path): r.handler for r in ROUTES}


def test_a_route_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        paths([ROUTES[0], ROUTES[0]])


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_every_path_parameter_is_declared_and_nothing_else(route: Route) -> None:
    assert set(re.findall(r"\{(\w+)\}", route.path)) == {p.name for p in route.params if p.where == "path"}


def test_every_request_model_is_a_body_some_route_reads() -> None:
    read = {r.body.model for r in ROUTES if isinstance(r.body, ModelBody)}
    assert read == set(REQUESTS) | set(V2_REQUESTS) | set(V2_JOB_REQUESTS) | set(NOTIFY_REQUESTS)


@pytest.mark.parametrize("bound", [LIMIT, OFFSET], ids=lambda b: b.name)
def test_a_page_bound_is_read_and_documented_from_one_value(bound: WholeNumber) -> None:
    for path in ("/api/v1/jobs", "/api/v1/user/{user}/jobs"):
        params = {p["name"]: p for p in DOC["paths"][path]["get"]["parameters"]}
        schema = params[bound.name]["schema"]
        assert (schema["minimum"], schema["maximum"], schema["default"]) == (bound.least, bound.most, bound.default)

    def read(value: str | None) -> int:
        query = "" if value is None else f"?{bound.name}={value}"
        return bound.read(make_mocked_request("GET", f"/api/v1/jobs{query}"))

    assert (read(None), read(str(bound.least)), read(str(bound.most))) == (bound.default, bound.least, bound.most)
    for refused in (str(bound.least - 1), str(bound.most + 1), "\u0661", " 1", "+1", "1_0"):
        with pytest.raises(ApiError, match=f"^{bound.name}: must be a whole number {bound.least}-{bound.most}"):
            read(refused)


TOKEN_RULE = "expiration: must be a whole number of seconds, 1-31536000"
NAME_RULE = "must be 1-64 letters, digits, '_', '-' or '.', not dots only"


@pytest.mark.parametrize(("model", "body", "message"), [
    (TokenRequest, {"password": "x"}, "username: is required and must be a non-empty string"),
    (TokenRequest, {"username": "", "password": "x"}, "username: is required and must be a non-empty string"),
    (TokenRequest, {"username": 5, "password": "x"}, "username: is required and must be a non-empty string"),
    (TokenRequest, {"username": "a b", "password": "x"}, f"user name 'a b' {NAME_RULE}"),
    (TokenRequest, {"username": "..", "password": "x"}, f"user name '..' {NAME_RULE}"),
    (TokenRequest, {"username": "alice"}, "password: is required and must be a non-empty string"),
    (TokenRequest, {"username": "alice", "password": "p" * 73},
     "password must be at most 72 bytes of UTF-8 (bcrypt's limit)"),
    *((TokenRequest, {"username": "alice", "password": "x", "expiration": e}, TOKEN_RULE)
      for e in (None, 0, 1.5, True, "1.5", " 3", "\u0663", "9" * 5000, float("inf"), 31536001, [])),
    (UserChange, {"username": "bob"}, "password: is required and must be a non-empty string"),
    (UserChange, {"username": "bob", "password": "short"}, "password must be at least 6 characters"),
    (UserChange, {"username": "bob", "password": "secret", "admin": "true"}, "admin: must be true or false"),
    (UserChange, {"username": "bob", "password": "secret", "groups": [""]},
     "groups: must be a list of non-empty strings"),
    (UserChange, {"username": "bob", "password": "secret", "groups": "g"},
     "groups: must be a list of non-empty strings"),
    (UserChange, {"username": "bob", "modify": "yes"}, "password: is required and must be a non-empty string"),
    (UserRemoval, {}, "username: is required and must be a non-empty string"),
    (UserRemoval, ["bob"], "the body must be a JSON object or a form"),
    (ExecutionTypeChange, {"value": "stop"}, "value: must be \"STOP\", got 'stop'"),
    (ExecutionTypeChange, ["STOP"], 'value: must be "STOP", got None'),
    (ExecutionTypeChange, {"value": "S" * 5000}, f'value: must be "STOP", got \'{"S" * 36}...'),
    # each problem is named, in the order of the fields
    (TokenRequest, {"username": "a b", "expiration": 0},
     f"user name 'a b' {NAME_RULE}; password: is required and must be a non-empty string; {TOKEN_RULE}"),
])
def test_bodies_are_refused_in_openpais_words(model: type[BaseModel], body: object, message: str) -> None:
    with pytest.raises(ApiError) as refused:
        validated(model, body, words=getattr(model, "WORDS", None))
    assert (refused.value.code, refused.value.message) == ("InvalidParametersError", message)


@pytest.mark.parametrize(("model", "body", "value"), [
    (TokenRequest, {"username": "alice", "password": "x", "expiration": "60", "other": 1},
     TokenRequest(username="alice", password="x", expiration=60)),
    (TokenRequest, {"username": "alice", "password": "x", "expiration": 60.0},
     TokenRequest(username="alice", password="x", expiration=60)),
    (UserChange, {"username": "bob", "modify": True, "password": None, "admin": False},
     UserChange(username="bob", modify=True, admin=False)),
    (UserChange, {"username": "bob", "password": "secret", "modify": "yes", "groups": ["g"]},
     UserChange(username="bob", password="secret", groups=["g"])),
    (ExecutionTypeChange, {"value": "STOP", "other": 1}, ExecutionTypeChange(value="STOP")),
])
def test_bodies_are_read_as_openpai_read_them(model: type[BaseModel], body: object, value: BaseModel) -> None:
    assert validated(model, body) == value
