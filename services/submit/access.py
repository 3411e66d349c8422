"""Who is asking: bearer tokens on every write, the token route, and user administration."""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from services.submit.answers import Message, Token, UserList, answer
from services.submit.bodies import read_object
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.requests import TokenRequest, UserChange, UserRemoval
from services.submit.users import (
    DEFAULT_TOKEN_SECONDS,
    MAX_TOKEN_SECONDS,
    MIN_PASSWORD_LENGTH,
    Principal,
    check_user_name,
    password_problem,
)
from services.submit.views import user_view
from shared.scheduling.vclusters import with_default

log = structlog.get_logger("paiq.submit.access")


async def principal_of(request: web.Request) -> Principal:
    """The authenticated caller, or 401 UnauthorizedUserError."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
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


def _string(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ApiError("InvalidParametersError", f"{field}: is required and must be a non-empty string")
    return value


def _expiration(raw: object) -> int:
    """A token's lifetime in seconds: an integral number, or a numeric string as forms send it."""
    refusal = ApiError("InvalidParametersError",
                       f"expiration: must be a whole number of seconds, 1-{MAX_TOKEN_SECONDS}")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise refusal
    if isinstance(raw, str) and not (raw.isascii() and raw.isdigit()):  # int() takes any script's digits, ' 3'
        raise refusal
    try:
        seconds = int(raw)
    except (ValueError, OverflowError) as e:  # "1.5", "abc", a string of thousands of digits, inf, nan
        raise refusal from e
    if isinstance(raw, float) and seconds != raw:
        raise refusal
    if not 1 <= seconds <= MAX_TOKEN_SECONDS:
        raise refusal
    return seconds


def _password(value: str, *, at_least: int = MIN_PASSWORD_LENGTH) -> str:
    problem = password_problem(value, at_least=at_least)
    if problem:
        raise ApiError("InvalidParametersError", problem)
    return value


def token_request(body: dict[str, Any]) -> TokenRequest:
    user = check_user_name(_string(body, "username"))
    # No stored password breaks these rules, so this says nothing about the user; bcrypt would refuse it.
    password = _password(_string(body, "password"), at_least=1)
    return TokenRequest(username=user, password=password,
                        expiration=_expiration(body.get("expiration", DEFAULT_TOKEN_SECONDS)))


async def create_token(request: web.Request) -> web.Response:
    asked = token_request(await read_object(request))
    token, admin = await request.app[DEPS].users.login(asked.username, asked.password, asked.expiration)
    return answer(Token(user=asked.username, token=token, admin=admin))


def user_change(body: dict[str, Any]) -> UserChange:
    """The body of ``PUT /api/v1/user``, each field checked in turn (``modify`` is true only when it is
    ``true``; a password only when it is not null, and required to create a user)."""
    user = check_user_name(_string(body, "username"))
    admin = body.get("admin")
    if admin is not None and not isinstance(admin, bool):
        raise ApiError("InvalidParametersError", "admin: must be true or false")
    groups = body.get("groups")
    if groups is not None and not (isinstance(groups, list) and all(isinstance(g, str) and g for g in groups)):
        raise ApiError("InvalidParametersError", "groups: must be a list of non-empty strings")
    modify = body.get("modify") is True
    password = _string(body, "password") if body.get("password") is not None or not modify else None
    return UserChange(username=user, password=_password(password) if password is not None else None, admin=admin,
                      groups=groups, modify=modify)


async def put_user(request: web.Request) -> web.Response:
    """OpenPAI's ``PUT /api/v1/user``: an admin creates (``modify: false``) or changes a user."""
    await require_admin(request)
    change = user_change(await read_object(request))
    users, user = request.app[DEPS].users, change.username
    groups = tuple(change.groups) if change.groups is not None else None
    if change.modify:
        await users.update(user, password=change.password, admin=change.admin, groups=groups)
        return answer(Message(message=f"update user {user} successfully"))
    assert change.password is not None  # user_change requires one to create a user
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
    user = UserRemoval(username=check_user_name(_string(await read_object(request), "username"))).username
    tokens = await request.app[DEPS].users.delete(user)
    log.info("user removed", user=user, by=principal.user, tokens_ended=tokens)
    return answer(Message(message=f"remove user {user} successfully"))


def add_access_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/token", create_token)
    app.router.add_put("/api/v1/user", put_user)
    app.router.add_get("/api/v1/user", list_users)
    app.router.add_delete("/api/v1/user", delete_user)
    app.router.add_get("/api/v1/user/{user}", get_user)
