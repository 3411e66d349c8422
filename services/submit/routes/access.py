"""Who is asking: bearer tokens on every write, the token route, and user administration."""

from __future__ import annotations

import base64
import binascii

import structlog
from aiohttp import web

from services.submit.contract.answers import Message, Token, User, UserList, answer
from services.submit.contract.lookup import USER_PARAM
from services.submit.contract.requests import TokenRequest, UserChange, UserRemoval
from services.submit.contract.route import ModelBody, Reply, Route, route_of
from services.submit.contract.views import user_view
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.passwords import password_login
from services.submit.users import Principal, check_user_name
from shared.scheduling.vclusters import with_default

log = structlog.get_logger("paiq.submit.access")


def _basic_pair(credentials: str) -> tuple[str, str] | None:
    """``Basic`` credentials as (user, token), or None when they are not base64 of ``user:token``."""
    try:
        raw = base64.b64decode(credentials.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, token = raw.partition(":")
    return (user, token) if colon else None


async def _application(request: web.Request, credentials: str) -> Principal:
    """OpenPAI v1.8's ``Authorization: Basic base64(user:token)``, for application tokens only, and only the
    token's own user (its middlewares/token.js ``getToken``): anything else is an invalid token."""
    pair = _basic_pair(credentials)
    principal = await request.app[DEPS].users.principal(pair[1]) if pair and pair[1].isascii() else None
    if principal is None or pair is None or not principal.application or principal.user != pair[0]:
        raise ApiError("UnauthorizedUserError", "Your token is invalid.")
    return principal


APPLICATION_REFUSAL = "Application token is not allowed to do this operation."


async def principal_of(request: web.Request) -> Principal:
    """The authenticated caller, or 401 UnauthorizedUserError: a bearer token, or an application token as
    OpenPAI v1.8 took one (``Basic`` with the user's name). On a route declared for people only (``auth="person"``:
    those that change users, groups, tokens, virtual clusters or notification settings) an application token is
    403 ForbiddenUserError, as OpenPAI v1.8's ``checkNotApplication``: this is the one place that says so, and
    each handler meets it where it first asks who calls."""
    principal = await _authenticated(request)
    if principal.application and (route := route_of(request)) is not None and route.auth == "person":
        raise ApiError("ForbiddenUserError", APPLICATION_REFUSAL)
    return principal


async def _authenticated(request: web.Request) -> Principal:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic" and token.strip():
        return await _application(request, token)
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError("UnauthorizedUserError",
                       "this request needs 'Authorization: Bearer <token>'; get a token with POST /api/v1/token")
    if not token.isascii():  # paiq's tokens are URL-safe base64; other bytes arrive as lone surrogates
        raise ApiError("UnauthorizedUserError", "the token is not one paiq gave out: tokens are ASCII")
    principal = await request.app[DEPS].users.principal(token.strip())
    if principal is None:
        raise ApiError("UnauthorizedUserError", "the token is unknown or has expired; log in again")
    return principal


async def optional_principal(request: web.Request) -> Principal | None:
    """The caller if a valid token came with the request, else None (reads need no token)."""
    if not request.headers.get("Authorization"):
        return None
    try:
        return await principal_of(request)
    except ApiError:
        return None


async def require_admin(request: web.Request) -> Principal:
    principal = await principal_of(request)
    if not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} is not an administrator")
    return principal


# The bodies these routes read; a handler reads its body only once it knows who asks (401/403 before 400).
TOKEN_BODY = ModelBody(TokenRequest, form=True)
USER_CHANGE = ModelBody(UserChange)
USER_REMOVAL = ModelBody(UserRemoval)


async def create_token(request: web.Request) -> web.Response:
    asked = await TOKEN_BODY.read(request)
    token, admin = await password_login(request, asked)
    return answer(Token(user=asked.username, token=token, admin=admin))


async def put_user(request: web.Request) -> web.Response:
    """OpenPAI's ``PUT /api/v1/user``: an admin creates (``modify: false``) or changes a user."""
    await require_admin(request)
    change = await USER_CHANGE.read(request)
    users, user = request.app[DEPS].users, change.username
    groups = tuple(change.groups) if change.groups is not None else None
    if change.modify:
        await users.update(user, password=change.password, admin=change.admin, groups=groups)
        return answer(Message(message=f"update user {user} successfully"))
    assert change.password is not None  # UserChange requires one to create a user
    await users.create(user, change.password, admin=bool(change.admin), groups=groups or ())
    return answer(Message(message=f"create user {user} successfully"), status=201)


async def list_users(request: web.Request) -> web.Response:
    """``GET /api/v1/user``: every user, by name, for an admin (OpenPAI's ``getAllUser`` shape)."""
    await require_admin(request)
    deps = request.app[DEPS]
    vcs = with_default(await deps.store.list_vcs()).values()
    return answer(UserList(tuple(user_view(u, vcs) for u in await deps.users.list_all())))


async def get_user(request: web.Request) -> web.Response:
    """``GET /api/v1/user/{user}``: one's own profile, or anyone's for an admin."""
    principal = await principal_of(request)
    name = check_user_name(request.match_info["user"])
    if name != principal.user and not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} may see only their own profile, not {name}'s")
    deps = request.app[DEPS]
    info = await deps.users.get(name)
    if info is None:
        # OpenPAI v0.13 and v0.14 answered this route's unknown user with 400, not 404
        raise ApiError("NoUserError", f"user {name} does not exist", status=400)
    return answer(user_view(info, with_default(await deps.store.list_vcs()).values()))


async def delete_user(request: web.Request) -> web.Response:
    """OpenPAI's ``DELETE /api/v1/user`` ``{"username": ...}``: an admin removes a user who is not an
    admin; the user's tokens stop working at once. Their jobs stay, as in OpenPAI."""
    principal = await require_admin(request)
    user = (await USER_REMOVAL.read(request)).username
    tokens = await request.app[DEPS].users.delete(user)
    log.info("user removed", user=user, by=principal.user, tokens_ended=tokens)
    return answer(Message(message=f"remove user {user} successfully"))


ROUTES = (
    Route("POST", "/api/v1/token", create_token, "log in: a bearer token (JSON or form body: username, password, "
          "expiration seconds); 429 with Retry-After after repeated wrong passwords for the user or from the address",
          {200: Reply("a new token", Token)}, (400, 401, 408, 413, 429), body=TOKEN_BODY, secret=True),
    Route("PUT", "/api/v1/user", put_user, "admin: create a user (modify false) or change one (modify true)",
          {200: Reply("changed", Message), 201: Reply("created", Message)}, (400, 401, 403, 404, 408, 409, 413),
          auth="person", body=USER_CHANGE),
    Route("GET", "/api/v1/user", list_users, "admin: every user, by name", {200: Reply("the users", UserList)},
          (401, 403), auth="token"),
    Route("DELETE", "/api/v1/user", delete_user, "admin: remove a user who is not an admin (403 RemoveAdminError "
          "for an admin, yourself included); their tokens end at once, their jobs stay",
          {200: Reply("removed", Message)}, (400, 401, 403, 404, 408, 413), auth="person", body=USER_REMOVAL),
    Route("GET", "/api/v1/user/{user}", get_user, "a user's profile: one's own, or anyone's for an admin (400 "
          "NoUserError for an unknown user, as in OpenPAI)", {200: Reply("the user", User)}, (400, 401, 403),
          also={400: ("NoUserError",)}, auth="token", params=(USER_PARAM,)),
)
