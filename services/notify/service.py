"""The notify service: it reads the changes users are told of (``task.started``, ``job.completed``,
``job.retrying``) from the journal, in order, from where it stopped (:mod:`services.notify.intake`), and takes
the subscription changes from its own queue on ``paiq.events``; for each change it decides who is told
what (:mod:`shared.notify.decide`, pure), renders the message once (:mod:`shared.notify.render`) and writes one
delivery per recipient before anything is sent. The intake moves on once the deliveries are written;
:mod:`services.notify.dispatch` sends them. A change read again (the notifier killed before it moved on) finds
the change handled, or each delivery stored, and sends nothing twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import aiohttp
import structlog

from services.notify.channels import CheckedResolver
from services.notify.dispatch import Dispatcher
from services.notify.intake import Intake
from services.notify.metrics import NOTIFICATIONS
from shared.bus.base import Bus, Router, consume
from shared.db.batching import Batcher
from shared.db.notifications import DeliveryState, NotificationStore, expiry
from shared.db.store import Store
from shared.events import CloudEvent, JobCompleted, JobRetrying, SubscriptionsChanged, TaskStarted
from shared.jobconfig.notifykinds import Kind, switch_kinds
from shared.notify.admission import FAILING_SHARE
from shared.notify.decide import FINAL_KINDS, Change, JobFacts, Recipient, delivery_id, recipients
from shared.notify.destinations import Destinations
from shared.notify.render import Message, chat_body, cloudevent_body, message
from shared.notify.schedule import RateLimit
from shared.notify.subscriptions import PLATFORM, Channel, Format, Subscription
from shared.ops.vitals import Vitals
from shared.records import CONFIGS_APART, PACKED_CONFIG, JobRecord, now_ms
from shared.settings.model import Settings

log = structlog.get_logger("paiq.notify")

CACHE_SECONDS = 60.0  # a user's subscriptions, unless a change of them says otherwise sooner
CACHE_USERS = 10_000
SWEEP_SECONDS = 1.0
# Events in hand at once: each is a job read and its deliveries written, batched (shared.db.batching: 64 a
# call), so a burst of jobs ending is taken two bulk calls deep, the next batch's jobs read while this one's
# deliveries are written; not the bus's default of 16. A burst of 1,000 (tests/benchmarks/notify.py): p99
# 1.4-2.5 s with 128, 2.0-3.9 s with 64 at once, on the same loaded machine.
INTAKE_PREFETCH = 128
PURGE_SECONDS = 60


@dataclass
class Cached:
    at: float
    subscriptions: list[Subscription]
    email: str


class SubscriptionCache:
    """Users' subscriptions and addresses (and the platform's webhooks), read by index and kept a minute, or
    until ``notify.subscriptions_changed`` names their owner. The owners a burst of changes needs at once are
    read together (two queries), and each owner once however many of their jobs changed."""

    def __init__(self, notes: NotificationStore) -> None:
        self.notes = notes
        self.entries: OrderedDict[str, Cached] = OrderedDict()
        self.reading: dict[str, asyncio.Future[Cached]] = {}
        self._read: Batcher[str, Cached] = Batcher(self._read_many)

    async def _read_many(self, owners: list[str]) -> list[Cached]:
        subs = await self.notes.subscriptions_of_many(owners)
        users = [o for o in owners if o != PLATFORM]
        emails = await self.notes.user_emails(users) if users else {}
        now = time.monotonic()
        return [Cached(at=now, subscriptions=subs.get(o, []), email=emails.get(o, "")) for o in owners]

    async def of(self, owner: str) -> Cached:
        entry = self.entries.get(owner)
        if entry is not None and time.monotonic() - entry.at < CACHE_SECONDS:
            self.entries.move_to_end(owner)
            return entry
        pending = self.reading.get(owner)
        if pending is None:
            pending = self.reading[owner] = asyncio.ensure_future(self._read(owner))
            pending.add_done_callback(lambda done: self._done(owner, done))
        return await asyncio.shield(pending)

    def _done(self, owner: str, done: asyncio.Future[Cached]) -> None:
        if self.reading.get(owner) is not done:
            return  # forgotten meanwhile (a change of the owner's): not kept
        del self.reading[owner]
        if done.cancelled() or done.exception() is not None:
            return
        self.entries[owner] = done.result()
        while len(self.entries) > CACHE_USERS:
            self.entries.popitem(last=False)

    def forget(self, owner: str) -> None:
        self.entries.pop(owner, None)
        self.reading.pop(owner, None)  # a read begun before the change: the next one reads again


@dataclass
class NotifyDeps:
    settings: Settings
    store: Store
    bus: Bus
    dispatcher: Dispatcher
    vitals: Vitals = field(default_factory=Vitals)
    cache: SubscriptionCache = field(init=False)
    # A burst of changes costs a few bulk round trips: the jobs read, the deliveries written, together.
    read_job: Batcher[str, JobFacts | None] = field(init=False)
    write_delivery: Batcher[dict[str, object], bool] = field(init=False)

    def __post_init__(self) -> None:
        self.cache = SubscriptionCache(self.store.notifications)

        async def read_jobs(ids: list[str]) -> list[JobFacts | None]:
            docs = await self.store.notifications.job_facts(ids)
            whole = [i for i, d in docs.items() if d.get(PACKED_CONFIG) or d.get(CONFIGS_APART)]  # big configs
            jobs = await self.store.get_jobs(whole) if whole else {}
            return [_facts_of(job_id, docs.get(job_id), jobs.get(job_id)) for job_id in ids]

        self.read_job = Batcher(read_jobs)
        self.write_delivery = Batcher(self.store.notifications.insert_deliveries)

    @property
    def notes(self) -> NotificationStore:
        return self.store.notifications

    @property
    def keep_ms(self) -> int:
        return int(self.settings.notify.keep_days * 86_400_000)

    @property
    def rate(self) -> RateLimit:
        n = self.settings.notify
        return RateLimit(limit=n.rate_limit, window_ms=n.rate_window_seconds * 1000)

    @property
    def portal_url(self) -> str:
        return self.settings.notify.portal_url or self.settings.api_url


def _at_ms(evt: CloudEvent) -> int:
    return int(evt.time.timestamp() * 1000)


def change_of(evt: CloudEvent) -> Change | None:
    """The change an event announces (None: one users are not told of)."""
    if isinstance(evt, TaskStarted):
        return Change(job_id=evt.data.job_id, kind=Kind.RUNNING, attempt=evt.data.attempt, event_id=evt.id,
                      at_ms=_at_ms(evt))
    if isinstance(evt, JobCompleted) and evt.data.state in FINAL_KINDS:
        return Change(job_id=evt.data.job_id, kind=FINAL_KINDS[evt.data.state], attempt=evt.data.attempt,
                      event_id=evt.id, at_ms=_at_ms(evt), exit_code=evt.data.exit_code, reason=evt.data.reason)
    if isinstance(evt, JobRetrying):
        return Change(job_id=evt.data.job_id, kind=Kind.RETRIED, attempt=evt.data.attempt, event_id=evt.id,
                      at_ms=_at_ms(evt), exit_code=evt.data.exit_code, reason=evt.data.reason)
    return None


def job_facts(job: JobRecord) -> JobFacts:
    return JobFacts(job_id=job.id, user=job.user, name=job.name, virtual_cluster=job.virtual_cluster,
                    state=job.state.value, created_ms=job.created_ms, launched_ms=job.launched_ms,
                    completed_ms=job.completed_ms, retries=job.retries, switch=job.config.notification_kinds())


def _facts_of(job_id: str, doc: dict[str, object] | None, whole: JobRecord | None) -> JobFacts | None:
    """A job's facts from its projection (or, its configs packed or apart, from the job read whole)."""
    if whole is not None:
        return job_facts(whole)
    if doc is None or doc.get(PACKED_CONFIG) or doc.get(CONFIGS_APART):
        return None  # not stored (deleted meanwhile)
    config = doc.get("config")
    extras = config.get("extras") if isinstance(config, dict) else None
    facts = {k: v for k, v in doc.items() if k in JobFacts.model_fields}
    return JobFacts.model_validate({**facts, "job_id": job_id,
                                    "switch": switch_kinds(extras) if isinstance(extras, dict) else None})


async def on_change(evt: CloudEvent, deps: NotifyDeps) -> Sequence[CloudEvent]:
    change = change_of(evt)
    if change is None:
        return []
    # Every task of a job announces "running": past the first, one read says it was handled. Other changes
    # come once (or again, redelivered), and their deliveries' ids say so when written.
    marked = change.kind is Kind.RUNNING
    if marked and await deps.notes.change_handled(change.key):
        return []
    facts = await deps.read_job(change.job_id)
    if facts is None:
        return []  # deleted meanwhile
    mine, platform = await deps.cache.of(facts.user), await deps.cache.of(PLATFORM)
    told = recipients(change, facts, [*mine.subscriptions, *platform.subscriptions], mine.email)
    if told:
        msg = message(change, facts, deps.portal_url)
        await asyncio.gather(*(plan(deps, change, facts, recipient, msg) for recipient in told))  # one write
        log.info("job change to notify", job_id=change.job_id, kind=change.kind.value, recipients=len(told))
    if marked:
        await deps.notes.mark_change(change.key, now_ms() + deps.keep_ms)
    return []


async def plan(deps: NotifyDeps, change: Change, job: JobFacts, recipient: Recipient, msg: Message) -> None:
    """Write the delivery (pending, or held past the rate limit) and hand it to the dispatcher."""
    did = delivery_id(change.key, recipient.key)
    now = now_ms()
    rate = deps.rate
    held = False
    doc = _delivery(deps, did, change, job, recipient, msg, now)
    if rate.limit:  # a redelivered event counts once more: the limit errs towards fewer messages
        window = rate.window(now)
        window_end = window + rate.window_ms
        count = await deps.notes.count_message(f"{job.user}|{recipient.key}|{window}", window_end + rate.window_ms)
        held = rate.held(count)
        if held:
            doc.update(state=DeliveryState.HELD,
                       digest_id=await _digest_for(deps, job, recipient, window, window_end))
            deps.dispatcher.due_at(window_end)  # the digest goes when the window ends
    if not held:  # written leased to this process, which tries it at once (others once the lease ends)
        lease_until = now + deps.dispatcher.lease_ms
        doc.update(lease_ms=lease_until, lease_token=deps.dispatcher.token, next_ms=lease_until)
    if not await deps.write_delivery(doc):
        return  # written before: the change was handled (a redelivered event)
    if held:
        NOTIFICATIONS.labels(recipient.channel.value, "held").inc()
    else:
        deps.dispatcher.take(doc)


async def _digest_for(deps: NotifyDeps, job: JobFacts, recipient: Recipient, window: int, window_end: int) -> str:
    """The window's digest delivery for this recipient and user, made the first time one is held."""
    did = "digest-" + hashlib.sha256(f"{job.user}\n{recipient.key}\n{window}".encode()).hexdigest()[:25]
    await deps.notes.insert_delivery({
        "_id": did, "owner": recipient.owner if recipient.owner == PLATFORM else job.user, "job_id": "",
        "job_name": "", "kind": "digest", "change": f"digest/{window}", "channel": recipient.channel.value,
        "target": recipient.target, "format": recipient.format.value, "subscription_id": recipient.subscription_id,
        "state": DeliveryState.PENDING, "tries": 0, "next_ms": window_end, "lease_ms": 0, "created_ms": now_ms(),
        "event_ms": window_end, "event_id": "", "subject": "", "last_error": "",
        "expires_at": expiry(window_end + deps.keep_ms)})
    return did


def _delivery(deps: NotifyDeps, did: str, change: Change, job: JobFacts, recipient: Recipient, msg: Message,
              now: int) -> dict[str, object]:
    body = b""
    if recipient.channel is Channel.WEBHOOK:
        body = chat_body(msg) if recipient.format is Format.CHAT else cloudevent_body(did, msg, job.job_id,
                                                                                     change.at_ms)
    return {"_id": did, "owner": recipient.owner if recipient.owner == PLATFORM else job.user,
            "job_id": job.job_id, "job_name": job.name, "kind": change.kind.value, "change": change.key,
            "channel": recipient.channel.value, "target": recipient.target, "format": recipient.format.value,
            "subscription_id": recipient.subscription_id, "state": DeliveryState.PENDING, "tries": 0,
            "next_ms": now, "lease_ms": 0, "created_ms": now, "event_ms": change.at_ms, "event_id": change.event_id,
            "subject": msg.subject, "text": msg.text, "body": body, "last_error": "",
            "expires_at": expiry(now + deps.keep_ms)}


async def on_subscriptions_changed(evt: SubscriptionsChanged, deps: NotifyDeps) -> Sequence[CloudEvent]:
    deps.cache.forget(evt.data.owner)
    deps.dispatcher.forget(evt.data.owner)
    return []


# What the notify queue was bound to before the notifier read changes from the journal (services.notify.intake):
# unbound at start; a message of these still queued by an older paiq is handled as before (deliveries' ids
# make one handled twice a no-op).
RETIRED_BINDINGS = ("task.started", "job.completed", "job.retrying")


def notify_router(deps: NotifyDeps) -> Router:
    """The events the notify service takes from the bus: subscription changes (its queue is bound to these
    alone), and the changes an older paiq queued there."""
    router = Router()
    router.on(SubscriptionsChanged, lambda evt: on_subscriptions_changed(evt, deps))
    router.on(TaskStarted, lambda evt: on_change(evt, deps))
    router.on(JobCompleted, lambda evt: on_change(evt, deps))
    router.on(JobRetrying, lambda evt: on_change(evt, deps))
    return router


async def start_notify(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    n = settings.notify
    session = await stack.enter_async_context(aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        limit=n.concurrency + max(2, n.concurrency // FAILING_SHARE), limit_per_host=0,
        resolver=CheckedResolver(Destinations(n.webhook_allow)))))
    dispatcher = Dispatcher(store.notifications, settings.notify, settings.secrets_key, session)
    stack.push_async_callback(dispatcher.close)
    deps = NotifyDeps(settings=settings, store=store, bus=bus, dispatcher=dispatcher, vitals=vitals)
    router = notify_router(deps)
    # cancelled before the dispatcher and its session close
    await consume(stack, bus, f"{settings.queue_prefix}.notify", ["notify.subscriptions_changed"], router,
                  prefetch=INTAKE_PREFETCH, retired=RETIRED_BINDINGS)
    await Intake(store, lambda evt: on_change(evt, deps), vitals, concurrency=INTAKE_PREFETCH).start(stack)

    async def sweep() -> None:
        await dispatcher.sweep()

    async def purge() -> None:
        removed = await store.notifications.purge(now_ms())
        if removed:
            log.info("removed expired notification records", removed=removed)

    await sweep()
    vitals.periodic(stack, "notify-sweep", SWEEP_SECONDS, sweep)
    vitals.periodic(stack, "notify-purge", PURGE_SECONDS, purge)
    log.info("notify started", smtp=settings.notify.smtp_host or "none (no email)",
             rate_limit=settings.notify.rate_limit)
