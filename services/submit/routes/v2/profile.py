"""OpenPAI v1.8's changes of one user's profile: ``PUT /api/v2/users/me`` (a user's own e-mail, password,
extension) and the per-field routes v1.8 kept for older clients (``password``, ``email``, ``admin``,
``virtualcluster``, ``extension`` under ``/api/v2/users/{user}/``). Who may: the user themselves or an admin
(``admin`` and ``virtualcluster``: an admin); never with an application token. A new password ends the
user's sessions but not their application tokens, as in OpenPAI v1.8."""

from __future__ import annotations

import structlog
from aiohttp import web

from services.submit.contract.answers import Message
from services.submit.contract.lookup import USER_PARAM
from services.submit.contract.route import ModelBody, Reply, Route
from services.submit.contract.v2.users import (
    AdminChange,
    EmailChange,
    ExtensionChange,
    MeUpdate,
    PasswordChange,
    UserVirtualClusters,
    v2_answer,
)
from services.submit.deps import DEPS
from services.submit.errors import ApiError, ErrorCode
from services.submit.routes.access import principal_of, require_admin
from services.submit.routes.notify import subscriptions_changed
from services.submit.routes.passwords import password_tried
from services.submit.routes.v2.users import grant_vcs
from services.submit.users import Principal, check_user_name

log = structlog.get_logger("paiq.submit.v2.profile")

ME_UPDATE = ModelBody(MeUpdate)
PASSWORD = ModelBody(PasswordChange)
EMAIL = ModelBody(EmailChange)
ADMIN = ModelBody(AdminChange)
VIRTUAL_CLUSTERS = ModelBody(UserVirtualClusters)
EXTENSION = ModelBody(ExtensionChange)


async def _wrong_password(request: web.Request, user: str, old: str | None) -> None:
    """403 unless ``old`` is ``user``'s password; checked as a login is (429 in a window of wrong ones)."""
    if old is None:
        raise ApiError("ForbiddenUserError", "Pls input the correct password.")
    users = request.app[DEPS].users

    async def check() -> None:
        if not await users.check_password(user, old):
            raise ApiError("ForbiddenUserError", "Pls input the correct password.")

    await password_tried(request, user, check, wrong="ForbiddenUserError")


async def update_me(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    data = (await ME_UPDATE.read(request)).data
    if data.username != principal.user:
        raise ApiError("ForbiddenUserError", "Can't update other user's data")
    users = request.app[DEPS].users
    if data.new_password is not None:
        await _wrong_password(request, principal.user, data.old_password)
        await users.update(principal.user, password=data.new_password, admin=None)
    await users.set_profile(principal.user, email=data.email, extension=data.extension)
    await subscriptions_changed(request, principal.user)  # the notifier mails the new address from now
    log.info("user updated themselves", user=principal.user, password_changed=data.new_password is not None)
    return v2_answer(Message(message=f"Update user {principal.user} successfully"), status=201)


async def _self_or_admin(request: web.Request) -> tuple[Principal, str]:
    principal = await principal_of(request)
    name = check_user_name(request.match_info["user"])
    if name != principal.user and not principal.admin:
        raise ApiError("ForbiddenUserError", "Non-admin is not allow to do this operation.")
    return principal, name


async def put_password(request: web.Request) -> web.Response:
    principal, name = await _self_or_admin(request)
    asked = await PASSWORD.read(request)
    if not principal.admin:
        await _wrong_password(request, name, asked.old_password)
    await request.app[DEPS].users.update(name, password=asked.new_password, admin=None)
    return v2_answer(Message(message="update user password successfully."), status=201)


async def put_email(request: web.Request) -> web.Response:
    _, name = await _self_or_admin(request)
    await request.app[DEPS].users.set_profile(name, email=(await EMAIL.read(request)).email)
    await subscriptions_changed(request, name)
    return v2_answer(Message(message="Update user email data successfully."), status=201)


async def put_extension(request: web.Request) -> web.Response:
    _, name = await _self_or_admin(request)
    await request.app[DEPS].users.set_profile(name, extension=(await EXTENSION.read(request)).extension)
    return v2_answer(Message(message="Update user extension data successfully."), status=201)


async def put_admin(request: web.Request) -> web.Response:
    await require_admin(request)
    name = check_user_name(request.match_info["user"])
    await request.app[DEPS].users.update(name, password=None, admin=(await ADMIN.read(request)).admin)
    return v2_answer(Message(message="Update user admin permission successfully."), status=201)


async def put_virtual_clusters(request: web.Request) -> web.Response:
    await require_admin(request)
    name = check_user_name(request.match_info["user"])
    names = (await VIRTUAL_CLUSTERS.read(request)).virtual_cluster
    if not await request.app[DEPS].users.exists(name):
        raise ApiError("NoUserError", f"User {name} not found.")
    await grant_vcs(request, name, names)
    return v2_answer(Message(message="Update user virtualCluster data successfully."), status=201)


_CHANGED = {201: Reply("changed", Message)}
_BODY = (400, 401, 403, 404, 408, 413)
_OLD_PASSWORD = (*_BODY, 429)  # an oldPassword is checked as a login is
_VC_400: dict[int, tuple[ErrorCode, ...]] = {400: ("NoVirtualClusterError",)}

ROUTES = (
    Route("PUT", "/api/v2/users/me", update_me, "change one's own e-mail, password (newPassword with oldPassword; "
          "403 for a wrong one) or extension (its keys merged in)", _CHANGED, _OLD_PASSWORD, auth="person",
          body=ME_UPDATE),
    Route("PUT", "/api/v2/users/{user}/password", put_password, "a user's password: oneself (with oldPassword) or "
          "an admin", _CHANGED, _OLD_PASSWORD, auth="person", params=(USER_PARAM,), body=PASSWORD),
    Route("PUT", "/api/v2/users/{user}/email", put_email, "a user's e-mail: oneself or an admin", _CHANGED, _BODY,
          auth="person", params=(USER_PARAM,), body=EMAIL),
    Route("PUT", "/api/v2/users/{user}/extension", put_extension, "a user's extension, its keys merged in: "
          "oneself or an admin", _CHANGED, _BODY, auth="person", params=(USER_PARAM,), body=EXTENSION),
    Route("PUT", "/api/v2/users/{user}/admin", put_admin, "admin: make a user an admin or not (403 "
          "RemoveAdminError for the last admin)", _CHANGED, _BODY, auth="person", params=(USER_PARAM,), body=ADMIN),
    Route("PUT", "/api/v2/users/{user}/virtualcluster", put_virtual_clusters, "admin: the VCs that name a user",
          _CHANGED, _BODY, also=_VC_400, auth="person", params=(USER_PARAM,), body=VIRTUAL_CLUSTERS),
)
