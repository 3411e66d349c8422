"""Sending what is due: each delivery waits in its endpoint's line (the SMTP server, or the webhook's URL), at
most ``PAIQ_NOTIFY_ENDPOINT_CONCURRENCY`` of a line's tries run at once and ``PAIQ_NOTIFY_CONCURRENCY`` in all,
and every try is bounded by ``PAIQ_NOTIFY_TIMEOUT_SECONDS``. Which try may start is
:mod:`shared.notify.admission`'s (pure): an endpoint not yet heard to answer gets one try at a time, from a
bounded share of the pool (and one owner's new endpoints a bounded share of that); one whose last try failed (a
timeout, a 500, a refused connection) is *failing*: one try at a time, drawn from a reserve of its own
(``FAILING_SHARE`` of the whole, besides it), so slow or dead endpoints, new or known, never hold a slot the
healthy ones need; its next success makes it healthy again.

A try holds its delivery by a lease in the database (a new one is written held by this process; a retry is
claimed when due): another process, or this one after a restart, leaves it alone meanwhile. It sends, and
records the outcome (sent, tried again later: ``shared.notify.schedule``, or failed), in one bulk write with
the other tries ending meanwhile. A notifier killed mid-try leaves the delivery pending and leased; once the
lease ends the sweep finds it and tries again, with the same delivery id (the webhook's ``X-Paiq-Delivery``,
CloudEvent ``id`` and the email's ``Message-ID``) for the receiver to recognise. Lines live in memory and are
refilled from the database's due deliveries by a sweep, so nothing is lost with the process. The sweep reads
the database when something this process knows of comes due (a retry it scheduled, a digest's window it opened,
a try it could not record, a delivery leased elsewhere) and otherwise every ``SWEEP_LOOK_SECONDS`` (another
process's left-overs): an idle notifier does not ask the database every second for nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from services.notify.channels import NOTHING_TO_SEND, Outcome, post_webhook
from services.notify.metrics import DELIVERY_SECONDS, NOTIFICATIONS
from services.notify.smtp import SmtpPool, email_bytes
from shared.db.batching import Batcher
from shared.db.notifications import DeliveryState, NotificationStore
from shared.notify.admission import Admission, Limits, Reply, Ticket
from shared.notify.destinations import Destinations
from shared.notify.endpoints import endpoint_of
from shared.notify.render import chat_body, cloudevent_body, digest
from shared.notify.schedule import RetryPolicy, next_try_ms
from shared.notify.signing import open_secret
from shared.notify.subscriptions import Format, Subscription
from shared.records import now_ms
from shared.settings.model import NotifySettings

log = structlog.get_logger("paiq.notify")

SMTP_PARALLEL = 8  # tries at once through the one SMTP server (every address's mail goes there), its connections
SUBSCRIPTION_SECONDS = 60.0
SUBSCRIPTIONS_KEPT = 10_000
SWEEP_LIMIT = 2000  # due deliveries read per sweep (the rest at the next)
SWEEP_LOOK_SECONDS = 10.0  # the longest between two reads of what is due when nothing known here comes due
DUE_KEPT = 100_000  # times things come due, kept in memory at most
Doc = dict[str, Any]


@dataclass
class Line:
    waiting: deque[tuple[str, str]] = field(default_factory=deque)  # (delivery id, its owner)


@dataclass
class Slot:
    """A try's place in its line and in the whole, given back once its message went (or failed)."""

    dispatcher: Dispatcher
    ticket: Ticket
    held: bool = True

    def release(self, outcome: Outcome | None) -> None:
        """Give the place back; ``outcome`` None: the try ended before it sent (nothing learned of its endpoint)."""
        if self.held:
            self.held = False
            self.dispatcher._released(self.ticket, outcome)


class Dispatcher:
    def __init__(self, notes: NotificationStore, settings: NotifySettings, secrets_key: str | None,
                 session: aiohttp.ClientSession) -> None:
        self._notes = notes
        self._settings = settings
        self._key = secrets_key
        self._session = session
        self._policy = RetryPolicy(base_ms=settings.retry_base_ms, max_ms=max(settings.retry_base_ms, 300_000),
                                   max_tries=settings.max_tries, max_age_ms=settings.max_age_seconds * 1000)
        self._lines: dict[str, Line] = {}
        self._queued: set[str] = set()
        self._admission = Admission(Limits(pool=settings.concurrency, endpoint=settings.endpoint_concurrency,
                                           smtp=SMTP_PARALLEL))
        self._smtp = SmtpPool(settings, SMTP_PARALLEL)
        self._destinations = Destinations(settings.webhook_allow)
        # Outcomes recorded together: while one write is out, the next tries' wait for it (no lingering: a
        # message sent but not yet recorded is the one a kill -9 would send twice).
        self._finish: Batcher[tuple[str, str, Doc], bool] = Batcher(lambda tries: notes.finish_many(tries, now_ms()))

        async def read_subscriptions(ids: list[str]) -> list[Subscription | None]:
            found = await notes.subscriptions_by_id(ids)
            return [found.get(sub_id) for sub_id in ids]

        self._read_subscription: Batcher[str, Subscription | None] = Batcher(read_subscriptions)
        self._tasks: set[asyncio.Task[None]] = set()
        self._token = uuid.uuid4().hex[:12]
        self._subs: dict[str, tuple[Subscription, float]] = {}
        self._owned: dict[str, Doc] = {}  # deliveries written leased to this process, waiting in a line
        self._due: list[int] = []  # when what this process knows of comes due (a heap; the earliest first)
        self._looked = float("-inf")  # when the sweep last read the database (monotonic)

    @property
    def lease_ms(self) -> int:
        return (self._settings.timeout_seconds * 2 + 5) * 1000

    @property
    def token(self) -> str:
        """This process's mark on the deliveries it holds (a new one is written holding it: :meth:`take`)."""
        return self._token

    def take(self, doc: Doc) -> None:
        """Line up a delivery this process has just written, leased to itself (``lease_token``: :attr:`token`)."""
        self._owned[doc["_id"]] = doc
        self.offer(doc["_id"], doc["channel"], doc["target"], str(doc.get("owner", "")))

    def offer(self, delivery_id: str, channel: str, target: str, owner: str) -> None:
        """Put a due delivery in its endpoint's line (nothing if it is there or being tried already)."""
        if delivery_id in self._queued:
            return
        endpoint = endpoint_of(channel, target)
        self._queued.add(delivery_id)
        self._lines.setdefault(endpoint, Line()).waiting.append((delivery_id, owner))
        self._pump()

    def due_at(self, at_ms: int) -> None:
        """Something this process wrote or saw comes due at ``at_ms``: the sweep reads the database then."""
        if len(self._due) < DUE_KEPT:  # beyond: the look every SWEEP_LOOK_SECONDS finds the rest
            heapq.heappush(self._due, at_ms)

    async def sweep(self) -> int:
        """Offer every due delivery (retries come due, a restarted or other notifier's left-overs), when
        something known comes due or ``SWEEP_LOOK_SECONDS`` after the last read; how many were due."""
        now, looked = now_ms(), time.monotonic()
        if (not self._due or self._due[0] > now) and looked - self._looked < SWEEP_LOOK_SECONDS:
            return 0
        due = await self._notes.due(now, SWEEP_LIMIT)
        self._looked = looked
        while self._due and self._due[0] <= now:  # what came due by now was in that read
            heapq.heappop(self._due)
        for doc in due:
            lease_ms = int(doc.get("lease_ms", 0))
            if lease_ms < now_ms():
                self.offer(doc["_id"], doc["channel"], doc["target"], str(doc.get("owner", "")))
            else:  # another try holds it: due again if its lease ends unrecorded
                self.due_at(lease_ms)
        if len(due) >= SWEEP_LIMIT:  # more than one read takes: the rest at the next sweep
            self.due_at(now)
        return len(due)

    def _pump(self) -> None:
        for endpoint, line in list(self._lines.items()):
            while line.waiting and self._admission.admits(endpoint, line.waiting[0][1]):
                delivery_id, owner = line.waiting.popleft()
                ticket = self._admission.start(endpoint, owner)
                task = asyncio.create_task(self._try(ticket, delivery_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if not line.waiting and not self._admission.in_flight(endpoint):
                del self._lines[endpoint]

    async def _try(self, ticket: Ticket, delivery_id: str) -> None:
        """A try holds its slot while it sends; recording the outcome (with others', batched) does not."""
        slot = Slot(self, ticket)
        try:
            await self._try_once(delivery_id, slot)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the database away: the lease ends, and the sweep offers it again
            log.warning("a notification try could not be recorded; it is tried again", delivery_id=delivery_id,
                        error=repr(e))
            self.due_at(now_ms() + self.lease_ms)
        finally:
            self._owned.pop(delivery_id, None)
            self._queued.discard(delivery_id)
            slot.release(None)

    def _released(self, ticket: Ticket, outcome: Outcome | None) -> None:
        self._admission.end(ticket, sent=outcome is not None and outcome.sent,
                            reply=Reply.UNTRIED if outcome is None else outcome.reply)
        line = self._lines.get(ticket.endpoint)
        if line is not None and not line.waiting and not self._admission.in_flight(ticket.endpoint):
            del self._lines[ticket.endpoint]
        self._pump()

    async def _held(self, delivery_id: str) -> Doc | None:
        """The delivery, held by this process for one try: written so (its lease renewed if the wait in its line
        used much of it), or claimed now; None when sent, failed or held elsewhere meanwhile."""
        now = now_ms()
        doc = self._owned.pop(delivery_id, None)
        if doc is None:
            return await self._notes.claim(delivery_id, now, self.lease_ms, self._token)
        renew = now + self._settings.timeout_seconds * 1500 > int(doc["lease_ms"])
        if renew and not await self._notes.extend(delivery_id, now, self.lease_ms, self._token):
            return None
        return doc

    async def _try_once(self, delivery_id: str, slot: Slot) -> None:
        """One try of a delivery (nothing if it was sent, failed or is held elsewhere meanwhile)."""
        doc = await self._held(delivery_id)
        if doc is None:
            return
        held: list[Doc] = []
        if doc.get("kind") == "digest":
            window = int(str(doc["change"]).rpartition("/")[2])  # a digest's change is digest/<window's start>
            held = await self._notes.held(delivery_id, str(doc["owner"]), window, int(doc["event_ms"]))
            outcome = await self._send(doc, held) if held else NOTHING_TO_SEND
        else:
            outcome = await self._send(doc, [])
        slot.release(outcome)
        await self._record(doc, outcome)
        if outcome.sent and held:
            await self._notes.mark_digested([h["_id"] for h in held], now_ms())

    async def _send(self, doc: Doc, held: list[Doc]) -> Outcome:
        subject, text = str(doc.get("subject", "")), str(doc.get("text", ""))
        body = bytes(doc.get("body") or b"")
        if held:
            msg = digest([str(h.get("subject", "")) for h in held], len(held),
                         self._settings.rate_window_seconds)
            subject, text = msg.subject, msg.text
            body = (chat_body(msg) if doc.get("format") == Format.CHAT
                    else cloudevent_body(doc["_id"], msg, "", int(doc["created_ms"])))
        if doc["channel"] == "email":
            return await self._smtp.send(doc["target"], email_bytes(
                self._settings, doc["target"], subject, text, delivery_id=doc["_id"],
                event_id=str(doc.get("event_id", ""))))
        sub = await self._subscription(str(doc.get("subscription_id", "")))
        if sub is None:
            return Outcome.failed("its webhook was deleted before the message went", retry=False,
                                  reply=Reply.UNTRIED)
        secret = open_secret(sub.sealed_secret, self._key)
        content_type = "application/json" if doc.get("format") == Format.CHAT else "application/cloudevents+json"
        return await post_webhook(self._session, doc["target"], body, secret=secret, content_type=content_type,
                                  delivery_id=doc["_id"], event_id=str(doc.get("event_id", "")),
                                  timeout_s=self._settings.timeout_seconds, destinations=self._destinations)

    async def _subscription(self, sub_id: str) -> Subscription | None:
        """A webhook's subscription (its URL's signing key), kept a minute or until its owner's change."""
        cached = self._subs.get(sub_id)
        if cached is not None and time.monotonic() - cached[1] < SUBSCRIPTION_SECONDS:
            return cached[0]
        sub = await self._read_subscription(sub_id)
        if sub is not None:
            if len(self._subs) >= SUBSCRIPTIONS_KEPT:
                self._subs.clear()
            self._subs[sub_id] = (sub, time.monotonic())
        return sub

    def forget(self, owner: str) -> None:
        """A change of ``owner``'s subscriptions: read theirs again (a deleted webhook is told nothing more)."""
        for sub_id in [k for k, (sub, _) in self._subs.items() if sub.owner == owner]:
            del self._subs[sub_id]

    async def _record(self, doc: Doc, outcome: Outcome) -> None:
        now = now_ms()
        tries = int(doc.get("tries", 0)) + 1
        channel = str(doc["channel"])
        if outcome.sent:
            changes: Doc = {"state": DeliveryState.SENT, "last_error": ""}  # sent_ms: when recorded
            result = "sent"
            DELIVERY_SECONDS.labels(channel).observe(max(0.0, (now - int(doc.get("event_ms", now))) / 1000))
        else:
            at = next_try_ms(self._policy, tries, int(doc["created_ms"]), now, doc["_id"]) if outcome.retry else None
            if at is None:
                changes = {"state": DeliveryState.FAILED, "last_error": outcome.error, "failed_ms": now}
                result = "failed"
                log.warning("notification failed for good", delivery_id=doc["_id"], channel=channel, tries=tries,
                            error=outcome.error)
            else:
                changes = {"next_ms": at, "last_error": outcome.error}
                result = "retried"
                self.due_at(at)
        if await self._finish((doc["_id"], self._token, changes)):  # with the other tries ending meanwhile
            NOTIFICATIONS.labels(channel, result).inc()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._smtp.close()

