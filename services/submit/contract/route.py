"""The route table's type: each route of the REST API is one :class:`Route` value, declared beside its
handler (its module's ``ROUTES``), which drives both aiohttp's router (:func:`add_routes`) and the OpenAPI
document's paths (:func:`paths`); so no route can be served undescribed, or described and not served.

A route says its method and path, its handler, who may call it (``auth``), its parameters, the body it
reads (:class:`ModelBody`: validated by its model, refusals in OpenPAI's words by
:mod:`services.submit.contract.refusals`; or :class:`Body`: a component read by the handler's own pipeline, a job
config), what it answers on success (:class:`Reply`, by model) and the statuses of its errors (their codes
from :mod:`services.submit.errors`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel

from services.submit.contract.bodies import FORM_TYPES, read_form, read_json
from services.submit.contract.configschema import REF
from services.submit.contract.refusals import validated
from services.submit.contract.requests import Request
from services.submit.errors import ApiError, ErrorCode, error_responses

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Method = Literal["GET", "PUT", "POST", "DELETE"]
# Who may call a route: anyone ("none"), a bearer token's holder ("token"), anyone, a token's holder
# seeing more ("optional"), or a token's holder signed in as a person ("person": a session's token, never an
# application's; those routes change users, groups, tokens, virtual clusters or notification settings, and an
# application token is refused there with 403, as OpenPAI v1.8's ``checkNotApplication``).
Auth = Literal["none", "token", "optional", "person"]
Schema = Mapping[str, Any]

STRING: Schema = {"type": "string"}
_SECURITY: dict[Auth, list[dict[str, list[str]]]] = {"token": [{"bearer": []}], "person": [{"bearer": []}],
                                                     "optional": [{}, {"bearer": []}]}
PERSON_ONLY = "not with an application token (403 ForbiddenUserError)"
_NO_STORE = {"Cache-Control": {"description": "no-store: the answer holds a secret no cache may keep",
                               "schema": {"type": "string", "const": "no-store"}}}
R = TypeVar("R", bound=Request)
_FORM_MEDIA = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")


def ref(model: type[BaseModel] | str) -> dict[str, str]:
    """A reference to a component schema: a model's (by its class name), or one named."""
    return {"$ref": REF.format(model=model if isinstance(model, str) else model.__name__)}


@dataclass(frozen=True)
class Param:
    """A path or query parameter (a path's is always required)."""

    name: str
    where: Literal["path", "query"]
    schema: Schema = field(default_factory=lambda: STRING)
    description: str = ""

    def described(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "in": self.where}
        if self.where == "path":
            out["required"] = True
        if self.description:
            out["description"] = self.description
        return {**out, "schema": dict(self.schema)}


@dataclass(frozen=True)
class WholeNumber:
    """A whole number a route reads from its query, ``least``-``most``: one declaration for the handler
    (:meth:`read`) and the document (:meth:`param`), so the two cannot disagree on its bounds."""

    name: str
    default: int
    least: int
    most: int
    hint: str = ""  # what the refusal adds after the bounds

    def read(self, request: web.Request) -> int:
        """ASCII digits only (``int`` would also take '\u0661', fullwidth digits, ' 1', '1_0', '+1'); 400 naming
        the parameter otherwise, never echoing the value."""
        raw = request.query.get(self.name)
        if raw is None:
            return self.default
        if raw.isascii() and raw.isdigit() and len(raw) <= len(str(self.most)) and self.least <= int(raw) <= self.most:
            return int(raw)
        raise ApiError("InvalidParametersError",
                       f"{self.name}: must be a whole number {self.least}-{self.most} in ASCII digits{self.hint}")

    def param(self) -> Param:
        return Param(self.name, "query", {"type": "integer", "minimum": self.least, "maximum": self.most,
                                          "default": self.default})


@dataclass(frozen=True)
class Reply:
    """A success answer: JSON of a model (or a schema), or other media types' schemas; its headers."""

    description: str
    model: type[BaseModel] | str | None = None
    content: Mapping[str, Schema] = field(default_factory=dict)
    headers: Mapping[str, Schema] = field(default_factory=dict)

    def described(self) -> dict[str, Any]:
        content = {**({"application/json": ref(self.model)} if self.model is not None else {}), **self.content}
        out: dict[str, Any] = {"description": self.description}
        if content:
            out["content"] = {media: {"schema": dict(schema)} for media, schema in content.items()}
        if self.headers:
            out["headers"] = {name: dict(header) for name, header in self.headers.items()}
        return out


def text(description: str, *media: str) -> Reply:
    """An answer of text in each of ``media`` (default: text/plain)."""
    return Reply(description, content={m: STRING for m in media or ("text/plain",)})


@dataclass(frozen=True)
class Body:
    """A body the handler reads through its own pipeline (a job config): only its component is declared."""

    schema: str
    form: bool = False  # also taken as a form (urlencoded or multipart)
    # Its media types and their schemas, where it is not a component in JSON (a v2 job: YAML or JSON).
    content: Mapping[str, Schema] = field(default_factory=dict)

    def media(self) -> dict[str, Any]:
        if self.content:
            return {m: {"schema": dict(schema)} for m, schema in self.content.items()}
        return {m: {"schema": ref(self.schema)} for m in (_FORM_MEDIA if self.form else ("application/json",))}


@dataclass(frozen=True)
class ModelBody(Generic[R]):
    """A body validated by its model: the handler reads it when it is ready to (after checking who asks)."""

    model: type[R]
    form: bool = False  # documented as a form too (any of these bodies is read from a form when sent as one)

    @property
    def schema(self) -> str:
        return self.model.__name__

    async def read(self, request: web.Request) -> R:
        """The body as the model, or 400 naming each problem in OpenPAI's words."""
        data = await read_form(request) if request.content_type in FORM_TYPES else await read_json(request)
        return validated(self.model, data, words=self.model.WORDS)


@dataclass(frozen=True)
class Route:
    method: Method
    path: str
    handler: Handler
    summary: str
    replies: Mapping[int, Reply]
    errors: tuple[int, ...] = ()  # the statuses of its errors (400 where it reads a body or a user's name, ...)
    also: Mapping[int, tuple[ErrorCode, ...]] = field(default_factory=dict)  # codes only this route answers with
    auth: Auth = "none"
    params: tuple[Param, ...] = ()
    body: Body | ModelBody[Any] | None = None
    # Its success answers hand out a secret (a token, a private key, a signing key): every answer of it says
    # Cache-Control: no-store (services.submit.contract.headers).
    secret: bool = False

    def __post_init__(self) -> None:
        if self.auth == "person" and not {401, 403} <= set(self.errors):
            raise ValueError(f"{self.method} {self.path} is for people only: its errors must list 401 and 403")

    def operation(self) -> dict[str, Any]:
        """The route as an OpenAPI operation."""
        op: dict[str, Any] = {"summary": self.summary}
        if self.auth == "person":
            op["description"] = PERSON_ONLY
        if self.auth in _SECURITY:
            op["security"] = _SECURITY[self.auth]
        if self.params:
            op["parameters"] = [p.described() for p in self.params]
        if self.body is not None:
            if isinstance(self.body, Body):
                content = self.body.media()
            else:
                media = _FORM_MEDIA if self.body.form else ("application/json",)
                content = {m: {"schema": ref(self.body.schema)} for m in media}
            op["requestBody"] = {"required": True, "content": content}
        replies = {str(s): r.described() for s, r in self.replies.items()}
        if self.secret:
            for reply in replies.values():
                reply["headers"] = {**reply.get("headers", {}), **_NO_STORE}
        op["responses"] = {**replies, **error_responses(*self.errors, also=self.also)}
        return op


ROUTE_TABLE = web.AppKey("route_table", dict[tuple[str, str], Route])


def add_routes(app: web.Application, routes: Sequence[Route]) -> None:
    """Register each route on the app's router (a GET also answers HEAD, as aiohttp's ``add_get`` does), and
    keep the table, so that what a route declares is known where a request of it is answered (:func:`route_of`)."""
    table: dict[tuple[str, str], Route] = {(r.method, r.path): r for r in routes}
    app[ROUTE_TABLE] = table
    for r in routes:
        if r.method == "GET":
            app.router.add_get(r.path, r.handler)
        else:
            app.router.add_route(r.method, r.path, r.handler)


def route_of(request: web.Request) -> Route | None:
    """The route table's declaration of the route a request was routed to; None where it was routed to none
    (404, 405) or the app has no table."""
    resource = getattr(getattr(request.match_info, "route", None), "resource", None)
    table = request.app.get(ROUTE_TABLE)
    if resource is None or table is None:
        return None
    method = "GET" if request.method == "HEAD" else request.method
    return table.get((method, str(resource.canonical)))


def paths(routes: Sequence[Route]) -> dict[str, dict[str, Any]]:
    """The OpenAPI ``paths`` of the routes: each path's operations by method."""
    out: dict[str, dict[str, Any]] = {}
    for r in routes:
        ops = out.setdefault(r.path, {})
        if r.method.lower() in ops:
            raise ValueError(f"{r.method} {r.path} is declared twice")
        ops[r.method.lower()] = r.operation()
    return out
