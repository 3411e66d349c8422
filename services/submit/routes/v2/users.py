"""OpenPAI v1.8's /api/v2 users and groups.

Users are v1's (:class:`services.submit.users.Users`) with OpenPAI v1.8's fields (e-mail, extension). A
group is a small document (:class:`shared.db.groups.Groups`); its members are the users whose ``grouplist``
names it, as in OpenPAI. Which virtual clusters a group may use is the virtual clusters' ``groups``
(``PUT /api/v1/virtual-clusters/{vc}``), shown in the group's ``extension.acls.virtualClusters``; which
storages, the storage config's (:mod:`shared.storageconfig`). Who may call what is v1's: a user sees
themselves, an admin everyone; an admin changes users and groups; application tokens change nothing (the
routes that change are declared ``auth="person"``: :func:`services.submit.routes.access.principal_of`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiohttp import web

from services.submit.contract.answers import Message
from services.submit.contract.lookup import USER_PARAM
from services.submit.contract.route import ModelBody, Param, Reply, Route
from services.submit.contract.v2.users import (
    GroupAcls,
    GroupCreate,
    GroupExtension,
    Grouplist,
    GroupMember,
    GroupMembers,
    GroupRef,
    GroupUpdate,
    UserCreate,
    UserUpdate,
    V2Group,
    V2GroupList,
    V2User,
    V2UserList,
    v2_answer,
)
from services.submit.deps import DEPS
from services.submit.errors import ApiError, ErrorCode
from services.submit.routes.access import principal_of, require_admin
from services.submit.routes.notify import subscriptions_changed
from services.submit.users import UserInfo, check_user_name, may_use
from shared.db.groups import GROUP_PATTERN, Group, Groups
from shared.scheduling.vclusters import DEFAULT_VC, VirtualCluster, with_default
from shared.storageconfig import StorageConfigs, load_storage_configs

log = structlog.get_logger("paiq.submit.v2.users")


async def storages(request: web.Request) -> StorageConfigs:
    """The operator's storages (a small file, read when asked: an operator's edit shows at once)."""
    return await asyncio.to_thread(load_storage_configs, request.app[DEPS].settings.storage_config_path)


def user_v2(user: UserInfo, vcs: dict[str, VirtualCluster], configs: StorageConfigs) -> V2User:
    allowed = tuple(n for n, vc in vcs.items() if may_use(vc, user.name, user.groups, admin=user.admin))
    return V2User(username=user.name, grouplist=user.groups, email=user.email, extension=user.extension,
                  admin=user.admin, virtual_cluster=allowed,
                  storage_config=tuple(s.name for s in configs.usable_by(user.name, user.groups)))


def group_v2(group: Group, vcs: dict[str, VirtualCluster], configs: StorageConfigs) -> V2Group:
    acls = GroupAcls(admin=False, virtual_clusters=tuple(n for n, vc in vcs.items() if group.name in vc.groups),
                     storage_configs=tuple(s.name for s in configs.storages if group.name in s.groups))
    rest = {k: v for k, v in group.extension.items() if k != "acls"}
    return V2Group(groupname=group.name, description=group.description, external_name=group.external_name,
                   extension=GroupExtension(acls=acls, **rest))


async def _vcs(request: web.Request) -> dict[str, VirtualCluster]:
    return with_default(await request.app[DEPS].store.list_vcs())


async def grant_vcs(request: web.Request, user: str, names: list[str]) -> None:
    """OpenPAI's ``virtualCluster`` of a user: the VCs that name them are exactly these (besides those open to
    all); an unknown one is refused before anything changes (400 NoVirtualClusterError, as OpenPAI)."""
    store = request.app[DEPS].store
    stored = {vc.name: vc for vc in await store.list_vcs()}
    unknown = sorted(set(names) - set(stored) - {DEFAULT_VC})
    if unknown:
        raise ApiError("NoVirtualClusterError", f"Try to update nonexist: {', '.join(unknown)}", status=400)
    for vc in stored.values():
        if vc.name == DEFAULT_VC or "*" in vc.users or (user in vc.users) == (vc.name in names):
            continue
        users = (*vc.users, user) if vc.name in names else tuple(u for u in vc.users if u != user)
        await store.put_vc(vc.model_copy(update={"users": users}))


# -- users -----------------------------------------------------------------------------------------------------

USER_CREATE = ModelBody(UserCreate)
USER_UPDATE = ModelBody(UserUpdate)
GROUP_REF = ModelBody(GroupRef)
GROUPLIST = ModelBody(Grouplist)


async def list_users(request: web.Request) -> web.Response:
    await require_admin(request)
    deps = request.app[DEPS]
    vcs, configs = await _vcs(request), await storages(request)
    return v2_answer(V2UserList(tuple(user_v2(u, vcs, configs) for u in await deps.users.list_all())))


async def _one_user(request: web.Request, name: str) -> web.Response:
    info = await request.app[DEPS].users.get(name)
    if info is None:
        raise ApiError("NoUserError", f"User {name} is not found.")
    return v2_answer(user_v2(info, await _vcs(request), await storages(request)))


async def get_me(request: web.Request) -> web.Response:
    return await _one_user(request, (await principal_of(request)).user)


async def get_user(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    name = check_user_name(request.match_info["user"])
    if name != principal.user and not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} may see only their own profile, not {name}'s")
    return await _one_user(request, name)


async def create_user(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    asked = await USER_CREATE.read(request)
    # the VCs are checked before the user exists, so a refusal leaves nothing behind
    stored = {vc.name for vc in await request.app[DEPS].store.list_vcs()} | {DEFAULT_VC}
    unknown = sorted(set(asked.virtual_cluster) - stored)
    if unknown:
        raise ApiError("NoVirtualClusterError", f"Try to update nonexist: {', '.join(unknown)}", status=400)
    await request.app[DEPS].users.create(asked.username, asked.password, admin=asked.admin, email=asked.email,
                                         extension=asked.extension)
    await grant_vcs(request, asked.username, asked.virtual_cluster)
    log.info("user created", user=asked.username, by=principal.user)
    return v2_answer(Message(message="User is created successfully"), status=201)


async def update_user(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    data = (await USER_UPDATE.read(request)).data
    users = request.app[DEPS].users
    if not await users.exists(data.username):
        raise ApiError("NoUserError", f"User {data.username} not found.")
    if data.virtual_cluster is not None:
        await grant_vcs(request, data.username, data.virtual_cluster)
    if data.password is not None or data.admin is not None:
        await users.update(data.username, password=data.password, admin=data.admin)
    await users.set_profile(data.username, email=data.email, extension=data.extension)
    if data.email is not None:
        await subscriptions_changed(request, data.username)
    log.info("user updated", user=data.username, by=principal.user)
    return v2_answer(Message(message=f"Update user {data.username} successfully"), status=201)


async def delete_user(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    name = check_user_name(request.match_info["user"])
    await request.app[DEPS].users.delete(name)
    log.info("user removed", user=name, by=principal.user)
    return v2_answer(Message(message=f"user {name} is removed successfully"))


async def _missing_groups(request: web.Request, names: list[str]) -> None:
    found = await Groups(request.app[DEPS].store).existing(names)
    missing = [n for n in names if n not in found]
    if missing:
        raise ApiError("NoGroupError", f"Updated nonexistent grouplist: {','.join(missing)}")


async def put_grouplist(request: web.Request) -> web.Response:
    await require_admin(request)
    name = check_user_name(request.match_info["user"])
    grouplist = list(dict.fromkeys((await GROUPLIST.read(request)).grouplist))
    await _missing_groups(request, grouplist)
    await request.app[DEPS].users.update(name, password=None, admin=None, groups=tuple(grouplist))
    return v2_answer(Message(message="update user grouplist successfully."), status=201)


async def add_group(request: web.Request) -> web.Response:
    await require_admin(request)
    name = check_user_name(request.match_info["user"])
    group = (await GROUP_REF.read(request)).groupname
    await _missing_groups(request, [group])
    await request.app[DEPS].users.join(name, group)
    return v2_answer(Message(message=f"User {name} is added into group {group}"), status=201)


async def remove_group(request: web.Request) -> web.Response:
    await require_admin(request)
    name = check_user_name(request.match_info["user"])
    group = (await GROUP_REF.read(request)).groupname
    await request.app[DEPS].users.join(name, group, leave=True)
    return v2_answer(Message(message=f"User {name} is removed from group {group}"), status=201)


# -- groups ----------------------------------------------------------------------------------------------------

GROUP_CREATE = ModelBody(GroupCreate)
GROUP_UPDATE = ModelBody(GroupUpdate)


def _group_name(request: web.Request) -> str:
    name = request.match_info["group"]
    if not GROUP_PATTERN.fullmatch(name):
        raise ApiError("NoGroupError", f"Group {name[:64]!r} is not found.")
    return name


async def list_groups(request: web.Request) -> web.Response:
    await principal_of(request)
    vcs, configs = await _vcs(request), await storages(request)
    groups = await Groups(request.app[DEPS].store).list_all()
    return v2_answer(V2GroupList(tuple(group_v2(g, vcs, configs) for g in groups)))


async def get_group(request: web.Request) -> web.Response:
    await principal_of(request)
    name = _group_name(request)
    group = await Groups(request.app[DEPS].store).get(name)
    if group is None:
        raise ApiError("NoGroupError", f"Group {name} is not found.")
    return v2_answer(group_v2(group, await _vcs(request), await storages(request)))


async def create_group(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    asked = await GROUP_CREATE.read(request)
    group = Group(name=asked.groupname, description=asked.description, external_name=asked.external_name,
                  extension=asked.extension)
    if not await Groups(request.app[DEPS].store).create(group):
        raise ApiError("ConflictGroupError", f"Group {asked.groupname} already exists.")
    log.info("group created", group=group.name, by=principal.user)
    return v2_answer(Message(message="group is created successfully"), status=201)


async def update_group(request: web.Request) -> web.Response:
    principal = await require_admin(request)
    asked = await GROUP_UPDATE.read(request)
    data, groups = asked.data, Groups(request.app[DEPS].store)
    group = await groups.get(data.groupname)
    if group is None:
        raise ApiError("NoGroupError", f"Group {data.groupname} is not found.", status=400)
    if asked.patch:
        changes: dict[str, Any] = {"extension": {**group.extension, **(data.extension or {})}}
        changes.update({k: v for k, v in (("description", data.description),
                                          ("external_name", data.external_name)) if v is not None})
    else:
        changes = {"description": data.description or "", "external_name": data.external_name or "",
                   "extension": data.extension or {}}
    if not await groups.replace(group.model_copy(update=changes)):
        raise ApiError("NoGroupError", f"Group {data.groupname} is not found.", status=400)
    log.info("group updated", group=group.name, by=principal.user)
    return v2_answer(Message(message=f"update group {group.name} successfully."), status=201)


async def delete_group(request: web.Request) -> web.Response:
    """An admin removes a group; its users leave it (their own accounts stay)."""
    principal = await require_admin(request)
    name = _group_name(request)
    if not await Groups(request.app[DEPS].store).delete(name):
        raise ApiError("NoGroupError", f"Group {name} is not found.")
    await request.app[DEPS].users.leave_everywhere(name)
    log.info("group removed", group=name, by=principal.user)
    return v2_answer(Message(message="group is removed successfully"))


async def group_users(request: web.Request) -> web.Response:
    await require_admin(request)
    name = _group_name(request)
    if await Groups(request.app[DEPS].store).get(name) is None:
        raise ApiError("NoGroupError", f"Group {name} is not found.")
    members = await request.app[DEPS].users.members(name)
    return v2_answer(GroupMembers(tuple(GroupMember(username=u.name, cluster_admin=u.admin) for u in members)))


_GROUP = Param("group", "path", {"type": "string", "pattern": f"^{GROUP_PATTERN.pattern}$"},
               "a group name (404 otherwise)")
_NO_GROUP: dict[int, tuple[ErrorCode, ...]] = {404: ("NoGroupError",)}
_ADMIN = (401, 403)
_BODY = (400, 401, 403, 408, 413)

ROUTES = (
    Route("GET", "/api/v2/users", list_users, "admin: every user, by name (OpenPAI v1.8's user shape)",
          {200: Reply("", V2UserList)}, _ADMIN, auth="person"),
    Route("POST", "/api/v2/users", create_user, "admin: create a user (virtualCluster: the VCs that admit them)",
          {201: Reply("created", Message)}, (*_BODY, 409), also={400: ("NoVirtualClusterError",)}, auth="person",
          body=USER_CREATE),
    Route("PUT", "/api/v2/users", update_user, "admin: change a user (password, admin, email, extension, "
          "virtualCluster)", {201: Reply("changed", Message)}, (*_BODY, 404), also={400: ("NoVirtualClusterError",)},
          auth="person", body=USER_UPDATE),
    Route("GET", "/api/v2/users/me", get_me, "the caller's own profile", {200: Reply("", V2User)}, (401, 404),
          auth="token"),
    Route("GET", "/api/v2/users/{user}", get_user, "a user's profile: one's own, or anyone's for an admin",
          {200: Reply("", V2User)}, (400, 401, 403, 404), auth="token", params=(USER_PARAM,)),
    Route("DELETE", "/api/v2/users/{user}", delete_user, "admin: remove a user who is not an admin",
          {200: Reply("removed", Message)}, (400, 401, 403, 404), auth="person", params=(USER_PARAM,)),
    Route("PUT", "/api/v2/users/{user}/grouplist", put_grouplist, "admin: a user's groups, all of them",
          {201: Reply("changed", Message)}, (*_BODY, 404), also=_NO_GROUP, auth="person", params=(USER_PARAM,),
          body=GROUPLIST),
    Route("PUT", "/api/v2/users/{user}/group", add_group, "admin: put a user in a group",
          {201: Reply("changed", Message)}, (*_BODY, 404), also=_NO_GROUP, auth="person", params=(USER_PARAM,),
          body=GROUP_REF),
    Route("DELETE", "/api/v2/users/{user}/group", remove_group, "admin: take a user out of a group",
          {201: Reply("changed", Message)}, (*_BODY, 404), auth="person", params=(USER_PARAM,), body=GROUP_REF),
    Route("GET", "/api/v2/groups", list_groups, "every group, by name", {200: Reply("", V2GroupList)}, (401,),
          auth="token"),
    Route("POST", "/api/v2/groups", create_group, "admin: create a group", {201: Reply("created", Message)},
          (*_BODY, 409), also={409: ("ConflictGroupError",)}, auth="person", body=GROUP_CREATE),
    Route("PUT", "/api/v2/groups", update_group, "admin: change a group (patch: only what data gives; 400 "
          "NoGroupError for an unknown one, as OpenPAI)", {201: Reply("changed", Message)}, _BODY,
          also={400: ("NoGroupError",)}, auth="person", body=GROUP_UPDATE),
    Route("GET", "/api/v2/groups/{group}", get_group, "one group", {200: Reply("", V2Group)}, (401, 404),
          also=_NO_GROUP, auth="token", params=(_GROUP,)),
    Route("DELETE", "/api/v2/groups/{group}", delete_group, "admin: remove a group (its users leave it)",
          {200: Reply("removed", Message)}, (401, 403, 404), also=_NO_GROUP, auth="person", params=(_GROUP,)),
    Route("GET", "/api/v2/groups/{group}/userlist", group_users, "admin: a group's users",
          {200: Reply("", GroupMembers)}, (401, 403, 404), also=_NO_GROUP, auth="person", params=(_GROUP,)),
)
