"""An e-mail address changed through OpenPAI v1.8's user routes reaches the notifier at once: submit (the real
app) and the notify service share the bus and the store, a real SMTP server (aiosmtpd) receives. The notifier
has read (and keeps a minute) the user's address; after ``PUT /api/v2/users/{user}/email``, ``PUT
/api/v2/users/me`` or an administrator's ``PUT /api/v2/users``, the next change of the user's job goes to the
new address, not the cached one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.notify.service import start_notify
from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.events import JobCompleted, JobCompletedData
from shared.jobconfig.notifykinds import Kind
from shared.notify.subscriptions import Channel, Subscription
from shared.ops.vitals import Vitals
from shared.records import JobState
from shared.runtime.relay import start_relay
from shared.settings.model import Settings
from tests.infra import HASH_ROUNDS, unique
from tests.journalview import journal
from tests.notifyharness import SmtpServer, wait_until
from tests.unit.factories import make_config, make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@dataclass
class Both:
    api: TestClient[Any, Any]
    store: Store
    bus: MemoryBus
    smtp: SmtpServer
    tokens: dict[str, str]

    async def call(self, method: str, path: str, who: str, body: Any) -> None:
        resp = await self.api.request(method, path, json=body, headers={"Authorization": f"Bearer {self.tokens[who]}"})
        assert resp.status == 201, (method, path, resp.status, await resp.text())

    async def job_fails(self, user: str) -> None:
        job = make_job(make_config(jobName=unique("job")), user=user, state=JobState.FAILED)
        await self.store.insert_job(job)
        await journal(self.store, [JobCompleted(subject=job.id, data=JobCompletedData(
            job_id=job.id, attempt=0, state=JobState.FAILED, exit_code=1, reason="exit 1"))])


@pytest.fixture
async def both(mongo_uri: str) -> AsyncIterator[Both]:
    with SmtpServer() as smtp:
        async with AsyncExitStack() as stack:
            env = {"PAIQ_SMTP_HOST": "127.0.0.1", "PAIQ_SMTP_PORT": str(smtp.port), "PAIQ_SMTP_TLS": "none"}
            settings = Settings.from_env(env)
            store = await stack.enter_async_context(open_store(mongo_uri, f"notify_email_{uuid.uuid4().hex[:8]}"))
            await store.ensure_indexes()
            bus = MemoryBus()
            stack.push_async_callback(bus.close)
            users = Users(store, rounds=HASH_ROUNDS)
            await users.create("boss", "boss-password", admin=True)
            await users.create("alice", "alice-password", admin=False, email="old@example.com")
            await store.notifications.add_subscription(Subscription(
                id=uuid.uuid4().hex[:16], owner="alice", channel=Channel.EMAIL, kinds=frozenset({Kind.FAILED})))
            vitals = Vitals()
            await start_relay(stack, store, bus, vitals, queue_prefix="paiq", retention_hours=0)
            await start_notify(stack, settings, store, bus, vitals)
            deps = SubmitDeps(settings=settings, store=store, bus=bus, users=users)
            stack.callback(deps.cpu.shutdown)
            api = await stack.enter_async_context(TestClient(TestServer(create_app(deps))))
            tokens = {}
            for who in ("boss", "alice"):
                resp = await api.post("/api/v2/authn/basic/login",
                                      json={"username": who, "password": f"{who}-password"})
                tokens[who] = (await resp.json())["token"]
            yield Both(api=api, store=store, bus=bus, smtp=smtp, tokens=tokens)


@pytest.mark.parametrize(("who", "method", "path", "body"), [
    ("alice", "PUT", "/api/v2/users/alice/email", {"email": "new@example.com"}),
    ("alice", "PUT", "/api/v2/users/me", {"data": {"username": "alice", "email": "new@example.com"}}),
    ("boss", "PUT", "/api/v2/users", {"data": {"username": "alice", "email": "new@example.com"}}),
])
async def test_the_next_message_goes_to_the_address_set_through_v2(both: Both, who: str, method: str, path: str,
                                                                   body: dict[str, Any]) -> None:
    await both.job_fails("alice")
    await wait_until(lambda: len(both.smtp.box.to("old@example.com")) == 1, 10, "the first message, to the old address")
    await both.call(method, path, who, body)
    await both.job_fails("alice")
    await wait_until(lambda: len(both.smtp.box.to("new@example.com")) == 1, 10,
                     "the next message, to the new address (not the one the notifier keeps a minute)")
    assert len(both.smtp.box.to("old@example.com")) == 1
