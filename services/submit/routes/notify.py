"""Notifications (paiq's own routes; docs "Notifications"): a user's subscriptions (e-mail to the address on
their user record, webhooks), an administrator's platform-wide webhooks, and a user's recent deliveries with
their state and last error. A webhook's signing key is made here, answered once, and stored sealed with
PAIQ_SECRETS_KEY; no answer ever shows it again. Every change is announced (``notify.subscriptions_changed``)
so the notify service reads the owner's subscriptions again at once."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import uuid
from urllib.parse import urlsplit

from aiohttp import web

from services.submit.contract.answers import Message, answer
from services.submit.contract.notify import (
    Deliveries,
    DeliveryView,
    EmailAddress,
    NewSubscription,
    NewSubscriptionAnswer,
    Subscriptions,
    SubscriptionView,
)
from services.submit.contract.route import ModelBody, Param, Reply, Route, WholeNumber
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.access import principal_of
from shared.events import SubscriptionsChanged, SubscriptionsChangedData
from shared.jobconfig.notifykinds import Kind
from shared.jobconfig.sealing import SealingError
from shared.notify.destinations import Destinations
from shared.notify.endpoints import redacted
from shared.notify.signing import new_secret, seal_secret
from shared.notify.subscriptions import MAX_SUBSCRIPTIONS, PLATFORM, Channel, Format, Subscription
from shared.records import now_ms

NEW_SUBSCRIPTION = ModelBody(NewSubscription)
EMAIL = ModelBody(EmailAddress)
LIMIT = WholeNumber("limit", 50, 1, 500)
PLATFORM_PARAM = Param("platform", "query", {"type": "boolean", "default": False},
                       "true: the platform's webhooks or deliveries (an administrator's)")
DAY_MS = 86_400_000
RESOLVE_SECONDS = 2.0


async def destination_refusal(destinations: Destinations, url: str) -> str | None:
    """Why a webhook URL may not be used (shared.notify.destinations): as written, or by what its name
    resolves to now. A name that does not resolve now is let through: the notifier checks again, after
    resolving, at every delivery."""
    refusal = destinations.url_refusal(url)
    host = urlsplit(url).hostname or ""
    if refusal is not None or destinations.host_allowed(host):
        return refusal
    try:
        ipaddress.ip_address(host)
        return None  # a literal address: checked above
    except ValueError:
        pass
    try:
        async with asyncio.timeout(RESOLVE_SECONDS):
            found = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return None
    for *_, sockaddr in found:
        why = destinations.address_refusal(host, ipaddress.ip_address(str(sockaddr[0]).split("%")[0]))
        if why is not None:
            return why
    return None


async def _owner(request: web.Request) -> tuple[str, str]:
    """The caller, and whose subscriptions the request is about (theirs, or with ?platform=true the platform's,
    an administrator's only)."""
    principal = await principal_of(request)
    platform = request.query.get("platform", "false")
    if platform not in ("true", "false"):
        raise ApiError("InvalidParametersError", "platform: must be true or false")
    if platform == "false":
        return principal.user, principal.user
    if not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} is not an administrator: only administrators "
                                             "see or set the platform's webhooks")
    return principal.user, PLATFORM


def _view(sub: Subscription) -> SubscriptionView:
    return SubscriptionView(id=sub.id, channel=sub.channel.value, kinds=tuple(k for k in Kind if k in sub.kinds),
                            url=sub.url or None, format=sub.format.value, job=sub.job or None, platform=sub.platform,
                            created_time=sub.created_ms)


async def subscriptions_changed(request: web.Request, owner: str) -> None:
    """Tell the notifier that ``owner``'s subscriptions or address changed (it reads them again at once); the v2
    user routes that change an e-mail address say so too."""
    await request.app[DEPS].bus.publish([SubscriptionsChanged(subject=owner or "platform",
                                                              data=SubscriptionsChangedData(owner=owner))])


async def list_subscriptions(request: web.Request) -> web.Response:
    _, owner = await _owner(request)
    notes = request.app[DEPS].store.notifications
    subs = await notes.subscriptions_of(owner)
    email = await notes.user_email(owner) if owner != PLATFORM else ""
    return answer(Subscriptions(email=email or None,
                                subscriptions=tuple(_view(s) for s in sorted(subs, key=lambda s: s.created_ms))))


async def add_subscription(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    asked = await NEW_SUBSCRIPTION.read(request)
    owner = principal.user
    if asked.platform:
        if not principal.admin:
            raise ApiError("ForbiddenUserError", f"user {principal.user} is not an administrator: only "
                                                 "administrators set the platform's webhooks")
        owner = PLATFORM
    if asked.channel == "webhook" and not asked.url:
        raise ApiError("InvalidParametersError", "url: a webhook needs its http or https URL")
    if asked.url and (refusal := await destination_refusal(
            Destinations(request.app[DEPS].settings.notify.webhook_allow), asked.url)) is not None:
        raise ApiError("InvalidParametersError", f"url: {refusal}")
    if asked.channel == "email" and (asked.url or asked.platform):
        raise ApiError("InvalidParametersError", "url: e-mail goes to the address on your user record (PUT "
                                                 "/api/v1/notifications/email); an e-mail subscription has no url "
                                                 "and is never the platform's")
    deps = request.app[DEPS]
    notes = deps.store.notifications
    if len(await notes.subscriptions_of(owner)) >= MAX_SUBSCRIPTIONS:
        raise ApiError("InvalidParametersError", f"at most {MAX_SUBSCRIPTIONS} subscriptions each; delete one first")
    secret = new_secret() if asked.channel == "webhook" else None
    try:
        sealed = seal_secret(secret, deps.settings.secrets_key) if secret else ""
    except SealingError as e:
        raise ApiError("ServiceUnavailableError", f"webhooks cannot be added: {e}") from e
    sub = Subscription(id=uuid.uuid4().hex[:16], owner=owner, channel=Channel(asked.channel),
                       kinds=frozenset(asked.kinds), url=asked.url or "", format=Format(asked.format), job=asked.job,
                       sealed_secret=sealed, created_ms=now_ms())
    await notes.add_subscription(sub)
    await subscriptions_changed(request, owner)
    return answer(NewSubscriptionAnswer(subscription=_view(sub), secret=secret), status=201)


async def delete_subscription(request: web.Request) -> web.Response:
    _, owner = await _owner(request)
    sub_id = request.match_info["id"]
    if not await request.app[DEPS].store.notifications.delete_subscription(owner, sub_id):
        raise ApiError("NoSubscriptionError", f"no subscription {sub_id[:64]!r} of "
                                        f"{'the platform' if owner == PLATFORM else owner}")
    await subscriptions_changed(request, owner)
    return answer(Message(message=f"subscription {sub_id} deleted"))


async def put_email(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    asked = await EMAIL.read(request)
    await request.app[DEPS].users.set_profile(principal.user, email=asked.email)
    await subscriptions_changed(request, principal.user)
    return answer(Message(message=f"e-mail notifications of {principal.user} go to {asked.email}" if asked.email
                          else f"user {principal.user} has no e-mail address now"))


async def list_deliveries(request: web.Request) -> web.Response:
    _, owner = await _owner(request)
    limit = LIMIT.read(request)
    deps = request.app[DEPS]
    since = now_ms() - int(deps.settings.notify.keep_days * DAY_MS)
    docs = await deps.store.notifications.deliveries_of(owner, since, limit, now_ms())
    return answer(Deliveries(deliveries=tuple(DeliveryView(
        id=d["_id"], job_id=d.get("job_id") or None, job_name=d.get("job_name") or None, kind=d.get("kind", ""),
        channel=d["channel"], target=d["target"] if d["channel"] == "email" else redacted(d["target"]),
        state=d["state"], tries=int(d.get("tries", 0)), last_error=d.get("last_error") or None,
        created_time=int(d["created_ms"]), sent_time=d.get("sent_ms"),
        next_try_time=d.get("next_ms") if d["state"] == "pending" else None) for d in docs)))


_SUBS = "/api/v1/notifications/subscriptions"
ROUTES = (
    Route("GET", _SUBS, list_subscriptions, "your notification subscriptions and the address e-mail goes to "
          "(?platform=true: the platform's webhooks, an administrator's); signing keys are never shown",
          {200: Reply("the subscriptions", Subscriptions)}, (400, 401, 403), auth="token", params=(PLATFORM_PARAM,)),
    Route("POST", _SUBS, add_subscription, "subscribe: e-mail, or a webhook (its signing key answered this once); "
          "platform: true for an administrator's webhook told of every user's jobs",
          {201: Reply("subscribed", NewSubscriptionAnswer)}, (400, 401, 403, 413, 503), auth="person",
          body=NEW_SUBSCRIPTION, secret=True),
    Route("DELETE", _SUBS + "/{id}", delete_subscription, "unsubscribe (?platform=true: a platform webhook)",
          {200: Reply("deleted", Message)}, (400, 401, 403, 404), also={404: ("NoSubscriptionError",)}, auth="person",
          params=(Param("id", "path"), PLATFORM_PARAM)),
    Route("PUT", "/api/v1/notifications/email", put_email, "the address your e-mail notifications go to (your user "
          "record's email; '' removes it)", {200: Reply("set", Message)}, (400, 401, 403, 413), auth="person",
          body=EMAIL),
    Route("GET", "/api/v1/notifications/deliveries", list_deliveries, "your recent notifications, newest first, "
          "with their state (pending, sent, failed, held for a digest, digested) and last error "
          "(?platform=true: the platform webhooks', an administrator's)",
          {200: Reply("the deliveries", Deliveries)}, (400, 401, 403), auth="token",
          params=(LIMIT.param(), PLATFORM_PARAM)),
)
