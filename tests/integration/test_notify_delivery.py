"""The notify service against real receivers: an SMTP server (aiosmtpd) and HTTP endpoints (aiohttp) answering
200, 500, 500 three times then 200, hanging, or refusing; the real MongoDB-wire server; events on the in-process
bus. Checked as received: headers, bodies, signatures, how many of each, and what the user's deliveries say."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from services.notify import dispatch
from services.notify.service import start_notify
from shared.bus.memory import MemoryBus
from shared.db.embedded import free_port
from shared.db.notifications import expiry
from shared.db.store import Store, open_store
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobCompletedData,
    JobRetrying,
    JobRetryingData,
    TaskStarted,
    TaskStartedData,
)
from shared.jobconfig.notifykinds import Kind
from shared.jobconfig.sealing import new_key
from shared.notify.destinations import why_internal
from shared.notify.signing import new_secret, seal_secret
from shared.notify.subscriptions import PLATFORM, Channel, Format, Subscription
from shared.ops.vitals import Vitals
from shared.records import JobState, now_ms
from shared.runtime.relay import start_relay
from shared.settings.model import Settings
from tests.cloudeventspec import checked
from tests.infra import unique
from tests.journalview import journal
from tests.notifyharness import Hooks, SmtpServer, wait_until
from tests.unit.factories import make_config, make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    async with Hooks() as h:
        yield h


@dataclass
class Notifier:
    store: Store
    bus: MemoryBus
    key: str
    hooks: Hooks

    async def job(self, user: str, *, switch: dict[str, bool] | None = None, email: str = "",
                  big: bool = False) -> str:
        extras: dict[str, Any] = {"jobStatusChangeNotification": switch} if switch is not None else {}
        if big:  # configs past PACK_MIN_BYTES: stored apart from the job's document, its switch with them
            extras["notes"] = uuid.uuid4().hex * 1024
        job = make_job(make_config(jobName=unique("job"), extras=extras), user=user)
        await self.store.insert_job(job)
        if email:
            await self.store.users.update_one({"_id": user}, {"$set": {"email": email}}, upsert=True)
        return job.id

    async def webhook(self, owner: str, path: str, kinds: set[Kind], *, fmt: Format = Format.CLOUDEVENTS,
                      job: str = "") -> Subscription:
        secret = new_secret()
        self.hooks.secrets[path.rsplit("/", 1)[-1]] = secret
        sub = Subscription(id=uuid.uuid4().hex[:16], owner=owner, channel=Channel.WEBHOOK, kinds=frozenset(kinds),
                           url=self.hooks.url(path), format=fmt, job=job,
                           sealed_secret=seal_secret(secret, self.key), created_ms=1)
        await self.store.notifications.add_subscription(sub)
        return sub

    async def email(self, owner: str, kinds: set[Kind]) -> None:
        await self.store.notifications.add_subscription(Subscription(
            id=uuid.uuid4().hex[:16], owner=owner, channel=Channel.EMAIL, kinds=frozenset(kinds), created_ms=1))

    async def deliveries(self, owner: str) -> list[dict[str, Any]]:
        return await self.store.notifications.deliveries_of(owner, 0, 100, now_ms())


def started(job_id: str, index: int = 0, attempt: int = 0) -> TaskStarted:
    return TaskStarted(subject=job_id, data=TaskStartedData(job_id=job_id, attempt=attempt, role="main", index=index,
                                                            node_id="n1", container_id=f"c{index}"))


def failed(job_id: str, attempt: int = 0) -> JobCompleted:
    return JobCompleted(subject=job_id, data=JobCompletedData(
        job_id=job_id, attempt=attempt, state=JobState.FAILED, exit_code=3, reason="the command exited with 3"))


def retried(job_id: str, attempt: int) -> JobRetrying:
    return JobRetrying(subject=job_id, data=JobRetryingData(job_id=job_id, attempt=attempt, exit_code=1,
                                                            reason="exit 1", counter="user", retry_at_ms=0))


async def _notifier(stack: AsyncExitStack, mongo_uri: str, hooks: Hooks, smtp_port: int,
                    **extra: str) -> Notifier:
    key = new_key()
    settings = Settings.from_env({
        "PAIQ_SECRETS_KEY": key, "PAIQ_SMTP_HOST": "127.0.0.1", "PAIQ_SMTP_PORT": str(smtp_port),
        "PAIQ_SMTP_TLS": "none", "PAIQ_SMTP_FROM": "paiq@cluster.example", "PAIQ_PORTAL_URL": "http://portal.example",
        "PAIQ_NOTIFY_RETRY_BASE_MS": "100", "PAIQ_NOTIFY_TIMEOUT_SECONDS": "1",
        "PAIQ_NOTIFY_WEBHOOK_ALLOW": "127.0.0.1", **extra})
    store = await stack.enter_async_context(open_store(mongo_uri, unique("notify_").replace("-", "_")))
    await store.ensure_indexes()
    bus = MemoryBus()
    stack.push_async_callback(bus.close)
    vitals = Vitals()
    await start_relay(stack, store, bus, vitals, queue_prefix="paiq", retention_hours=0)
    await start_notify(stack, settings, store, bus, vitals)
    return Notifier(store=store, bus=bus, key=key, hooks=hooks)


async def recorded(n: Notifier, owner: str, check: Any, limit_s: float = 5) -> list[dict[str, Any]]:
    """The owner's deliveries once ``check`` holds of them (outcomes are recorded in batches, a moment after
    the messages went)."""
    deadline = time.monotonic() + limit_s
    while not check(found := await n.deliveries(owner)):
        assert time.monotonic() < deadline, f"not within {limit_s:g} s: {found}"
        await asyncio.sleep(0.05)
    return found


async def publish(n: Notifier, *events: CloudEvent) -> None:
    """The changes as the platform's writers store them: journaled (the notifier reads the journal)."""
    await journal(n.store, events)


async def test_email_and_webhooks_get_each_change_once_signed_with_exit_code_and_reason(
        mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        user = unique("u")
        await n.email(user, {Kind.SUCCEEDED})  # the job's switch chooses: running and failed
        await n.webhook(user, "ok/ce", {Kind.SUCCEEDED})
        await n.webhook(user, "ok/chat", set(Kind), fmt=Format.CHAT)
        job_id = await n.job(user, switch={"running": True, "failed": True}, email=f"{user}@example.com")
        await publish(n, started(job_id, 0), started(job_id, 1), failed(job_id))
        await wait_until(lambda: len(smtp.box.mails) >= 2 and len(hooks.received["ce"]) >= 2
                         and len(hooks.received["chat"]) >= 2, 10, "two messages per channel")
        await publish(n, failed(job_id), started(job_id, 2))  # the same changes again (redelivered, later tasks)
        await asyncio.sleep(1.5)  # time to send them again, were they to be

        mails = smtp.box.to(f"{user}@example.com")
        name = job_id.split("~")[1]
        assert sorted(m.message["Subject"] for m in mails) == [f"[paiq] job {name} failed with exit code 3",
                                                               f"[paiq] job {name} is running"]
        fail_mail = next(m for m in mails if "failed" in m.message["Subject"])
        assert fail_mail.message["From"] == "paiq@cluster.example"
        assert fail_mail.message["Message-ID"].endswith("@cluster.example>")
        assert fail_mail.message["X-Paiq-Event-Id"]
        text = fail_mail.message.get_content()
        assert "exit code 3" in text and "Reason: the command exited with 3" in text
        assert f"http://portal.example/#/job/{user}/" in text
        for name in ("ce", "chat"):
            got = hooks.received[name]
            assert len(got) == 2 and all(r.signed for r in got), name
            assert len({r.headers["X-Paiq-Delivery"] for r in got}) == 2
        kinds = sorted(r.body["data"]["kind"] for r in hooks.received["ce"])
        assert kinds == ["failed", "running"]
        for r in hooks.received["ce"]:  # valid CloudEvents, as the official SDK reads them
            assert checked(json.dumps(r.body).encode(), r.headers["Content-Type"]).get_subject() == job_id
        fail_event = next(r.body for r in hooks.received["ce"] if r.body["data"]["kind"] == "failed")
        assert fail_event["data"]["exitCode"] == 3 and fail_event["data"]["reason"] == "the command exited with 3"
        assert fail_event["id"] == next(r.headers["X-Paiq-Delivery"] for r in hooks.received["ce"]
                                        if r.body["data"]["kind"] == "failed")
        assert "failed with exit code 3" in next(r.body["text"] for r in hooks.received["chat"]
                                                 if "failed" in r.body["text"])
        listed = await n.deliveries(user)
        assert len(listed) == 6 and {d["state"] for d in listed} == {"sent"}


async def test_without_an_smtp_host_email_fails_saying_so_and_webhooks_still_go(
        mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    """The docs' promise (Notifications): without PAIQ_SMTP_HOST no mail goes, such a delivery fails saying
    so (not tried again), and webhooks still do."""
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port, PAIQ_SMTP_HOST="")
        user = unique("u")
        await n.email(user, {Kind.FAILED})
        await n.webhook(user, "ok/nosmtp", {Kind.FAILED})
        job_id = await n.job(user, email=f"{user}@example.com")
        await publish(n, failed(job_id))
        found = await recorded(n, user, lambda ds: len(ds) == 2 and all(d["state"] in ("sent", "failed") for d in ds))
        by_channel = {d["channel"]: d for d in found}
        assert by_channel["webhook"]["state"] == "sent" and len(hooks.received["nosmtp"]) == 1
        assert by_channel["email"]["state"] == "failed" and by_channel["email"]["tries"] == 1
        assert "no SMTP server is configured (the operator sets PAIQ_SMTP_HOST)" in by_channel["email"]["last_error"]
        assert smtp.box.mails == [], "no mail went anywhere"


async def test_a_webhook_that_answered_gets_at_most_two_tries_at_once(
        mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    """The docs' promise (Delivery semantics): at most PAIQ_NOTIFY_ENDPOINT_CONCURRENCY (2) tries at once to one
    webhook, however many changes wait for it (once it has answered: a new endpoint gets one at a time)."""
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        user = unique("u")
        await n.webhook(user, "slow/0.5/line", {Kind.FAILED})
        first = await n.job(user)
        await publish(n, failed(first))
        await wait_until(lambda: len(hooks.received["line"]) == 1, 10, "the endpoint's first answer")
        jobs = [await n.job(user) for _ in range(8)]
        await publish(n, *(failed(j) for j in jobs))
        await wait_until(lambda: len(hooks.received["line"]) == 9, 20, "the eight changes delivered")
        assert hooks.most_at_once["line"] == 2, "two tries at once to the endpoint, never more"


async def test_500_three_times_then_200_is_received_once(mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        user = unique("u")
        await n.webhook(user, "flaky/3/f", {Kind.FAILED})
        job_id = await n.job(user)
        await publish(n, failed(job_id))
        await wait_until(lambda: len(hooks.received["f"]) == 1, 15, "the fourth try answered 200")
        assert hooks.seen["f"] == 4
        [delivery] = await recorded(n, user, lambda ds: ds[0]["state"] == "sent")
        assert delivery["tries"] == 4


async def test_a_dead_endpoint_delays_no_one_else_and_fails_visibly(mongo_uri: str, hooks: Hooks,
                                                                    smtp: SmtpServer) -> None:
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port, PAIQ_NOTIFY_MAX_TRIES="2")
        alice, bob, carol = unique("a"), unique("b"), unique("c")
        await n.webhook(alice, "hang/h", {Kind.FAILED})
        await n.webhook(carol, "ok/x", {Kind.FAILED})  # carol's second webhook goes nowhere: refused
        sub = await n.webhook(carol, "ok/refused", {Kind.FAILED})
        await n.store.notifications.add_subscription(sub.model_copy(update={"url": f"http://127.0.0.1:{free_port()}/"}))
        await n.webhook(bob, "ok/b", {Kind.FAILED})
        jobs = [await n.job(alice) for _ in range(4)]
        await publish(n, *(failed(j) for j in jobs))
        bob_job, carol_job = await n.job(bob), await n.job(carol)
        await publish(n, failed(carol_job), failed(bob_job))
        await wait_until(lambda: len(hooks.received["b"]) == 1, 1.0, "bob's webhook told within a second")
        # carol's working webhook too (its change went out with bob's; a loaded run once read it a moment early)
        await wait_until(lambda: len(hooks.received["x"]) == 1, 1.0, "carol's working webhook told within a second")
        await wait_until(lambda: hooks.seen["h"] >= 2, 5, "alice's hanging webhook tried (one at a time)")

        async def refused_failed() -> bool:
            return any(d["state"] == "failed" for d in await n.deliveries(carol))

        for _ in range(100):
            if await refused_failed():
                break
            await asyncio.sleep(0.1)
        failed_one = next(d for d in await n.deliveries(carol) if d["state"] == "failed")
        assert failed_one["tries"] == 2 and "could not connect" in failed_one["last_error"]


async def test_the_rate_limit_coalesces_a_crash_loop_into_a_digest(mongo_uri: str, hooks: Hooks,
                                                                   smtp: SmtpServer) -> None:
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port, PAIQ_NOTIFY_RATE_LIMIT="2",
                            PAIQ_NOTIFY_RATE_WINDOW_SECONDS="3")
        user = unique("u")
        await n.webhook(user, "ok/r", {Kind.RETRIED})
        job_id = await n.job(user, email=f"{user}@example.com")
        await n.email(user, {Kind.RETRIED})
        await asyncio.sleep(3 - time.time() % 3)  # all seven in one window (windows start at multiples of 3 s)
        await publish(n, *(retried(job_id, a) for a in range(7)))
        try:  # the window ends within 3 s; the sweep offers its digest within a second of that
            await wait_until(lambda: len(hooks.received["r"]) >= 3 and len(smtp.box.mails) >= 3, 20,
                             "two messages, then the digest at the window's end")
        except AssertionError as e:  # say what each delivery came to (a full suite run once missed a digest)
            states = [(d["kind"], d["channel"], d["state"], d.get("tries"), d.get("next_ms"), d.get("last_error"))
                      for d in await n.deliveries(user)]
            raise AssertionError(f"{e}: webhooks {len(hooks.received['r'])}, mails {len(smtp.box.mails)}, "
                                 f"now_ms {now_ms()}, deliveries {states}") from None
        await asyncio.sleep(0.5)
        kinds = [r.body["data"].get("kind") for r in hooks.received["r"]]
        digests = [r for r in hooks.received["r"] if r.body["data"].get("kind") == "digest"]
        assert kinds.count("retried") == 2 and len(digests) == 1  # seven changes: two messages, one digest of five
        assert digests[0].body["data"]["count"] == 5 and digests[0].signed
        for r in hooks.received["r"]:  # the digest too is a valid CloudEvent (about no one job: no subject)
            checked(json.dumps(r.body).encode(), r.headers["Content-Type"])
        assert "subject" not in digests[0].body
        assert sum(1 for m in smtp.box.mails if "(digest)" in m.message["Subject"]) >= 1
        await recorded(n, user, lambda ds: [d["state"] for d in ds].count("digested") == 10)


async def test_a_platform_webhook_hears_every_users_jobs(mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        await n.webhook(PLATFORM, "ok/ops", {Kind.FAILED})
        jobs = [await n.job(unique("u")) for _ in range(3)]
        await publish(n, *(failed(j) for j in jobs))
        await wait_until(lambda: len(hooks.received["ops"]) == 3, 10, "the platform's webhook told of each")
        assert len(await n.deliveries(PLATFORM)) == 3


async def test_a_big_jobs_switch_is_read_from_its_configs_apart(mongo_uri: str, hooks: Hooks,
                                                                  smtp: SmtpServer) -> None:
    """The notifier reads a job's facts by projection; a job whose configs are not in plain sight is read whole,
    so its switch still chooses the kinds."""
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        user = unique("u")
        await n.email(user, {Kind.SUCCEEDED})
        job_id = await n.job(user, switch={"failed": True}, email=f"{user}@example.com", big=True)
        stored = await n.store.jobs.find_one({"_id": job_id}, {"configs_apart": 1, "packed_config": 1})
        assert stored is not None and (stored.get("configs_apart") or stored.get("packed_config"))
        await publish(n, failed(job_id))
        await wait_until(lambda: len(smtp.box.to(f"{user}@example.com")) == 1, 10, "the failure told by e-mail")


async def test_a_webhook_whose_name_resolves_inside_fails_at_once_and_is_never_retried(
        mongo_uri: str, hooks: Hooks, smtp: SmtpServer) -> None:
    """The operator allowed nothing inside (PAIQ_NOTIFY_WEBHOOK_ALLOW unset): a webhook named by this machine's
    host name, which resolves to an inside address (loopback, or its container's private one), and one at the
    metadata address are refused when the notifier connects: failed after one try, saying why, and nothing
    reaches the endpoint listening there."""
    host = socket.gethostname()
    resolved = {info[4][0] for info in await asyncio.get_running_loop().getaddrinfo(host, None)}
    assert resolved and all(why_internal(ipaddress.ip_address(a)) for a in resolved), resolved
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port, PAIQ_NOTIFY_WEBHOOK_ALLOW="")
        user = unique("s")
        named = await n.webhook(user, "ok/inside", {Kind.FAILED})
        await n.store.notifications.add_subscription(named.model_copy(
            update={"url": f"http://{host}:{hooks.port}/ok/inside"}))  # as if the check at creation were passed
        metadata = await n.webhook(user, "ok/metadata", {Kind.FAILED})
        await n.store.notifications.add_subscription(metadata.model_copy(
            update={"url": "http://169.254.169.254/latest/meta-data/"}))
        await publish(n, failed(await n.job(user)))

        deliveries = await recorded(n, user, lambda ds: [d["state"] for d in ds] == ["failed", "failed"])
        assert [(d["state"], d["tries"]) for d in deliveries] == [("failed", 1), ("failed", 1)], deliveries
        errors = sorted(d["last_error"] for d in deliveries)
        assert errors[0].startswith("refused: 169.254.169.254 is a link-local address"), errors
        assert errors[1].startswith(f"refused: {host} (") and "PAIQ_NOTIFY_WEBHOOK_ALLOW" in errors[1], errors
        await asyncio.sleep(0.5)  # a retry (100 ms base) would have come by now
        assert hooks.seen["inside"] == 0 and [d["tries"] for d in await n.deliveries(user)] == [1, 1]


async def test_three_subscriptions_to_one_url_get_one_post_per_change(mongo_uri: str, hooks: Hooks,
                                                                     smtp: SmtpServer) -> None:
    """A user's three subscriptions to one URL (different kinds and formats): one change, one POST, as the
    subscription made first says (its format, signed with its key); one delivery in their list."""
    async with AsyncExitStack() as stack:
        n = await _notifier(stack, mongo_uri, hooks, smtp.port)
        user = unique("u")
        secrets = [new_secret() for _ in range(3)]
        made = [({Kind.FAILED}, Format.CLOUDEVENTS), ({Kind.FAILED, Kind.RUNNING}, Format.CHAT),
                (set(Kind), Format.CHAT)]
        for i, (kinds, fmt) in enumerate(made):
            await n.store.notifications.add_subscription(Subscription(
                id=uuid.uuid4().hex[:16], owner=user, channel=Channel.WEBHOOK, kinds=frozenset(kinds),
                url=hooks.url("ok/same"), format=fmt, sealed_secret=seal_secret(secrets[i], n.key),
                created_ms=now_ms() - 1000 + i))
        hooks.secrets["same"] = secrets[0]
        await publish(n, failed(await n.job(user)))
        await wait_until(lambda: hooks.seen["same"] >= 1, 10, "the change posted")
        await asyncio.sleep(1.0)  # time for more POSTs, were there to be
        assert hooks.seen["same"] == 1
        [got] = hooks.received["same"]
        assert got.signed and checked(json.dumps(got.body).encode(), got.headers["Content-Type"])
        assert len(await recorded(n, user, lambda ds: [d["state"] for d in ds] == ["sent"])) == 1


async def test_an_idle_sweep_reads_the_database_only_when_something_comes_due(
        mongo_uri: str, smtp: SmtpServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep reads what is due at start, then only when something this process knows of comes due (here a
    retry's time) or SWEEP_LOOK_SECONDS after its last read: a delivery another process left behind is found
    then, and sent."""
    monkeypatch.setattr(dispatch, "SWEEP_LOOK_SECONDS", 1.0)
    settings = Settings.from_env({"PAIQ_SMTP_HOST": "127.0.0.1", "PAIQ_SMTP_PORT": str(smtp.port),
                                  "PAIQ_SMTP_TLS": "none", "PAIQ_SMTP_FROM": "paiq@cluster.example"})
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(mongo_uri, unique("sweep_").replace("-", "_")))
        await store.ensure_indexes()
        reads: list[int] = []
        due = store.notifications.due

        async def counted(now: int, limit: int) -> list[dict[str, Any]]:
            found = await due(now, limit)
            reads.append(len(found))
            return found

        monkeypatch.setattr(store.notifications, "due", counted)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        dispatcher = dispatch.Dispatcher(store.notifications, settings.notify, None, session)
        stack.push_async_callback(dispatcher.close)
        assert await dispatcher.sweep() == 0 and reads == [0]  # at start
        for _ in range(5):
            await dispatcher.sweep()
        assert reads == [0], "swept the database with nothing known to come due"
        dispatcher.due_at(now_ms() + 300)  # e.g. a retry this process scheduled
        await dispatcher.sweep()
        assert reads == [0]
        await asyncio.sleep(0.35)
        await dispatcher.sweep()
        assert reads == [0, 0], "a retry's time came and the sweep did not look"
        user, now = unique("u"), now_ms()  # another notifier's delivery, left pending and no longer leased
        await store.notifications.insert_delivery({
            "_id": unique("d"), "owner": user, "job_id": "", "job_name": "", "kind": "failed", "change": "c",
            "channel": "email", "target": f"{user}@example.com", "format": "text", "subscription_id": "",
            "state": "pending", "tries": 0, "next_ms": now, "lease_ms": 0, "created_ms": now, "event_ms": now,
            "event_id": "", "subject": "left behind", "text": "by another notifier", "body": b"", "last_error": "",
            "expires_at": expiry(now + 3_600_000)})
        await dispatcher.sweep()
        assert reads == [0, 0]
        await asyncio.sleep(1.05)
        assert await dispatcher.sweep() == 1 and reads == [0, 0, 1]
        await wait_until(lambda: len(smtp.box.mails) == 1, 10, "the left-over delivery sent")
        await dispatcher.sweep()  # a read, after the wait (the look period): the place the times below count from
        read = len(reads)
        dispatcher.due_at(now_ms() + 200)  # a retry's time, and a later one (a digest window's end, a lease)
        dispatcher.due_at(now_ms() + 550)
        await asyncio.sleep(0.25)
        await dispatcher.sweep()
        assert len(reads) == read + 1, "the first time came and the sweep did not look"
        await asyncio.sleep(0.4)  # the later time has come; the look period (1 s) has not
        await dispatcher.sweep()
        assert len(reads) == read + 2, "the later time was dropped by the read at the earlier one"


async def test_an_intake_back_after_the_journal_removed_its_place_moves_past_the_gap_once(
        mongo_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notifier was away longer than the journal keeps (its place 2, the journal's numbers 1-10 all removed
    by retention): its first round warns once and takes the first kept place; the rounds after, across look
    periods, neither warn again nor read the removed range again."""
    from structlog.testing import capture_logs

    from services.notify import intake as intake_module
    from shared.db.journal import META_ID
    from shared.ops.vitals import Vitals

    monkeypatch.setattr(intake_module, "LOOK_SECONDS", 0.1)
    async with open_store(mongo_uri, unique("gap_").replace("-", "_")) as store:
        await store.journal.ensure_indexes()
        await store.meta.insert_one({"_id": META_ID, "last": 10, "published": 10, "first": 11})
        await store.meta.insert_one({"_id": intake_module.CURSOR_ID, "seq": 2})
        store.journal.tail.advanced(10)  # as its relay told it
        ranges: list[tuple[int, int]] = []
        read = store.journal.read

        async def counted(after: int, limit: int = 500, through: int | None = None) -> Any:
            ranges.append((after, through or after + limit))
            return await read(after, limit, through)

        monkeypatch.setattr(store.journal, "read", counted)

        async def handle(_: Any) -> list[Any]:
            return []

        intake = intake_module.Intake(store, handle, Vitals(), concurrency=1)
        with capture_logs() as logs:
            for _ in range(4):
                assert await intake.round() is False
                await asyncio.sleep(0.15)  # past the look period: the journal's state is read again
        warned = [e for e in logs if "longer than the journal keeps" in e["event"]]
        assert len(warned) == 1 and warned[0]["missed"] == 8, logs
        assert [r for r in ranges if r[0] < r[1]] == [], f"the removed range read: {ranges}"


async def test_a_burst_of_changes_moves_the_intakes_place_about_once_a_second(
        mongo_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve changes read two a batch: each is handled once, and the intake's place is written twice (after
    the first batch, and once the changes stopped, at the first look a second after), not once a batch; changes
    that come one at a time, each after the intake went idle, move it no more often. A second intake that takes
    over before the place was written last would handle from the place written, again (each delivery's id makes
    that harmless): the place never runs ahead of what was handled."""
    from services.notify import intake as intake_module
    from shared.bus.memory import MemoryBus
    from shared.ops.vitals import Vitals
    from shared.runtime.relay import Relay

    monkeypatch.setattr(intake_module, "BATCH", 2)
    async with open_store(mongo_uri, unique("burst_").replace("-", "_")) as store:
        await store.journal.ensure_indexes()
        handled: list[str] = []

        async def handle(event: CloudEvent) -> list[CloudEvent]:
            handled.append(event.id)
            return []

        intake = intake_module.Intake(store, handle, Vitals(), concurrency=1)
        await intake.cursor()  # made at the journal's newest (0), as at a notifier's first start
        for i in range(12):
            job_id = f"u~burst{i}~0123456789ab"
            await store.journal.record([JobCompleted(subject=job_id, data=JobCompletedData(
                job_id=job_id, attempt=0, state=JobState.SUCCEEDED))], version=1, session=None)
        relay = Relay(store, MemoryBus(), retention_ms=0)
        while await relay.round():
            pass
        writes: list[int] = []
        update_one = store.meta.update_one

        async def counted(filter: dict[str, Any], update: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if filter.get("_id") == intake_module.CURSOR_ID:
                writes.append(int(update["$max"]["seq"]))
            return await update_one(filter, update, *args, **kwargs)

        monkeypatch.setattr(store.meta, "update_one", counted)
        assert await intake._lead()
        batches = 0
        while await intake.round():
            batches += 1
            assert (await store.meta.find_one({"_id": intake_module.CURSOR_ID}))["seq"] <= intake._at
        assert batches == 6 and len(handled) == 12 and len(set(handled)) == 12
        assert writes == [2], f"the place written at {writes}"
        await asyncio.sleep(intake_module.SAVE_SECONDS)
        assert await intake.round() is False  # the next look, changes stopped
        assert writes == [2, 12], f"the place written at {writes}"

        began = time.monotonic()
        for i in range(10):  # one change at a time, the intake idle after each
            job_id = f"u~single{i}~0123456789ab"
            await store.journal.record([JobCompleted(subject=job_id, data=JobCompletedData(
                job_id=job_id, attempt=0, state=JobState.SUCCEEDED))], version=1, session=None)
            while await relay.round():
                pass
            while await intake.round():
                pass
        took = time.monotonic() - began
        assert len(handled) == 22
        assert len(writes) - 2 <= 1 + took / intake_module.SAVE_SECONDS, f"{writes} in {took:.1f} s"
