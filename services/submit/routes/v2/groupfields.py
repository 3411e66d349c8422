"""OpenPAI v1.8's per-field changes of a group (``routes/v2/group.js``: "Legacy API", and the "Internal API"
``extension/*``), and its singular aliases: v1.8 mounted its user and group routers at ``/api/v2/user`` and
``/api/v2/group`` as well as at ``/users`` and ``/groups`` (``routes/v2/index.js``), so every user and group
route answers under both (:func:`singular`).

Who may: an admin, never with an application token (v1.8's ``checkNotApplication``, ``checkAdmin``); a body
is read once the caller is known. A group that does not exist is ``400 NoGroupError``, as v1.8 answered it
on ``extension/*`` (on the other three, v1.8 answered ``500 UnknownError``, a fault of its own not copied).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

import structlog
from aiohttp import web

from services.submit.contract.answers import Message
from services.submit.contract.requests import Request
from services.submit.contract.route import Handler, ModelBody, Param, Reply, Route
from services.submit.contract.v2.users import (
    GroupDescriptionChange,
    GroupExtensionChange,
    GroupExtensionValue,
    GroupExternalNameChange,
    v2_answer,
)
from services.submit.deps import DEPS
from services.submit.errors import ApiError, ErrorCode
from services.submit.routes.access import require_admin
from shared.db.groups import GROUP_PATTERN, Group, Groups

log = structlog.get_logger("paiq.submit.v2.groupfields")

EXTENSION_VALUE = ModelBody(GroupExtensionValue)
MAX_DEPTH = 4  # keys of extension/<key>/...: v1.8 took any number; its portal and clients set acls/<field>
MAX_KEY = 256
R = TypeVar("R", bound=Request)
# What a change sets: the group's fields (by name) from the group as it is and the body asked.
Change = Callable[[Group, R], dict[str, Any]]


def assign(extension: dict[str, Any], keys: list[str], value: Any) -> dict[str, Any]:
    """v1.8's ``assignValueByKeyarray``: ``value`` set at ``keys`` of a copy of ``extension``, the objects on the
    way made where missing; 400 where one on the way is not an object (v1.8 dropped such a value silently)."""
    out = dict(extension)
    node = out
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key, {})
        if not isinstance(child, dict):
            raise ApiError("InvalidParametersError", f"extension/{'/'.join(keys[:depth + 1])}: is not an object")
        node[key] = node = dict(child)
    node[keys[-1]] = value
    return out


async def _group(request: web.Request) -> tuple[Groups, Group]:
    name = request.match_info["group"]
    groups = Groups(request.app[DEPS].store)
    group = await groups.get(name) if GROUP_PATTERN.fullmatch(name) else None
    if group is None:
        raise ApiError("NoGroupError", f"Group {name[:64]} is not found.", status=400)
    return groups, group


async def _change(request: web.Request, by: str, body: ModelBody[R], change: Change[R], message: str) -> web.Response:
    """Once the caller is known (``by``, an admin): the body read, the group found, ``change`` of the two saved."""
    asked = await body.read(request)
    groups, group = await _group(request)
    changes = change(group, asked)
    if not await groups.replace(group.model_copy(update=changes)):  # removed meanwhile
        raise ApiError("NoGroupError", f"Group {group.name} is not found.", status=400)
    log.info("group changed", group=group.name, fields=sorted(changes), by=by)
    return v2_answer(Message(message=message), status=201)


async def put_extension_value(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    keys = [request.match_info[f"key{i}"] for i in range(1, MAX_DEPTH + 1) if f"key{i}" in request.match_info]
    if any(len(k) > MAX_KEY for k in keys):
        raise ApiError("InvalidParametersError", f"extension: a key has at most {MAX_KEY} characters")
    return await _change(request, principal.user, EXTENSION_VALUE,
                         lambda group, asked: {"extension": assign(group.extension, keys, asked.data)},
                         "Update group extension data successfully.")


_GROUP = Param("group", "path", {"type": "string", "pattern": f"^{GROUP_PATTERN.pattern}$"},
               "a group name (400 NoGroupError otherwise, as OpenPAI)")
_CHANGED = {201: Reply("changed", Message)}
_ERRORS = (400, 401, 403, 408, 413)
_NO_GROUP: dict[int, tuple[ErrorCode, ...]] = {400: ("NoGroupError",)}


def _route(tail: str, handler: Handler, summary: str, body: ModelBody[Any], *params: Param) -> Route:
    """``PUT /api/v2/groups/{group}/<tail>``: an admin's change of a group."""
    return Route("PUT", f"/api/v2/groups/{{group}}/{tail}", handler, summary, _CHANGED, _ERRORS, also=_NO_GROUP,
                 auth="person", params=(_GROUP, *params), body=body)


def _field(tail: str, summary: str, body: ModelBody[R], change: Change[R], message: str) -> Route:
    """The route of one field of a group: ``change`` makes what is saved from the group and the body."""
    async def put(request: web.Request) -> web.Response:
        principal = await require_admin(request)
        return await _change(request, principal.user, body, change, message)
    return _route(tail, put, summary, body)


def _key_routes() -> tuple[Route, ...]:
    """``extension/<key>`` to ``extension/<key>/<key>/<key>/<key>``: one route per depth (a path parameter is
    one segment)."""
    out = []
    for depth in range(1, MAX_DEPTH + 1):
        names = [f"key{i}" for i in range(1, depth + 1)]
        out.append(_route(
            "extension/" + "/".join(f"{{{n}}}" for n in names), put_extension_value,
            f"admin: set the value at a path of {depth} key{'s' if depth > 1 else ''} of a group's extension "
            "(data: any JSON; objects on the way made where missing)", EXTENSION_VALUE,
            *(Param(n, "path", {"type": "string", "maxLength": MAX_KEY}) for n in names)))
    return tuple(out)


ROUTES = (
    _field("extension", "admin: a group's extension, its keys merged in", ModelBody(GroupExtensionChange),
           lambda group, asked: {"extension": {**group.extension, **asked.extension}},
           "update group extension data successfully."),
    *_key_routes(),
    _field("description", "admin: a group's description", ModelBody(GroupDescriptionChange),
           lambda group, asked: {"description": asked.description}, "update group description data successfully."),
    _field("externalname", "admin: a group's external name", ModelBody(GroupExternalNameChange),
           lambda group, asked: {"external_name": asked.external_name},
           "update group externalNameData data successfully."),
)

_PLURAL = {"/api/v2/users": "/api/v2/user", "/api/v2/groups": "/api/v2/group"}


def singular(routes: Iterable[Route]) -> tuple[Route, ...]:
    """Each user and group route again under v1.8's singular ``/api/v2/user`` and ``/api/v2/group``."""
    out = []
    for route in routes:
        for plural, one in _PLURAL.items():
            if route.path == plural or route.path.startswith(plural + "/"):
                out.append(replace(route, path=one + route.path[len(plural):],
                                   summary=f"{route.summary} (v1.8's alias of {route.path})"))
    return tuple(out)
