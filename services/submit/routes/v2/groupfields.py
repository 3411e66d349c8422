"""OpenPAI v1.8's per-field changes of a group (``routes/v2/group.js``: "Legacy API", and the "Internal API"
``extension/*``), and its singular aliases: v1.8 mounted its user and group routers at ``/api/v2/user`` and
``/api/v2/group`` as well as at ``/users`` and ``/groups`` (``routes/v2/index.js``), so every user and group
route answers under both (:func:`singular`).

Who may: an admin, never with an application token (v1.8's ``checkNotApplication``, ``checkAdmin``); a body
is read once the caller is known. A group that does not exist is ``400 NoGroupError``, as v1.8 answered it
on ``extension/*`` (on the other three, v1.8 answered ``500 UnknownError``, a fault of its own not copied).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web

from services.submit.contract.answers import Message
from services.submit.contract.errors import ApiError, ErrorCode
from services.submit.contract.route import ModelBody, Param, Reply, Route
from services.submit.contract.v2.users import (
    GroupDescriptionChange,
    GroupExtensionChange,
    GroupExtensionValue,
    GroupExternalNameChange,
    v2_answer,
)
from services.submit.deps import DEPS
from services.submit.routes.v2.users import admin_person
from shared.db.groups import GROUP_PATTERN, Group, Groups

log = structlog.get_logger("paiq.submit.v2.groupfields")

EXTENSION = ModelBody(GroupExtensionChange)
DESCRIPTION = ModelBody(GroupDescriptionChange)
EXTERNAL_NAME = ModelBody(GroupExternalNameChange)
EXTENSION_VALUE = ModelBody(GroupExtensionValue)
MAX_DEPTH = 4  # keys of extension/<key>/...: v1.8 took any number; its portal and clients set acls/<field>
MAX_KEY = 256


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


async def _save(groups: Groups, group: Group, changes: dict[str, Any], message: str, by: str) -> web.Response:
    if not await groups.replace(group.model_copy(update=changes)):  # removed meanwhile
        raise ApiError("NoGroupError", f"Group {group.name} is not found.", status=400)
    log.info("group changed", group=group.name, fields=sorted(changes), by=by)
    return v2_answer(Message(message=message), status=201)


async def put_extension(request: web.Request) -> web.Response:
    principal = await admin_person(request)
    asked = await EXTENSION.read(request)
    groups, group = await _group(request)
    return await _save(groups, group, {"extension": {**group.extension, **asked.extension}},
                       "update group extension data successfully.", principal.user)


async def put_extension_value(request: web.Request) -> web.Response:
    principal = await admin_person(request)
    keys = [request.match_info[f"key{i}"] for i in range(1, MAX_DEPTH + 1) if f"key{i}" in request.match_info]
    if any(len(k) > MAX_KEY for k in keys):
        raise ApiError("InvalidParametersError", f"extension: a key has at most {MAX_KEY} characters")
    asked = await EXTENSION_VALUE.read(request)
    groups, group = await _group(request)
    return await _save(groups, group, {"extension": assign(group.extension, keys, asked.data)},
                       "Update group extension data successfully.", principal.user)


async def put_description(request: web.Request) -> web.Response:
    principal = await admin_person(request)
    asked = await DESCRIPTION.read(request)
    groups, group = await _group(request)
    return await _save(groups, group, {"description": asked.description},
                       "update group description data successfully.", principal.user)


async def put_external_name(request: web.Request) -> web.Response:
    principal = await admin_person(request)
    asked = await EXTERNAL_NAME.read(request)
    groups, group = await _group(request)
    return await _save(groups, group, {"external_name": asked.external_name},
                       "update group externalNameData data successfully.", principal.user)


_GROUP = Param("group", "path", {"type": "string", "pattern": f"^{GROUP_PATTERN.pattern}$"},
               "a group name (400 NoGroupError otherwise, as OpenPAI)")
_CHANGED = {201: Reply("changed", Message)}
_ERRORS = (400, 401, 403, 408, 413)
_NO_GROUP: dict[int, tuple[ErrorCode, ...]] = {400: ("NoGroupError",)}


def _key_routes() -> tuple[Route, ...]:
    """``extension/<key>`` to ``extension/<key>/<key>/<key>/<key>``: one route per depth (a path parameter is
    one segment)."""
    out = []
    for depth in range(1, MAX_DEPTH + 1):
        names = [f"key{i}" for i in range(1, depth + 1)]
        out.append(Route(
            "PUT", "/api/v2/groups/{group}/extension/" + "/".join(f"{{{n}}}" for n in names), put_extension_value,
            f"admin: set the value at a path of {depth} key{'s' if depth > 1 else ''} of a group's extension "
            "(data: any JSON; objects on the way made where missing)", _CHANGED, _ERRORS, also=_NO_GROUP,
            auth="token", params=(_GROUP, *(Param(n, "path", {"type": "string", "maxLength": MAX_KEY}) for n in names)),
            body=EXTENSION_VALUE))
    return tuple(out)


ROUTES = (
    Route("PUT", "/api/v2/groups/{group}/extension", put_extension, "admin: a group's extension, its keys merged in",
          _CHANGED, _ERRORS, also=_NO_GROUP, auth="token", params=(_GROUP,), body=EXTENSION),
    *_key_routes(),
    Route("PUT", "/api/v2/groups/{group}/description", put_description, "admin: a group's description", _CHANGED,
          _ERRORS, also=_NO_GROUP, auth="token", params=(_GROUP,), body=DESCRIPTION),
    Route("PUT", "/api/v2/groups/{group}/externalname", put_external_name, "admin: a group's external name",
          _CHANGED, _ERRORS, also=_NO_GROUP, auth="token", params=(_GROUP,), body=EXTERNAL_NAME),
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
