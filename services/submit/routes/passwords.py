"""Where a password is checked (the v1 and v2 logins, a user's ``oldPassword``): the login guard asked around
each check (:mod:`services.submit.loginguard`: the policy and why), so that a try in a window opened by wrong
passwords, for that user or from that address, is ``429 TooManyRequestsError`` with ``Retry-After`` before
anything is hashed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import structlog
from aiohttp import web

from services.submit.contract.requests import TokenRequest
from services.submit.deps import DEPS
from services.submit.errors import ApiError, ErrorCode, TooManyRequestsError
from services.submit.loginguard import LoginGuard, Refusal

log = structlog.get_logger("paiq.submit.passwords")

LOGIN_GUARD = web.AppKey("login_guard", LoginGuard)  # the process's; each replica counts its own
T = TypeVar("T")


async def login_guard(app: web.Application) -> AsyncIterator[None]:
    """The app's guard (a ``cleanup_ctx``): empty at start, in this process's memory only."""
    app[LOGIN_GUARD] = LoginGuard()
    yield


class LoginThrottledError(TooManyRequestsError):
    def __init__(self, user: str, refusal: Refusal) -> None:
        whose = f"for user {user}" if refusal.by == "user" else "from this address"
        super().__init__(f"too many wrong passwords {whose}: try again in {refusal.retry_after_s} s",
                         refusal.retry_after_s)


async def password_tried(request: web.Request, user: str, check: Callable[[], Awaitable[T]], *,
                         wrong: ErrorCode) -> T:
    """``check()`` of ``user``'s password, told to the app's guard: refused (429) without being called while a
    window lasts; its ``wrong`` refusal (the password was wrong) counted, its answer clearing the user's count."""
    guard, address = request.app[LOGIN_GUARD], request.remote
    refusal = guard.refusal(user, address)
    if refusal is not None:
        log.info("password try refused: too many wrong ones", user=user, remote=address, by=refusal.by,
                 retry_after_s=refusal.retry_after_s)
        raise LoginThrottledError(user, refusal)
    try:
        result = await check()
    except ApiError as e:
        if e.code == wrong:
            guard.failed(user, address)
        raise
    guard.succeeded(user)
    return result


async def password_login(request: web.Request, asked: TokenRequest) -> tuple[str, bool]:
    """A login (v1's ``POST /api/v1/token``, v2's ``authn/basic/login``): a new token and whether its user is an
    admin; 401 for a wrong name or password, 429 in a window."""
    users = request.app[DEPS].users
    return await password_tried(request, asked.username,
                                lambda: users.login(asked.username, asked.password, asked.expiration),
                                wrong="UnauthorizedUserError")
