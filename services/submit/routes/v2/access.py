"""OpenPAI v1.8's /api/v2 sign-in, tokens and info: ``authn/basic/login`` and ``logout``, ``tokens`` (list,
application tokens, revoke) and ``info``. Tokens are paiq's own (random, stored as digests), not JWTs."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import structlog
from aiohttp import web

from services.submit.contract.answers import Message
from services.submit.contract.route import Param, Reply, Route
from services.submit.contract.v2.users import ApplicationToken, Info, Login, TokenCheck, Tokens, v2_answer
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.access import TOKEN_BODY, principal_of
from services.submit.routes.passwords import password_login
from services.submit.users import MAX_TOKEN_SECONDS

log = structlog.get_logger("paiq.submit.v2.access")


def _paiq_version() -> str:
    try:
        return version("paiq")
    except PackageNotFoundError:
        return "0.1.0"


VERSION = _paiq_version()


def _bearer(request: web.Request) -> str:
    return request.headers.get("Authorization", "").partition(" ")[2].strip()


async def login(request: web.Request) -> web.Response:
    asked = await TOKEN_BODY.read(request)
    token, admin = await password_login(request, asked)
    return v2_answer(Login(user=asked.username, token=token, admin=admin, has_git_hub_pat=False))


async def logout(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    await request.app[DEPS].users.revoke(principal.user, _bearer(request))
    log.info("logged out", user=principal.user)
    return v2_answer(Message(message="Logout successfully"))


async def info(request: web.Request) -> web.Response:
    return v2_answer(Info(name="PAI RESTful API", version=VERSION, launcher_type="paiq", authn_method="basic"))


async def list_tokens(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    tokens = await request.app[DEPS].users.tokens_of(principal.user)
    return v2_answer(Tokens(tokens=tuple(t.id for t in tokens)))


async def check_token(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    return v2_answer(TokenCheck(username=principal.user, admin=principal.admin, application=principal.application))


async def application_token(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    token = await request.app[DEPS].users.issue_token(principal.user, principal.admin, MAX_TOKEN_SECONDS,
                                                      application=True)
    return v2_answer(ApplicationToken(token=token, application=True))


async def revoke_token(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    token = request.match_info["token"]
    if not token.isascii() or not await request.app[DEPS].users.revoke(principal.user, token):
        # OpenPAI v1.8 answered a token of another user 403; paiq cannot tell another's from none at all
        raise ApiError("ForbiddenUserError", f"User {principal.user} is not allowed to do this operation.")
    log.info("token revoked", user=principal.user)
    return v2_answer(Message(message="revoke successfully"))


_TOKEN = Param("token", "path", description="a token, or its id as GET /api/v2/tokens lists it")
_PERSON = (401, 403)

ROUTES = (
    Route("GET", "/api/v2/info", info, "what this REST server is (OpenPAI v1.8's name, version, launcher, "
          "authentication method)", {200: Reply("", Info)}),
    Route("POST", "/api/v2/authn/basic/login", login, "log in: a bearer token (username, password, expiration "
          "seconds; JSON or form); 429 with Retry-After after repeated wrong passwords for the user or from the "
          "address", {200: Reply("a new token", Login)}, (400, 401, 408, 413, 429), body=TOKEN_BODY, secret=True),
    Route("DELETE", "/api/v2/authn/basic/logout", logout, "log out: the token sent ends",
          {200: Reply("ended", Message)}, _PERSON, auth="person"),
    Route("GET", "/api/v2/tokens", list_tokens, "the caller's live tokens, by id", {200: Reply("", Tokens)},
          _PERSON, auth="person", secret=True),
    Route("GET", "/api/v2/tokens/check", check_token, "whose token this is (any token, an application's too)",
          {200: Reply("", TokenCheck)}, (401,), auth="token"),
    Route("POST", "/api/v2/tokens/application", application_token, "a long-lived application token (it may not "
          "manage users or tokens)", {200: Reply("a new token", ApplicationToken)}, _PERSON, auth="person",
          secret=True),
    Route("DELETE", "/api/v2/tokens/{token}", revoke_token, "revoke one of the caller's tokens (403 for one they "
          "do not hold)", {200: Reply("revoked", Message)}, _PERSON, auth="person", params=(_TOKEN,)),
)
