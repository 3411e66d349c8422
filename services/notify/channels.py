"""A try's :class:`Outcome` (sent, worth another try: a timeout, a refused connection, a 5xx, an SMTP 4xx; or
not), and a webhook's POST (aiohttp), which connects only to addresses :mod:`shared.notify.destinations`
allows: a literal one is checked before the request, a name's after it is resolved (:class:`CheckedResolver`:
the connection goes to the very addresses checked). E-mail goes through :mod:`services.notify.smtp`."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from shared.notify.admission import Reply
from shared.notify.destinations import Destinations
from shared.notify.schedule import retryable_status
from shared.notify.signing import SIGNATURE_HEADER, signature

MAX_ERROR = 300  # characters of an error kept on the delivery (the user sees it)


@dataclass(frozen=True)
class Outcome:
    sent: bool
    reply: Reply  # what the endpoint said: answered, silent, or nothing was sent (its standing: admission)
    retry: bool = False
    error: str = ""

    @classmethod
    def failed(cls, error: str, *, retry: bool, reply: Reply) -> Outcome:
        return cls(sent=False, reply=reply, retry=retry, error=error[:MAX_ERROR])


SENT = Outcome(sent=True, reply=Reply.ANSWERED)
NOTHING_TO_SEND = Outcome(sent=True, reply=Reply.UNTRIED)  # done without a message (a digest with nothing held)


class RefusedDestinationError(OSError):
    """A webhook's host resolved to an address the operator does not allow (its sentence says which, why)."""


class CheckedResolver(AbstractResolver):
    """The default resolver, refusing a name any of whose addresses is not allowed (a name resolving to both a
    public and an inside address is refused: the connection could go to either)."""

    def __init__(self, destinations: Destinations) -> None:
        self._destinations = destinations
        self._resolver = DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        for result in found:
            refusal = self._destinations.address_refusal(host, ipaddress.ip_address(result["host"]))
            if refusal is not None:
                raise RefusedDestinationError(refusal)
        return found

    async def close(self) -> None:
        await self._resolver.close()


async def post_webhook(session: aiohttp.ClientSession, url: str, body: bytes, *, secret: str, content_type: str,
                       delivery_id: str, event_id: str, timeout_s: float, destinations: Destinations) -> Outcome:
    refusal = destinations.url_refusal(url)
    if refusal is not None:
        return Outcome.failed(f"refused: {refusal}", retry=False, reply=Reply.UNTRIED)
    headers = {"Content-Type": content_type, SIGNATURE_HEADER: signature(secret, body),
               "X-Paiq-Delivery": delivery_id, "X-Paiq-Event-Id": event_id, "User-Agent": "paiq-notify"}
    try:
        async with session.post(url, data=body, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if 200 <= resp.status < 300:
                return SENT
            return Outcome.failed(f"the webhook answered {resp.status}", retry=retryable_status(resp.status),
                                  reply=Reply.ANSWERED)
    except TimeoutError:
        return Outcome.failed(f"the webhook did not answer within {timeout_s:g} s", retry=True, reply=Reply.SILENT)
    except aiohttp.ClientConnectorError as e:
        if isinstance(e.os_error, RefusedDestinationError):
            return Outcome.failed(f"refused: {e.os_error}", retry=False, reply=Reply.UNTRIED)
        return Outcome.failed(f"could not connect to the webhook: {e.os_error or e}", retry=True,
                              reply=Reply.SILENT)
    except (aiohttp.ClientError, OSError) as e:
        return Outcome.failed(f"the webhook's answer was cut off: {e}", retry=True, reply=Reply.SILENT)
